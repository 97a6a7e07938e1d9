"""Pruning the objects of lost swaps (``worker.git.maintenance.prune``): git's cruft repack with a grace
period, asked for by the wiki's writer once a day.

What nothing references is dropped once older than the grace period; a pack published moments before a
prune and referenced only after it (a concurrent writer between its publish and its ref move) survives; the
roll-up leaves the cruft pack to git; and ``Maintenance`` asks the repacker for a prune when the last one is
a day old.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.gitutil import fsck, git, git_text
from worker.engine import Plan, preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.maintenance import MAINTENANCE_CHECK_EVERY, PRUNE_MARKER, Maintenance, Repacker, prune
from worker.git.packs import PACKS
from worker.git.snapshot import CommitTrees, TreeCache
from worker.schema.edits import Create

AUTHOR = Identity("Ada", "ada@example.org")


def plan_for(repo: WikiRepo, head: str | None, path: str, text: str) -> Plan:
    return preflight(repo.snapshot(head), [Create(op="create", path=path, content=text)])


def has(repo: Path, oid: str) -> bool:
    """True when ``repo`` holds object ``oid``."""
    found = subprocess.run(
        ["git", "--git-dir", str(repo), "cat-file", "-e", oid], capture_output=True, check=False
    )
    return found.returncode == 0


def wiki(tmp_path: Path) -> tuple[GitStore, WikiRepo, Path]:
    store = GitStore(tmp_path / "data")
    store.create("w")
    repo = store.open("w")
    for n in range(3):
        head = repo.head()
        repo.commit_plan(plan_for(repo, head, f"wiki/p{n}.md", f"page {n}\n"), head, f"commit {n}", AUTHOR)
    return store, repo, store.path("w")


def test_prune_drops_unreferenced_objects_past_the_grace_period_only(tmp_path: Path) -> None:
    """An orphan commit (written, never on main) survives a prune while young, is gone after one with no
    grace, and everything reachable stays: fsck is spotless."""
    store, repo, path = wiki(tmp_path)
    head = repo.head()
    orphan = repo.write_commit(plan_for(repo, head, "wiki/lost.md", "lost swap\n"), head, "lost", AUTHOR)
    lost_blob = git_text(path, "rev-parse", f"{orphan}:wiki/lost.md").strip()
    assert prune(path)  # the default grace: a day
    assert has(path, orphan) and has(path, lost_blob)
    assert "dangling commit" in git_text(path, "fsck", "--no-progress", "--dangling")
    assert prune(path, grace_seconds=0)
    assert not has(path, orphan) and not has(path, lost_blob)
    fsck(path)
    fresh = WikiRepo(path, TreeCache(), CommitTrees())
    try:
        assert [fresh.snapshot().read(f"wiki/p{n}.md") for n in range(3)] == [
            b"page 0\n",
            b"page 1\n",
            b"page 2\n",
        ]
    finally:
        fresh.close()
    store.close()


def test_a_pack_published_before_a_prune_and_referenced_after_it_survives(tmp_path: Path) -> None:
    """A writer between publishing its pack and moving main when a prune runs: its objects are fresh, so
    kept, and main then refers to a complete commit."""
    store, repo, path = wiki(tmp_path)
    head = repo.head()
    commit = repo.write_commit(plan_for(repo, head, "wiki/late.md", "late\n"), head, "late", AUTHOR)
    assert prune(path)  # runs while the commit is referenced by nothing
    repo.move_main(head, commit)
    fsck(path)
    fresh = WikiRepo(path, TreeCache(), CommitTrees())
    try:
        assert fresh.snapshot().read("wiki/late.md") == b"late\n"
    finally:
        fresh.close()
    store.close()


def test_commits_leave_the_cruft_pack_to_git(tmp_path: Path) -> None:
    """After a prune that kept a young orphan in a cruft pack (``.mtimes``), later commits never roll that
    pack up: its objects keep their recorded ages."""
    store, repo, path = wiki(tmp_path)
    head = repo.head()
    repo.write_commit(plan_for(repo, head, "wiki/lost.md", "lost\n"), head, "lost", AUTHOR)
    assert prune(path)
    cruft = {p.stem for p in (path / "objects" / "pack").glob("*.mtimes")}
    assert len(cruft) == 1
    for n in range(3, 20):
        head = repo.head()
        repo.commit_plan(plan_for(repo, head, f"wiki/p{n}.md", f"page {n}\n"), head, f"commit {n}", AUTHOR)
    assert PACKS.wait_retired(30)
    assert {p.stem for p in (path / "objects" / "pack").glob("*.mtimes")} == cruft
    assert all((path / "objects" / "pack" / f"{stem}.pack").exists() for stem in cruft)
    git(path, "fsck", "--no-dangling")
    store.close()


def test_maintenance_asks_for_a_prune_once_the_last_is_a_day_old(tmp_path: Path) -> None:
    """No prune for a new wiki (its marker is made); one once the marker is a day old, which it renews."""
    store, _, path = wiki(tmp_path)
    repacker = Repacker(budget=1.0)
    maintenance = Maintenance(path, repacker)
    marker = path / PRUNE_MARKER
    marker.unlink(missing_ok=True)
    for _ in range(MAINTENANCE_CHECK_EVERY):
        maintenance.committed(lambda: 0)
    assert marker.exists() and repacker.runs == 0
    old = time.time() - 2 * 24 * 3600
    os.utime(marker, (old, old))
    for _ in range(MAINTENANCE_CHECK_EVERY):
        maintenance.committed(lambda: 0)
    assert repacker.wait_idle(120)
    assert repacker.runs == 1 and marker.stat().st_mtime > old + 24 * 3600
    fsck(path)
    store.close()
