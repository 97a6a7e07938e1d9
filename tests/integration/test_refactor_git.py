"""The git side of refactors on real repositories: search (literal and RE2, prefix, case, cursor),
the snapshot's text search, file index and bulk reads, the service's many-pages, sections and backlinks
reads, and a refused rename with rewrite_links that leaves the repository byte-identical."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.gitutil import blob_id
from worker.engine import preflight
from worker.engine.paths import DEFAULT_POLICY
from worker.errors import BatchRejected
from worker.git import GitStore, Identity, WikiRepo
from worker.git.remote import RemoteRegistry
from worker.git.search import search
from worker.jobs.registry import WikiRegistry
from worker.jobs.wikis import Wikis
from worker.redis_server import RedisServer
from worker.schema.edits import Batch
from worker.service.caller import single_user
from worker.service.links import LinkReads
from worker.service.reads import Reads
from worker.settings import Settings

AUTHOR = Identity("Tester", "t@example.org")
FILES = {
    "index.md": b"# Index\n\n- [[redis]]\n- [[pg]]\n",
    "log.md": b"# Log\n",
    "wiki/db/redis.md": b"# Redis\n\n## Persistence\n\nAOF and RDB.\n\n## Clients\n\nredis-py.\n",
    "wiki/db/pg.md": b"# Postgres\n\nLike [Redis](redis.md), REDIS and Redis.\n```\n[[redis]]\n```\n",
    "wiki/notes/a.md": b"see [[db/redis#Clients]]\nredis\nno\nredis again\n",
    "wiki/bin.dat": b"\x00redis binary",
    "wiki/img.png": b"\x89PNG\xff",
    "raw/src.md": b"source: [[redis]]\n",
}


@pytest.fixture
def repo(data_dir: Path) -> WikiRepo:
    store = GitStore(data_dir)
    store.create("w", AUTHOR, files=FILES)
    return store.open("w")


def head(repo: WikiRepo) -> str:
    commit = repo.head()
    assert commit is not None
    return commit


# -- search --------------------------------------------------------------------------------------------


def test_literal_search_ignores_ascii_case_by_default_and_skips_binaries(repo: WikiRepo) -> None:
    """Literal hits in path then line order, each with its page's version; binary files are skipped."""
    hits = search(repo, head(repo), "redis", limit=100)
    assert [(h.path, h.line) for h in hits] == [
        ("index.md", 3),
        ("raw/src.md", 1),
        ("wiki/db/pg.md", 3),
        ("wiki/db/pg.md", 5),
        ("wiki/db/redis.md", 1),
        ("wiki/db/redis.md", 9),
        ("wiki/notes/a.md", 1),
        ("wiki/notes/a.md", 2),
        ("wiki/notes/a.md", 4),
    ]
    assert all(h.version == blob_id(FILES[h.path]) for h in hits)


def test_case_sensitive_prefix_and_cursor(repo: WikiRepo) -> None:
    """case_sensitive matches exactly; prefix is a path prefix; after resumes past a (path, line)."""
    commit = head(repo)
    exact = search(repo, commit, "Redis", case_sensitive=True, limit=100)
    assert {(h.path, h.line) for h in exact} == {("wiki/db/pg.md", 3), ("wiki/db/redis.md", 1)}
    under = search(repo, commit, "redis", prefix="wiki/no", limit=100)
    assert [(h.path, h.line) for h in under] == [
        ("wiki/notes/a.md", 1),
        ("wiki/notes/a.md", 2),
        ("wiki/notes/a.md", 4),
    ]
    first = search(repo, commit, "redis", limit=2)
    rest = search(repo, commit, "redis", limit=100, after=(first[-1].path, first[-1].line))
    assert [(h.path, h.line) for h in first + rest] == [
        (h.path, h.line) for h in search(repo, commit, "redis", limit=100)
    ]


