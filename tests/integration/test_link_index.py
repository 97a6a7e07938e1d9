"""The link index behind backlinks: the same answers as reading the pages, kept at each commit, rebuilt when
missing or corrupt, and built when a wiki is first opened."""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from tests.e2e.remotes import remotes_toml
from worker import keys
from worker.engine import NewFile, Plan, blob_id
from worker.engine.backlinks import find_backlinks
from worker.engine.budget import Budget, OverBudget, active
from worker.git import GitStore, Identity, WikiRepo, linkindex, warmup
from worker.git.linkindex import (
    FILE_NAME,
    READ_BYTES,
    ROW_BYTES,
    ROWS_FACTOR,
    ROWS_FREE,
    link_index,
)
from worker.git.remote import Remote, RemoteRegistry
from worker.git.textindex import INDEX_FROM_BYTES, READ_CHANGES
from worker.git.warmup import warm
from worker.jobs.registry import WikiRegistry
from worker.jobs.wikis import Wikis
from worker.redis_server import RedisServer
from worker.schema.edits import Costs
from worker.service.links import LinkReads, decode_backlinks_cursor

TESTER = Identity("t", "t@x")
PATHS = [
    "index.md",
    "hub.md",
    "Hub.md",
    "hub",
    "wiki/hub.md",
    "wiki/a/hub.md",
    "wiki/a/HUB.MD",
    "wiki/b/page.md",
    "wiki/b/other.md",
    "wiki/a/b/deep.md",
    "raw/hub.txt",
]
FRAGMENTS = [
    "[[hub]]",
    "[[Hub]]",
    "[[hub.md]]",
    "[[a/hub]]",
    "[[wiki/a/hub|the hub]]",
    "[[/wiki/hub.md#top]]",
    "![[hub]]",
    "[[page]]",
    "[[b/other#x]]",
    "[x](hub.md)",
    "[x](../a/hub)",
    "[x](./hub.md#top)",
    "[x](/hub.md)",
    "[x](h%75b.md)",
    "[x](a/..)",
    "[x](../../../../hub.md)",
    "[x](<my hub.md>)",
    "[x](deep.md)",
    "`[[hub]]`",
    "\n```\n[[hub]]\n```\n",
    "\n[id]: hub.md\n",
    "[[raw/hub.txt]]",
    "[[]]",
    "[[./hub]]",
    "text",
    " ",
    "\n",
    "\n\n",
]
pages = st.dictionaries(
    st.sampled_from(PATHS), st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join), max_size=7
)
changes = st.dictionaries(
    st.sampled_from(PATHS),
    st.one_of(st.none(), st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join)),
    min_size=1,
    max_size=4,
)


def _commit(repo: WikiRepo, files: dict[str, bytes | None]) -> str:
    head = repo.head()
    present = set(repo.snapshot(head).paths()) if head is not None else set()
    files = {p: d for p, d in files.items() if d is not None or p in present}
    changed = {p: None if d is None else NewFile(blob_id(d), d) for p, d in files.items()}
    return repo.commit_plan(Plan(changes=changed), head, "m", TESTER)


def _answers(repo: WikiRepo, commit: str) -> tuple[dict[str, object], dict[str, object]]:
    """Backlinks of every file at ``commit``: from the pages (the reference), and from the index."""
    reference, indexed = {}, {}
    snapshot = repo.snapshot(commit)
    for target in sorted(snapshot.paths()):
        reference[target] = find_backlinks(repo.snapshot(commit), target)
        indexed[target] = link_index(repo).backlinks(repo.snapshot(commit), target)
    return reference, indexed


@pytest.fixture
def repo(tmp_path: Path) -> WikiRepo:
    store = GitStore(tmp_path)
    store.create("w")
    return store.open("w")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=pages, later=st.lists(changes, max_size=4))
def test_index_answers_equal_reading_the_pages(
    tmp_path_factory: pytest.TempPathFactory, first: dict[str, str], later: list[dict[str, str | None]]
) -> None:
    """On generated wikis, and after each later commit (pages added, changed, deleted, names becoming
    ambiguous or unambiguous), the index answers exactly what parsing the pages answers."""
    store = GitStore(tmp_path_factory.mktemp("links"))
    store.create("w")
    repo = store.open("w")
    commit = _commit(repo, {p: t.encode() for p, t in first.items()})
    link_index(repo).build(commit)
    reference, indexed = _answers(repo, commit)
    assert indexed == reference
    for change in later:
        commit = _commit(repo, {p: None if t is None else t.encode() for p, t in change.items()})
        reference, indexed = _answers(repo, commit)  # the index is brought forward by the diff
        assert indexed == reference
        assert link_index(repo).indexed() == commit
    store.close()


