"""The order of the git write path's file operations: durable before visible, visible before referenced.

A SIGKILL cannot show what a power cut loses (the page cache survives it), so the order that makes a commit
survive one is checked here, on the operations themselves: every file creation, flush, rename, directory
fsync and deletion of a commit is recorded, and the pack must be flushed (``syncfs``) before it is renamed
into place, its name made durable (fsync of ``objects/pack``) before ``main`` is renamed over, and the packs
it rolled up deleted only after ``main`` is durable. The same for ``write_commit`` (no ref) and
``move_main`` (a ref, no pack).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git import refs as gitrefs
from worker.git.packs import PACKS
from worker.git.rollup import ROLLUP_FANOUT
from worker.schema.edits import Create

AUTHOR = Identity("Ada", "ada@example.org")
Event = tuple[str, ...]


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Event]]:
    """Every create, syncfs, rename, directory fsync and unlink, in order, by file name."""
    seen: list[Event] = []
    real_open, real_rename, real_unlink = os.open, os.rename, os.unlink
    real_sync, real_fsync_dir = gitrefs.sync_filesystem, gitrefs.fsync_dir

    def opened(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        if flags & os.O_CREAT:
            seen.append(("create", Path(path).name))
        return real_open(path, flags, *args, **kwargs)

    def renamed(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append(("rename", Path(src).name, Path(dst).name))
        real_rename(src, dst)

    def unlinked(path: str | os.PathLike[str]) -> None:
        seen.append(("unlink", Path(path).name))
        real_unlink(path)

    def synced(path: Path) -> None:
        seen.append(("syncfs",))
        real_sync(path)

    def fsynced_dir(path: Path) -> None:
        seen.append(("fsync_dir", Path(path).name))
        real_fsync_dir(path)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "rename", renamed)
    monkeypatch.setattr(os, "unlink", unlinked)
    monkeypatch.setattr(gitrefs, "sync_filesystem", synced)
    monkeypatch.setattr(gitrefs, "fsync_dir", fsynced_dir)
    yield seen


def plan_for(repo: WikiRepo, n: int) -> tuple[str | None, object]:
    head = repo.head()
    return head, preflight(repo.snapshot(head), [Create(op="create", path=f"wiki/p{n}.md", content=f"{n}\n")])


def at(events: list[Event], match: Event) -> int:
    """The index of the first event starting with ``match`` (prefix match on each field)."""
    for index, event in enumerate(events):
        if len(event) >= len(match) and all(e.startswith(m) for e, m in zip(event, match, strict=False)):
            return index
    raise AssertionError(f"no {match} in {events}")


def repository(tmp_path: Path) -> tuple[GitStore, WikiRepo]:
    store = GitStore(tmp_path / "data")
    store.create("w")
    repo = store.open("w")
    for n in range(ROLLUP_FANOUT - 2):  # with the first commit's pack, one short of a full tier
        head, plan = plan_for(repo, n)
        repo.commit_plan(plan, head, f"commit {n}", AUTHOR)  # type: ignore[arg-type]
    assert PACKS.wait_retired(30)
    assert len(list(repo.packs.glob("*.pack"))) == ROLLUP_FANOUT - 1  # the next commit rolls them up
    return store, repo


def test_a_commit_flushes_then_publishes_then_moves_main_then_deletes(
    tmp_path: Path, events: list[Event]
) -> None:
    """commit_plan: tmp files and lock written < syncfs < pack renamed < objects/pack fsynced < main
    renamed < refs/heads fsynced < the rolled-up packs deleted; and exactly one syncfs."""
    store, repo = repository(tmp_path)
    events.clear()
    head, plan = plan_for(repo, ROLLUP_FANOUT)
    repo.commit_plan(plan, head, "the roll-up", AUTHOR)  # type: ignore[arg-type]
    assert PACKS.wait_retired(30)
    order = [
        at(events, ("create", "tmp_pack_")),
        at(events, ("create", "tmp_idx_")),
        at(events, ("create", "main.lock")),
        at(events, ("syncfs",)),
        at(events, ("rename", "tmp_pack_", "pack-")),
        at(events, ("rename", "tmp_idx_", "pack-")),
        at(events, ("fsync_dir", "pack")),
        at(events, ("rename", "main.lock", "main")),
        at(events, ("fsync_dir", "heads")),
        at(events, ("unlink", "pack-")),
    ]
    assert order == sorted(order), events
    assert [e for e in events if e[0] == "syncfs"] == [("syncfs",)]
    deleted = [e for e in events if e[0] == "unlink"]
    assert len(deleted) >= 2 * (ROLLUP_FANOUT - 1)  # each rolled-up pack: its index and its pack
    assert all(events.index(e) > order[8] for e in deleted)
    store.close()


def test_objects_without_a_ref_are_flushed_before_they_are_visible(
    tmp_path: Path, events: list[Event]
) -> None:
    """write_commit: syncfs < renames < objects/pack fsynced < rolled-up packs deleted; then move_main:
    lock written < syncfs < main renamed < refs/heads fsynced."""
    store, repo = repository(tmp_path)
    events.clear()
    head, plan = plan_for(repo, ROLLUP_FANOUT)
    commit = repo.write_commit(plan, head, "the roll-up", AUTHOR)  # type: ignore[arg-type]
    assert PACKS.wait_retired(30)
    order = [
        at(events, ("create", "tmp_pack_")),
        at(events, ("syncfs",)),
        at(events, ("rename", "tmp_pack_", "pack-")),
        at(events, ("rename", "tmp_idx_", "pack-")),
        at(events, ("fsync_dir", "pack")),
        at(events, ("unlink", "pack-")),
    ]
    assert order == sorted(order), events
    assert not [e for e in events if "main" in e[-1]]  # no ref touched
    events.clear()
    repo.move_main(head, commit)
    order = [
        at(events, ("create", "main.lock")),
        at(events, ("syncfs",)),
        at(events, ("rename", "main.lock", "main")),
        at(events, ("fsync_dir", "heads")),
    ]
    assert order == sorted(order), events
    assert repo.head() == commit
    store.close()