def test_regex_search_is_re2_over_each_page_with_multiline_anchors(repo: WikiRepo) -> None:
    """regex: RE2 with ^/$ at line ends, case-insensitive by default; one hit per line where a match
    starts, with the match's column; a match crosses lines only with multiline; a pattern RE2 refuses is
    PATTERN_INVALID."""
    commit = head(repo)
    hits = search(repo, commit, r"^redis", regex=True, limit=100)
    assert [(h.path, h.line) for h in hits] == [
        ("wiki/db/redis.md", 9),
        ("wiki/notes/a.md", 2),
        ("wiki/notes/a.md", 4),
    ]
    assert search(repo, commit, r"Persistence\n\nAOF", regex=True, case_sensitive=True, limit=10) == []
    spanning = search(
        repo, commit, r"Persistence\n\nAOF", regex=True, case_sensitive=True, limit=10, multiline=True
    )
    assert [(h.path, h.line, h.text) for h in spanning] == [("wiki/db/redis.md", 3, "## Persistence")]
    column = search(repo, commit, r"R[A-Z]+S", regex=True, case_sensitive=True, limit=10)
    assert [(h.path, h.text[h.column : h.column + 5]) for h in column] == [("wiki/db/pg.md", "REDIS")]
    with pytest.raises(BatchRejected) as info:
        search(repo, commit, r"(?<=x)y", regex=True, limit=10)
    assert info.value.code == "PATTERN_INVALID"


def test_regex_search_agrees_with_python_re_line_by_line(repo: WikiRepo) -> None:
    """For a pattern both engines read alike, the lines found are the lines Python's re finds."""
    commit = head(repo)
    pattern = r"\[\[[a-z/]+"
    found = {
        (h.path, h.line) for h in search(repo, commit, pattern, regex=True, case_sensitive=True, limit=1000)
    }
    expected = {
        (path, number)
        for path, data in FILES.items()
        if b"\x00" not in data
        for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1)
        if re.search(pattern, line)
    }
    assert found == expected


# -- snapshot ------------------------------------------------------------------------------------------


def test_snapshot_text_search_file_index_and_bulk_reads(repo: WikiRepo) -> None:
    """mentioning() is git grep with ASCII case folding only; file_index() and read_many() see every file."""
    snapshot = repo.snapshot()
    assert snapshot.mentioning(["REDIS"]) == sorted(p for p, d in FILES.items() if b"redis" in d.lower())
    assert snapshot.mentioning(["\u212a"]) == []  # the Kelvin sign is not "k" here
    assert snapshot.mentioning(["\n"]) is None
    assert snapshot.file_index().files == frozenset(FILES)
    assert snapshot.file_index() is repo.snapshot().file_index()  # cached by tree
    many = sorted(FILES)
    assert snapshot.read_many(many * 20)[many[0]] == FILES[many[0]]
    assert snapshot.read_many(many) == {p: FILES[p] for p in many}


# -- service reads -------------------------------------------------------------------------------------


@pytest.fixture
async def reads(data_dir: Path, repo: WikiRepo, redis_server: RedisServer) -> AsyncIterator[Reads]:
    """The service's reads over a real store, with the registry of remote-backed wikis in a real Redis."""
    redis = Redis.from_url(redis_server.url)
    store = GitStore(data_dir)
    yield Reads(
        Settings(data_dir=data_dir, max_file_bytes=1024),
        store,
        Wikis(store, WikiRegistry(redis), RemoteRegistry(None)),
    )
    await redis.aclose()


CALLER = single_user("Tester", "t@example.org")


async def test_read_many_pages_in_order_with_errors_per_path(reads: Reads) -> None:
    """Pages come back in the order asked, once each, at one commit; bad paths are error entries."""
    found = await reads.read_pages(CALLER, "w", ["log.md", "wiki/none.md", "index.md", "log.md", "../x"])
    assert [p.path for p in found.pages] == ["log.md", "index.md"]
    assert {p.commit for p in found.pages} == {found.commit}
    assert [(e.path, e.code) for e in found.errors] == [
        ("wiki/none.md", "NOT_FOUND"),
        ("../x", "INVALID_PATH"),
    ]
    with pytest.raises(BatchRejected):
        await reads.read_pages(CALLER, "w", [f"p{n}.md" for n in range(101)])


async def test_read_many_stops_at_the_byte_budget(data_dir: Path, reads: Reads) -> None:
    """Past max_file_bytes of content in all, the remaining pages are BATCH_TOO_LARGE entries."""
    big = {f"wiki/big{n}.md": b"x" * 600 for n in range(3)}
    GitStore(data_dir).create("big", AUTHOR, files=big)
    found = await reads.read_pages(CALLER, "big", sorted(big))
    assert [p.path for p in found.pages] == ["wiki/big0.md"]
    assert [e.code for e in found.errors] == ["BATCH_TOO_LARGE", "BATCH_TOO_LARGE"]