TEXT = b"see [[hub]]\nand [x](b/hub.md)\n"


def test_an_ambiguous_name_resolves_once_a_page_is_deleted_and_moves_follow(repo: WikiRepo) -> None:
    """A bare name two files share links to neither; deleting one makes the links point to the other,
    without the linking page changing; a moved page's links answer from its new path."""
    first = _commit(
        repo,
        {
            "wiki/a/hub.md": b"# A\n",
            "wiki/b/hub.md": b"# B\n",
            "wiki/p.md": b"see [[hub]]\nand [x](b/hub.md)\n",
        },
    )
    index = link_index(repo)
    index.build(first)
    assert index.backlinks(repo.snapshot(first), "wiki/a/hub.md") == []
    assert [(f.path, f.line) for f in index.backlinks(repo.snapshot(first), "wiki/b/hub.md") or []] == [
        ("wiki/p.md", 2)
    ]
    second = _commit(repo, {"wiki/b/hub.md": None})
    found = index.backlinks(repo.snapshot(second), "wiki/a/hub.md")
    assert [(f.path, f.line, f.text) for f in found or []] == [("wiki/p.md", 1, "[[hub]]")]
    third = _commit(repo, {"wiki/p.md": None, "wiki/q/p.md": TEXT})
    found = index.backlinks(repo.snapshot(third), "wiki/a/hub.md")
    assert [(f.path, f.version) for f in found or []] == [("wiki/q/p.md", blob_id(TEXT))]
    for commit in (first, second, third, second):  # and back to older commits: diffed again
        for target in ("wiki/a/hub.md", "wiki/b/hub.md"):
            assert index.backlinks(repo.snapshot(commit), target) == find_backlinks(
                repo.snapshot(commit), target
            )


def test_the_backlinks_read_pages_alike_with_and_without_the_index(repo: WikiRepo) -> None:
    """Through the service's read, one link at a time with cursors: the same pages of answers whether
    the index is there or not."""
    lines = "".join(f"[[hub]] and [x](hub.md) line {n}\n" for n in range(3))
    commit = _commit(repo, {"hub.md": b"# Hub\n", **{f"wiki/p{n}.md": lines.encode() for n in range(3)}})

    def pages() -> list[object]:
        reads = LinkReads(None)  # type: ignore[arg-type]  # collect() needs no Reads
        out: list[object] = []
        after = None
        while True:
            answer = reads.collect(repo.snapshot(commit), "hub.md", 2, after)
            out.append(answer.model_dump())
            if answer.next_cursor is None:
                return out
            after = decode_backlinks_cursor(answer.next_cursor)

    without = pages()
    assert link_index(repo).indexed() is None
    link_index(repo).build(commit)
    assert pages() == without
    assert len(without) == 5  # the nine wikilinks, two at a time (the markdown links point to wiki/hub.md)


def test_a_corrupt_or_missing_index_is_rebuilt(repo: WikiRepo) -> None:
    """Garbage in the file, a row git disagrees with, an indexed commit git does not have, or a deleted
    file: reads answer from the pages (the same answer), and the next build makes a good index again."""
    commit = _commit(repo, {"hub.md": b"# Hub\n", "wiki/p.md": b"[[hub]]\n"})
    index = link_index(repo)
    expected = find_backlinks(repo.snapshot(commit), "hub.md")
    assert expected
    path = repo.path / FILE_NAME
    for spoil in ("garbage", "row", "commit", "missing"):
        index.build(commit)
        assert index.backlinks(repo.snapshot(commit), "hub.md") == expected
        if spoil == "garbage":
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            path.write_bytes(os.urandom(8192))
        elif spoil in ("row", "commit"):
            with sqlite3.connect(path) as db:
                if spoil == "row":
                    db.execute("UPDATE files SET blob = ?", ("0" * 40,))
                else:  # a commit git does not have, at another head
                    db.execute("UPDATE meta SET value = ? WHERE key = 'commit'", ("1" * 40,))
        else:
            path.unlink()
        assert index.backlinks(repo.snapshot(commit), "hub.md") is None  # not trusted: the caller reads
        assert index.indexed() is None
        index.build(commit)
        assert index.indexed() == commit
        assert index.backlinks(repo.snapshot(commit), "hub.md") == expected


