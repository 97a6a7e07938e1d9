"""The bound on packs per wiki under continuous load (``worker.git.rollup``).

300 commits to one wiki back to back, interleaved with commits to two others through a store that keeps
one repository open (so every commit reopens its wiki), of mixed sizes (mostly small, some with a 60 KB or a
300 KB page, so that roll-ups climb the tiers): after every commit the wiki lists at most ``MAX_PACKS``
packs and at most ``ROLLUP_FANOUT - 1`` undeltified packs per tier; at the end every page reads back, in
process and with git, every tenth commit's tree too, and ``git fsck --strict`` is clean.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.gitutil import fsck, tree_files
from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.maintenance import REPACKER
from worker.git.packs import PACKS, PackReader
from worker.git.rollup import MAX_PACKS, ROLLUP_FANOUT, ROLLUP_MAX_BYTES, tier
from worker.git.snapshot import CommitTrees, TreeCache
from worker.schema.edits import Create, Edit, Overwrite

AUTHOR = Identity("Load", "load@example.org")
COMMITS = 300


def page(n: int) -> tuple[str, str]:
    """Commit ``n``'s new page: mostly a line, every 7th 60 KB, every 50th 300 KB."""
    size = 300_000 if n % 50 == 49 else 60_000 if n % 7 == 6 else 40
    line = f"page {n}: continuous load\n"
    return f"wiki/d{n % 9}/p{n:04d}.md", (line * (size // len(line) + 1))[:size]


def commit(repo: WikiRepo, n: int, expected: dict[str, str]) -> str:
    """Create commit ``n``'s page and rewrite the index; returns the commit."""
    head = repo.head()
    snapshot = repo.snapshot(head)
    path, text = page(n)
    index = f"# Index\n\n{n} pages\n"
    edits: list[Edit] = [
        Create(op="create", path=path, content=text),
        Overwrite(
            op="overwrite", path="index.md", content=index, expected_version=snapshot.version("index.md")
        ),
    ]
    made = repo.commit_plan(preflight(snapshot, edits), head, f"commit {n}", AUTHOR)
    expected[path] = text
    expected["index.md"] = index
    return made


def check_bound(path: Path) -> None:
    """At most MAX_PACKS packs listed, at most ROLLUP_FANOUT - 1 undeltified small packs per tier."""
    reader = PackReader(path / "objects" / "pack")
    reader.refresh(force=True)
    assert len(reader.names) <= MAX_PACKS, reader.names
    tiers = Counter(tier(i.nbytes) for i in reader.infos.values() if i.whole and i.nbytes <= ROLLUP_MAX_BYTES)
    assert max(tiers.values(), default=0) <= ROLLUP_FANOUT - 1, tiers
    reader.close()


def test_three_hundred_commits_under_load_stay_within_the_pack_bound_and_read_back(tmp_path: Path) -> None:
    """Every commit stays within the bound; every page of the head and of every tenth commit reads back."""
    store = GitStore(tmp_path / "data", max_open=1)
    for wiki in ("w", "x", "y"):
        store.create(wiki)
    path = store.path("w")
    expected: dict[str, str] = {}
    checkpoints: dict[str, dict[str, str]] = {}
    for n in range(COMMITS):
        made = commit(store.open("w"), n, expected)
        commit(store.open("x" if n % 2 else "y"), n, {})  # evicts w: every commit reopens it
        check_bound(path)
        if n % 10 == 9:
            checkpoints[made] = dict(expected)
    assert PACKS.wait_retired(60) and REPACKER.wait_idle(300)
    packs = list((path / "objects" / "pack").glob("pack-*.pack"))
    assert len(packs) <= MAX_PACKS
    fresh = WikiRepo(path, TreeCache(), CommitTrees())
    try:
        for made, files in checkpoints.items():
            snapshot = fresh.snapshot(made)
            for name, text in files.items():
                assert snapshot.read(name) == text.encode(), (made, name)
            assert sorted(snapshot.files_under("wiki")) == sorted(p for p in files if p.startswith("wiki/"))
        head = fresh.head()
        assert head is not None
        on_disk = tree_files(path, head)
        assert {p: on_disk[p] for p in expected} == {p: t.encode() for p, t in expected.items()}
    finally:
        fresh.close()
    store.close()
    fsck(path)