async def test_page_sections_give_addresses_and_versions(reads: Reads) -> None:
    """sections=true answers the heading tree; a section's version guards a section op."""
    page = await reads.read_page(CALLER, "w", "wiki/db/redis.md", sections=True)
    assert page.sections is not None
    assert [(s.heading, s.address, s.level, s.line, s.end_line) for s in page.sections] == [
        ("Redis", "Redis", 1, 1, 9),
        ("Persistence", "Persistence", 2, 3, 6),
        ("Clients", "Clients", 2, 7, 9),
    ]
    text = FILES["wiki/db/redis.md"].decode().splitlines(keepends=True)
    assert page.sections[1].version == blob_id("".join(text[2:6]).encode())
    plain = await reads.read_page(CALLER, "w", "wiki/db/redis.md")
    assert plain.sections is None and "sections" not in plain.model_dump()
    binary = await reads.read_page(CALLER, "w", "wiki/img.png", sections=True)
    assert binary.encoding == "base64" and binary.sections == []


async def test_search_cursor_walks_every_hit_once(reads: Reads) -> None:
    """next_cursor pages through the hits; the last page has none."""
    seen, cursor = [], None
    while True:
        answer = await reads.find(CALLER, "w", "redis", limit=2, cursor=cursor)
        seen += [(m.path, m.line, m.version) for m in answer.matches]
        cursor = answer.next_cursor
        if cursor is None:
            break
    everything = await reads.find(CALLER, "w", "redis", limit=100)
    assert seen == [(m.path, m.line, m.version) for m in everything.matches]
    with pytest.raises(BatchRejected):
        await reads.find(CALLER, "w", "redis", cursor="not a cursor!")


async def test_backlinks_outside_code_with_lines(reads: Reads) -> None:
    """Every link that resolves to the page, by page then line; code, raw text and other pages' links
    to a namesake are not links to it."""
    links = LinkReads(reads)
    found = await links.backlinks(CALLER, "w", "wiki/db/redis.md")
    assert [(b.path, b.line, b.text) for b in found.backlinks] == [
        ("index.md", 3, "[[redis]]"),
        ("raw/src.md", 1, "[[redis]]"),
        ("wiki/db/pg.md", 3, "[Redis](redis.md)"),
        ("wiki/notes/a.md", 1, "[[db/redis#Clients]]"),
    ]
    assert found.version == blob_id(FILES["wiki/db/redis.md"]) and not found.truncated
    cut = await links.backlinks(CALLER, "w", "wiki/db/redis.md", limit=2)
    assert len(cut.backlinks) == 2 and cut.truncated
    with pytest.raises(BatchRejected) as info:
        await links.backlinks(CALLER, "w", "wiki/none.md")
    assert info.value.code == "NOT_FOUND"


# -- all or nothing on git -----------------------------------------------------------------------------


def test_refused_rewrite_batch_leaves_the_repository_as_it_was(repo: WikiRepo) -> None:
    """A rename with rewrite_links followed by a failing edit: nothing is written, main does not move;
    the same rename alone commits one commit with every link fixed."""
    before = {p: p.read_bytes() for p in sorted(repo.path.rglob("*")) if p.is_file()}
    base = repo.head()
    batch = Batch.model_validate(
        {
            "message": "move db",
            "edits": [
                {"op": "rename", "path": "wiki/db", "new_path": "wiki/data", "rewrite_links": True},
                {"op": "append", "path": "wiki/none.md", "content": "x"},
            ],
        }
    )
    with pytest.raises(BatchRejected) as info:
        preflight(repo.snapshot(), batch.edits, DEFAULT_POLICY)
    assert (info.value.code, info.value.index) == ("NOT_FOUND", 1)
    assert {p: p.read_bytes() for p in sorted(repo.path.rglob("*")) if p.is_file()} == before
    plan = preflight(repo.snapshot(), batch.edits[:1], DEFAULT_POLICY)
    commit = repo.commit_plan(plan, base, "move db", AUTHOR)
    assert list(repo.commit_info(commit).parents) == [base]
    snapshot = repo.snapshot()
    assert snapshot.read("wiki/notes/a.md").startswith(b"see [[data/redis#Clients]]")
    assert snapshot.read("raw/src.md") == FILES["raw/src.md"]