def test_a_page_too_costly_to_index_is_parsed_when_read(repo: WikiRepo) -> None:
    """A page over the default parse budget is indexed as costly: a read of a name it mentions parses it
    under the read's budget (refused alike, or answered alike under a larger one), other reads skip it."""
    lines = Costs().parse_lines + 10
    big = b"[[hub]] and [[other]]\n" + b"line\n" * lines
    commit = _commit(
        repo, {"hub.md": b"# Hub\n", "zz.md": b"", "wiki/big.md": big, "wiki/p.md": b"[[hub]]\n"}
    )
    index = link_index(repo)
    index.build(commit)
    with pytest.raises(OverBudget):
        find_backlinks(repo.snapshot(commit), "hub.md")
    with pytest.raises(OverBudget):
        index.backlinks(repo.snapshot(commit), "hub.md")
    assert index.backlinks(repo.snapshot(commit), "zz.md") == find_backlinks(repo.snapshot(commit), "zz.md")
    with active(Budget(Costs(parse_lines=2 * lines))):
        expected = find_backlinks(repo.snapshot(commit), "hub.md")
        assert [f.path for f in expected] == ["wiki/big.md", "wiki/p.md"]
        assert index.backlinks(repo.snapshot(commit), "hub.md") == expected


def test_an_index_far_behind_is_brought_forward_in_the_background(repo: WikiRepo) -> None:
    """When more files changed since the indexed commit than a read brings forward itself, the read
    answers from the pages and a child process brings the index to the head."""
    first = _commit(repo, {"hub.md": b"# Hub\n"})
    index = link_index(repo)
    index.build(first)
    many = {f"wiki/f{n // 100}/p{n}.md": b"[[hub]]\n" for n in range(READ_CHANGES + 1)}
    second = _commit(repo, many)
    assert index.backlinks(repo.snapshot(second), "hub.md") is None
    running = linkindex._CATCHING_UP[repo.path]
    running.join(timeout=120)
    assert not running.is_alive()
    assert index.indexed() == second
    expected = find_backlinks(repo.snapshot(second), "hub.md")
    assert len(expected) == READ_CHANGES + 1
    assert index.backlinks(repo.snapshot(second), "hub.md") == expected


def _stored(path: Path, text: bytes) -> int:
    """How many times ``text`` is in the index file at ``path``, its write-ahead log checkpointed first."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes().count(text)


def _size(path: Path) -> int:
    """The bytes the index file at ``path`` holds at its last commit (log included)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("PRAGMA page_count").fetchone()[0]) * int(
            db.execute("PRAGMA page_size").fetchone()[0]
        )


def _costly(repo: WikiRepo, path: str) -> tuple[int, int]:
    """Whether the index keeps ``path`` as costly, and how many link rows it holds for it."""
    with contextlib.closing(sqlite3.connect(repo.path / FILE_NAME)) as db:
        file, costly = db.execute("SELECT id, costly FROM files WHERE path = ?", (path,)).fetchone()
        (rows,) = db.execute("SELECT count(*) FROM links WHERE file = ?", (file,)).fetchone()
    return costly, rows


