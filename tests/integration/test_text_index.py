"""The text index behind literal search: the same hits as grepping every page, kept at each commit, each
path stored once, brought forward by a search only within its bytes and budget."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.engine import NewFile, Plan, blob_id
from worker.engine.budget import Budget, OverBudget, active
from worker.git import GitStore, Identity, WikiRepo
from worker.git.search import _grep, search
from worker.git.textindex import FILE_NAME, READ_BYTES, TextIndex
from worker.schema.edits import Costs

TESTER = Identity("t", "t@x")
WORDS = [
    "Redis",
    "redis",
    "REDIS",
    "persistence",
    "append only",
    "50%_off",
    "a\\b",
    "ünïcode",
    "x",
    'say "hi"',
]


def _commit(repo: WikiRepo, files: dict[str, bytes | None]) -> str:
    changes = {p: None if d is None else NewFile(blob_id(d), d) for p, d in files.items()}
    return repo.commit_plan(Plan(changes=changes), repo.head(), "m", TESTER)


@pytest.fixture
def repo(tmp_path: Path) -> WikiRepo:
    store = GitStore(tmp_path)
    store.create("w")
    return store.open("w")


def test_the_index_is_built_once_then_follows_each_commit(repo: WikiRepo) -> None:
    """Until built, literal search greps; once built it answers from the index, also after later commits
    that add, change, delete and move pages."""
    first = _commit(repo, {"wiki/a.md": b"about Redis\n", "wiki/b.md": b"nothing\n"})
    index = repo.text_index()
    assert index.candidates(first, "Redis") is None  # not built yet: the caller greps
    index.build(first)
    assert index.indexed() == first and (repo.path / FILE_NAME).exists()
    assert index.candidates(first, "redis") == ["wiki/a.md"]
    second = _commit(repo, {"wiki/a.md": None, "wiki/b.md": b"now redis here\n", "wiki/c/d.md": b"REDIS\n"})
    assert index.candidates(second, "Redis") == ["wiki/b.md", "wiki/c/d.md"]
    assert index.indexed() == second
    assert index.candidates(first, "Redis") == ["wiki/a.md"]  # back to an older commit: diffed again
    assert index.candidates(second, "re") is None  # under three characters: the caller greps
    hits = search(repo, second, "redis", limit=10)
    assert [(h.path, h.line) for h in hits] == [("wiki/b.md", 1), ("wiki/c/d.md", 1)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pages=st.dictionaries(
        st.sampled_from([f"wiki/{f}/{n}.md" for f in ("a", "b") for n in range(4)] + ["index.md"]),
        st.lists(st.sampled_from([*WORDS, "\n", " ", "\r\n"]), max_size=12).map("".join),
        max_size=8,
    ),
    query=st.sampled_from(["Redis", "append only", "50%_off", "a\\b", "ünïcode", "xxx", 'say "hi']),
    case_sensitive=st.booleans(),
    prefix=st.sampled_from(["", "wiki/", "wiki/a/", "index"]),
)
def test_indexed_search_equals_grep(
    tmp_path_factory: pytest.TempPathFactory,
    pages: dict[str, str],
    query: str,
    case_sensitive: bool,
    prefix: str,
) -> None:
    """On generated pages, hits from the index equal hits from git grep (path, line, text, version)."""
    store = GitStore(tmp_path_factory.mktemp("idx"))
    store.create("w")
    repo = store.open("w")
    commit = _commit(repo, {p: t.encode() for p, t in pages.items()})
    repo.text_index().build(commit)
    indexed = search(repo, commit, query, case_sensitive=case_sensitive, prefix=prefix, limit=1000)
    grepped = _grep(repo, commit, query, case_sensitive, prefix, 1000, None)
    assert [h[:4] for h in indexed] == [h[:4] for h in grepped]
    store.close()


def _built(index: TextIndex) -> None:
    """Wait for the index's background update to end."""
    running = index._building
    assert running is not None
    running.join(timeout=120)
    assert not running.is_alive()


def test_each_path_is_stored_once(repo: WikiRepo) -> None:
    """A page's path is in the index file once (the text is stored under its id)."""
    first = _commit(repo, {"index.md": b"# Index\n"})
    index = repo.text_index()
    index.build(first)
    page = "wiki/" + "long-folder-name-" * 20 + "/" + "page-" * 40 + ".md"
    second = _commit(repo, {page: b"about Redis\n" * 100})
    assert index.candidates(second, "redis") == [page]
    with contextlib.closing(sqlite3.connect(repo.path / FILE_NAME)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert (repo.path / FILE_NAME).read_bytes().count(page.encode()) == 1


def test_a_search_brings_forward_at_most_its_bytes_and_leaves_the_rest_to_the_background(
    repo: WikiRepo,
) -> None:
    """Over ``READ_BYTES`` of changed text, a search greps (the same hits) and a background thread brings
    the index forward; the next search answers from the index."""
    first = _commit(repo, {"wiki/a.md": b"about Redis\n"})
    index = repo.text_index()
    index.build(first)
    pages = {f"wiki/big/{n}.md": b"redis\n" + b"words " * (READ_BYTES // 6 // 4) for n in range(5)}
    second = _commit(repo, pages)
    assert index.candidates(second, "redis") is None
    _built(index)
    assert index.indexed() == second
    assert index.candidates(second, "redis") == ["wiki/a.md", *sorted(pages)]
    hits = search(repo, second, "Redis", limit=100)
    assert [h[:4] for h in hits] == [h[:4] for h in _grep(repo, second, "Redis", False, "", 100, None)]


def test_a_search_out_of_budget_leaves_the_update_to_the_background_and_the_next_continues(
    repo: WikiRepo,
) -> None:
    """A search whose budget runs out while it brings the index forward is OverBudget (QUERY_TOO_COSTLY
    for the caller) and hands the update to the background: the next search, under the same small
    budget, answers from the index, with nothing left to bring forward."""
    first = _commit(repo, {"wiki/a.md": b"about Redis\n"})
    index = repo.text_index()
    index.build(first)
    second = _commit(repo, {f"wiki/p{n}.md": b"redis\n" + b"some text\n" * 1000 for n in range(10)})
    small = Costs(scan_bytes=30_000)
    with active(Budget(small)), pytest.raises(OverBudget):
        index.candidates(second, "redis")
    running = index._building
    _built(index)
    assert index.indexed() == second
    with active(Budget(small)):
        assert index.candidates(second, "redis") == ["wiki/a.md", *[f"wiki/p{n}.md" for n in range(10)]]
    assert index._building is running  # no update started again


def test_an_index_of_another_format_is_built_again(repo: WikiRepo) -> None:
    """An index file of the former format (each path in the text table and in a table of its own) holds
    no commit for this code, and the next build makes an index of the current format in its place."""
    commit = _commit(repo, {"wiki/a.md": b"about Redis\n"})
    with contextlib.closing(sqlite3.connect(repo.path / FILE_NAME)) as db:
        db.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE VIRTUAL TABLE pages USING fts5(path UNINDEXED, body, tokenize='trigram');"
            "CREATE TABLE paths (path TEXT PRIMARY KEY, row INTEGER NOT NULL);"
        )
        db.execute("INSERT INTO meta VALUES ('commit', ?)", (commit,))
        db.commit()
    index = repo.text_index()
    assert index.indexed() is None
    index.build(commit)
    assert index.indexed() == commit
    assert index.candidates(commit, "redis") == ["wiki/a.md"]
