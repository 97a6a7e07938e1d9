"""The text index behind literal search: the same hits as grepping every page, kept at each commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.engine import NewFile, Plan, blob_id
from worker.git import GitStore, Identity, WikiRepo
from worker.git.search import _grep
from worker.git.textindex import FILE_NAME

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
    hits = repo.search(second, "redis", limit=10)
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
    indexed = repo.search(commit, query, case_sensitive=case_sensitive, prefix=prefix, limit=1000)
    grepped = _grep(repo, commit, query, case_sensitive, prefix, 1000, None)
    assert [h[:4] for h in indexed] == [h[:4] for h in grepped]
    store.close()