def test_each_path_is_stored_once(repo: WikiRepo) -> None:
    """A page's path is in the index file once, however many links the page holds: its link rows name it
    by id."""
    first = _commit(repo, {"hub.md": b"# Hub\n"})
    index = link_index(repo)
    index.build(first)
    page = "wiki/" + "long-folder-name-" * 20 + "/" + "page-" * 40 + ".md"
    second = _commit(repo, {page: b"see [[hub]] and [x](/hub.md)\n" * 200})
    found = index.backlinks(repo.snapshot(second), "hub.md")  # the read brings the index forward
    assert index.indexed() == second
    assert [(f.path, f.line) for f in found or []] == [(page, n // 2 + 1) for n in range(400)]
    assert _stored(repo.path / FILE_NAME, page.encode()) == 1


def test_a_page_whose_links_would_outweigh_it_is_kept_as_costly(repo: WikiRepo) -> None:
    """A page with more brackets than it may have link rows is costly without being parsed; one whose
    parsed links would take over ``ROWS_FACTOR`` times its bytes is costly once parsed; both hold no link
    row and are parsed by the reads that need them (the same answers). A page just within the bound keeps
    its rows, and the index grows by no more than the bound."""
    first = _commit(repo, {"hub.md": b"# Hub\n", "wiki/a.md": b"# A\n"})
    index = link_index(repo)
    index.build(first)
    bracketed = b"[[hub]] " * 2000  # two brackets every 8 bytes
    short = b"[x](a) " * 2000  # one bracket every 7 bytes, but a link row is more than 8 times that
    assert short.count(b"[") * ROW_BYTES <= ROWS_FACTOR * len(short)
    second = _commit(repo, {"wiki/bracketed.md": bracketed, "wiki/short.md": short})
    for target in ("hub.md", "wiki/a.md"):
        expected = find_backlinks(repo.snapshot(second), target)
        assert len(expected) == 2000
        assert index.backlinks(repo.snapshot(second), target) == expected
    assert _costly(repo, "wiki/bracketed.md") == (1, 0)
    assert _costly(repo, "wiki/short.md") == (1, 0)
    within = b"[x](/hub.md) " * 5000
    before = _size(repo.path / FILE_NAME)
    third = _commit(repo, {"wiki/within.md": within})
    assert len(index.backlinks(repo.snapshot(third), "hub.md") or []) == 2000 + 5000
    assert _costly(repo, "wiki/within.md") == (0, 5000)
    assert _size(repo.path / FILE_NAME) - before <= ROWS_FACTOR * len(within) + ROWS_FREE


def test_a_read_marks_a_page_over_its_parse_caps_costly(repo: WikiRepo) -> None:
    """A page a read brings into the index whose parse is over the read's per-call caps (lines) is kept
    as costly: the read itself is not refused for it."""
    first = _commit(repo, {"hub.md": b"# Hub\n", "zz.md": b""})
    index = link_index(repo)
    index.build(first)
    big = b"[[hub]]\n" + b"l\n" * (Costs().parse_lines + 10)
    second = _commit(repo, {"wiki/big.md": big})
    assert index.backlinks(repo.snapshot(second), "zz.md") == []
    assert index.indexed() == second
    assert _costly(repo, "wiki/big.md") == (1, 0)


def test_a_read_brings_forward_at_most_its_bytes_and_leaves_the_rest_to_a_child(repo: WikiRepo) -> None:
    """Over ``READ_BYTES`` of changed pages, a read answers from the pages (None) and a child process
    brings the index forward; the next read finds it there."""
    first = _commit(repo, {"hub.md": b"# Hub\n"})
    index = link_index(repo)
    index.build(first)
    second = _commit(repo, {"wiki/big.md": b"[[hub]]\n" + b"words and more words\n" * (READ_BYTES // 21 + 1)})
    assert index.backlinks(repo.snapshot(second), "hub.md") is None
    running = linkindex._CATCHING_UP[repo.path]
    running.join(timeout=120)
    assert not running.is_alive()
    assert index.indexed() == second
    assert index.backlinks(repo.snapshot(second), "hub.md") == find_backlinks(repo.snapshot(second), "hub.md")


def test_a_read_out_of_budget_leaves_the_update_to_a_child_and_the_next_read_continues(
    repo: WikiRepo,
) -> None:
    """A read whose budget runs out while it brings the index forward is OverBudget (QUERY_TOO_COSTLY for
    the caller) and hands the update to a child process: the next read, under the same small budget,
    answers from the index, with nothing left to bring forward."""
    first = _commit(repo, {"hub.md": b"# Hub\n"})
    index = link_index(repo)
    index.build(first)
    pages = {f"wiki/p{n}.md": b"[[hub]]\n" + b"some text\n" * 1000 for n in range(10)}  # 100 KB in all
    second = _commit(repo, pages)
    small = Costs(scan_bytes=30_000)
    with active(Budget(small)), pytest.raises(OverBudget):
        index.backlinks(repo.snapshot(second), "hub.md")
    running = linkindex._CATCHING_UP[repo.path]
    running.join(timeout=120)
    assert not running.is_alive()
    assert index.indexed() == second
    expected = find_backlinks(repo.snapshot(second), "hub.md")
    assert len(expected) == 10
    with active(Budget(small)):
        assert index.backlinks(repo.snapshot(second), "hub.md") == expected
    assert linkindex._CATCHING_UP[repo.path] is running  # no update started again


FORMER_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE links (
    path TEXT NOT NULL, blob TEXT NOT NULL, ord INTEGER NOT NULL, key TEXT NOT NULL,
    wikilink INTEGER NOT NULL, target TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL
);
CREATE TABLE files (path TEXT PRIMARY KEY, key TEXT NOT NULL);
CREATE TABLE costly (path TEXT PRIMARY KEY, blob TEXT NOT NULL);
"""


def test_an_index_of_another_format_is_built_again(repo: WikiRepo) -> None:
    """An index file of the former format (paths in every link row) holds no commit for this code, and
    the next build makes an index of the current format in its place."""
    commit = _commit(repo, {"hub.md": b"# Hub\n", "wiki/p.md": b"[[hub]]\n"})
    with contextlib.closing(sqlite3.connect(repo.path / FILE_NAME)) as db:
        db.executescript(FORMER_SCHEMA)
        db.execute("INSERT INTO meta VALUES ('format', '1'), ('commit', ?)", (commit,))
        db.commit()
    index = link_index(repo)
    assert index.indexed() is None
    index.build(commit)
    assert index.indexed() == commit
    assert index.backlinks(repo.snapshot(commit), "hub.md") == find_backlinks(repo.snapshot(commit), "hub.md")


def _big_wiki(path: Path) -> str:
    """A bare wiki at ``path`` written by plain git (fast-import), over the size worth indexing; its head."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    stream = [b"commit refs/heads/main\ncommitter p <p@x> 0 +0000\ndata 1\nm\n"]
    stream.append(b"M 100644 inline hub.md\ndata 6\n# Hub\n")
    for n in range(3):  # random text packs to about three quarters of its size: 4/3 of the bound in all
        body = b"see [[hub]]\n" + base64.b64encode(os.urandom(INDEX_FROM_BYTES // 3))
        stream.append(b"M 100644 inline wiki/p%d.md\ndata %d\n%s\n" % (n, len(body), body))
    stream.append(b"done\n")
    args = ["git", "--git-dir", str(path), "fast-import", "--quiet", "--done"]
    subprocess.run(args, input=b"".join(stream), check=True)
    subprocess.run(["git", "--git-dir", str(path), "repack", "-adq"], check=True)  # fast-import left loose
    return subprocess.run(
        ["git", "--git-dir", str(path), "rev-parse", "main"], capture_output=True, check=True, text=True
    ).stdout.strip()


def _built(repo: WikiRepo, head: str) -> None:
    """Wait for the background build ``warm`` started for ``repo``, then check both indexes hold ``head``."""
    thread = warmup._WARMED[repo]
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert repo.text_index().indexed() == head
    assert link_index(repo).indexed() == head
    found = link_index(repo).backlinks(repo.snapshot(head), "hub.md")
    assert [f.path for f in found or []] == ["wiki/p0.md", "wiki/p1.md", "wiki/p2.md"]
    assert warm(repo, head) is None  # once per open repository


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """The test Redis, without the registry entries these tests attach (the session's Redis is shared)."""
    client = Redis.from_url(redis_server.url)
    yield client
    await client.hdel(keys.WIKIS, "big-attached")
    await client.hdel(keys.WIKI_HEADS, "big-attached")
    await client.aclose()


async def test_first_opening_a_big_wiki_builds_its_indexes(tmp_path: Path, redis: Redis) -> None:
    """A wiki git wrote (not wikiq), first opened for a read: its text and link indexes get built in the
    background, and the read did not wait for them."""
    head = _big_wiki(tmp_path / "wikis" / "big.git")
    store = GitStore(tmp_path)
    opened = await Wikis(store, WikiRegistry(redis), RemoteRegistry(None)).head("big")
    assert opened.commit == head
    _built(opened.repo, head)
    store.close()


async def test_attaching_a_big_remote_builds_its_indexes(tmp_path: Path, redis: Redis) -> None:
    """Attaching a remote someone else filled starts building the cache's indexes, before any read."""
    head = _big_wiki(tmp_path / "served" / "docs.git")
    remotes = tmp_path / "remotes.toml"
    remotes.write_text(remotes_toml(Remote(name="docs", url=f"file://{tmp_path / 'served' / 'docs.git'}")))
    store = GitStore(tmp_path / "data")
    entry = await Wikis(store, WikiRegistry(redis), RemoteRegistry(remotes)).attach("big-attached", "docs")
    assert entry.head == head
    repo = store.opened("big-attached")
    assert repo is not None
    _built(repo, head)
    store.close()
