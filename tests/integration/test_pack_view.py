"""The writer's view of ``objects/pack`` (``PackReader.ensure_listed``): kept in memory across commits.

The wiki's writer adds the pack each commit publishes and retires the packs it absorbs, so it does not list
the folder per commit; after every commit its view is what a fresh listing finds. What others change is
seen in time: a pack another writer published, as soon as the writer builds on that writer's commit; a
repack of this process's repacker, at the next commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gitutil import fsck
from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git import packs as packs_module
from worker.git.maintenance import MAINTENANCE_CHECK_EVERY, REPACKER
from worker.git.packs import PACKS, PackReader
from worker.git.rollup import ROLLUP_FANOUT
from worker.git.snapshot import CommitTrees, TreeCache
from worker.schema.edits import Create

AUTHOR = Identity("Ada", "ada@example.org")


def commit(repo: WikiRepo, n: int) -> str:
    """Commit ``n``: one new page (every fifth one 20 KB, so that roll-ups climb a tier). The message names
    the repository: the commits of two tests in the same second are not the same commits (the process-wide
    caches would know them already)."""
    head = repo.head()
    text = f"page {n}\n" * (2500 if n % 5 == 4 else 1)
    plan = preflight(repo.snapshot(head), [Create(op="create", path=f"wiki/d{n % 3}/p{n}.md", content=text)])
    return repo.commit_plan(plan, head, f"commit {n} of {repo.path}", AUTHOR)


def fresh_view(pack_dir: Path) -> dict[str, int]:
    """``{pack: size}`` as a reader that has never seen the folder lists it."""
    reader = PackReader(pack_dir)
    reader.refresh(force=True)
    try:
        return {name: info.nbytes for name, info in reader.infos.items()}
    finally:
        reader.close()


def view(repo: WikiRepo) -> dict[str, int]:
    """The writer's ``{pack: size}``."""
    return {name: info.nbytes for name, info in repo.packed.infos.items()}


def test_the_writer_keeps_its_pack_list_across_commits_without_listing_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 3 check periods of commits the folder is listed once per period, not once per commit, and after
    every commit the writer's view is what a fresh listing finds (roll-ups included)."""
    assert REPACKER.wait_idle(120)  # an earlier test's repack finishing now would be one more listing
    store = GitStore(tmp_path / "data")
    store.create("w")
    repo = store.open("w")
    pack_dir = store.path("w") / "objects" / "pack"
    listings = 0
    real_listdir = os.listdir

    def counting_listdir(path: str | os.PathLike[str]) -> list[str]:
        nonlocal listings
        listings += Path(path) == pack_dir
        return real_listdir(path)

    monkeypatch.setattr(packs_module.os, "listdir", counting_listdir)
    commits = 3 * MAINTENANCE_CHECK_EVERY
    rolled_up = 0
    for n in range(commits):
        before = set(view(repo))
        commit(repo, n)
        rolled_up += len(before - set(view(repo))) > 0
        counted = listings
        assert view(repo) == fresh_view(pack_dir), n
        listings = counted  # the fresh listing is the test's, not the writer's
    assert rolled_up >= commits // ROLLUP_FANOUT  # roll-ups happened, and the view followed them
    assert 1 <= listings <= commits // MAINTENANCE_CHECK_EVERY + 1, listings
    store.close()
    assert PACKS.wait_retired(30)
    fsck(store.path("w"))


def test_a_pack_another_writer_published_joins_the_view_when_the_writer_builds_on_its_commit(
    tmp_path: Path,
) -> None:
    """A second writer of the same wiki (with caches of its own, as another process would have) commits
    three times; the first writer's next commit builds on that head, and its view then holds every pack
    the folder holds."""
    store = GitStore(tmp_path / "data")
    store.create("w")
    path = store.path("w")
    repo = store.open("w")
    for n in range(5):
        commit(repo, n)
    other = WikiRepo(path, TreeCache(), CommitTrees())
    for n in range(5, 8):
        commit(other, n)
    other.close()
    assert set(fresh_view(path / "objects" / "pack")) - set(view(repo))  # the first writer missed them
    made = commit(repo, 8)
    assert view(repo) == fresh_view(path / "objects" / "pack")
    assert [info.message.split()[1] for info in repo.log(3)] == ["8", "7", "6"]
    assert repo.head() == made
    store.close()
    assert PACKS.wait_retired(30)
    fsck(path)


def test_a_repack_of_the_process_repacker_joins_the_view_at_the_next_commit(tmp_path: Path) -> None:
    """The repacker's git rewrites the folder (a cruft repack: one pack for everything); the writer's next
    commit lists it again, and every page reads back."""
    store = GitStore(tmp_path / "data")
    store.create("w")
    path = store.path("w")
    repo = store.open("w")
    for n in range(6):
        commit(repo, n)
    repacker = repo.maintenance.repacker
    repacker.request(path, "prune")
    assert repacker.wait_idle(120)
    assert view(repo) != fresh_view(path / "objects" / "pack")  # git replaced the packs the writer knew
    commit(repo, 6)
    assert view(repo) == fresh_view(path / "objects" / "pack")
    fresh = WikiRepo(path, TreeCache(), CommitTrees())
    try:
        snapshot = fresh.snapshot()
        for n in range(7):
            assert (
                snapshot.read(f"wiki/d{n % 3}/p{n}.md")
                == (f"page {n}\n" * (2500 if n % 5 == 4 else 1)).encode()
            )
    finally:
        fresh.close()
    store.close()
    assert PACKS.wait_retired(30)
    fsck(path)
