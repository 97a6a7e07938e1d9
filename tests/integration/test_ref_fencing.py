"""``main.lock`` carries its writer's lease epoch: it is broken only by a newer epoch, never by age while
its writer may hold its lease, and a writer whose lock was broken never renames it over ``main``."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gitutil import fsck
from worker import faults
from worker.engine import preflight
from worker.errors import LockLost, RefLocked
from worker.git import GitStore, Identity, WikiRepo
from worker.git.refs import lock_epoch, swap_main
from worker.schema.edits import Create

ALICE = Identity("Alice", "alice@example.com")


@pytest.fixture
def repo(data_dir: Path) -> Iterator[WikiRepo]:
    store = GitStore(data_dir)
    store.create("w")
    yield store.open("w")
    store.close()


def _lock(repo: WikiRepo) -> Path:
    return repo.path / "refs" / "heads" / "main.lock"


def _age(path: Path) -> None:
    past = time.time() - 3600
    os.utime(path, (past, past))


def _commit(repo: WikiRepo, name: str, base: str | None) -> str:
    """A commit creating ``wiki/<name>.md`` on ``base``, written but not on ``main``."""
    plan = preflight(repo.snapshot(base), [Create(op="create", path=f"wiki/{name}.md", content="x\n")])
    return repo.write_commit(plan, base, name, ALICE, job_id=name)


def _left_by(repo: WikiRepo, epoch: int) -> Path:
    """The lock a writer of ``epoch`` leaves when it stops holding it (killed, or paused), an hour old."""
    lock = _lock(repo)
    lock.write_bytes(b"0" * 40 + b"\n")
    os.setxattr(lock, "user.wikiq.epoch", str(epoch).encode())
    _age(lock)
    return lock


def test_a_lock_of_the_same_or_a_newer_epoch_is_never_broken_however_old(repo: WikiRepo) -> None:
    head = repo.head()
    new = _commit(repo, "a", head)
    lock = _left_by(repo, 7)
    for epoch in (7, 6, None):
        with pytest.raises(RefLocked):
            swap_main(repo.path, head, new, epoch=epoch)
        assert lock.read_bytes() == b"0" * 40 + b"\n"
        assert repo.head() == head


def test_a_lock_of_an_older_epoch_is_broken_by_a_newer_writer(repo: WikiRepo) -> None:
    head = repo.head()
    new = _commit(repo, "a", head)
    lock = _left_by(repo, 7)
    os.utime(lock)  # fresh: its age does not matter
    swap_main(repo.path, head, new, epoch=8)
    assert repo.head() == new
    assert not lock.exists()
    fsck(repo.path)


def test_a_lock_without_an_epoch_is_still_broken_by_age_only(repo: WikiRepo) -> None:
    head = repo.head()
    new = _commit(repo, "a", head)
    lock = _lock(repo)
    lock.write_bytes(b"0" * 40 + b"\n")
    with pytest.raises(RefLocked):
        swap_main(repo.path, head, new, epoch=8)  # fresh: its writer may be mid-swap
    _age(lock)
    swap_main(repo.path, head, new, epoch=8)
    assert repo.head() == new


def test_the_lock_carries_the_writers_epoch(repo: WikiRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    head = repo.head()
    new = _commit(repo, "a", head)
    seen: list[int | None] = []
    original = faults.point

    def observe(name: str) -> None:
        if name == "git.locked":
            seen.append(lock_epoch(_lock(repo)))
        original(name)

    monkeypatch.setattr(faults, "point", observe)
    swap_main(repo.path, head, new, epoch=12)
    assert seen == [12]
    assert repo.head() == new


def test_a_writer_whose_lock_was_broken_meanwhile_does_not_rename_it(
    repo: WikiRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer A (epoch 3) holds ``main.lock``; before its rename, writer B (epoch 4) breaks it and lands its
    own commit. A's swap then raises ``LockLost``: ``main`` holds B's commit, and no lock is left."""
    head = repo.head()
    theirs = _commit(repo, "b", head)
    ours = _commit(repo, "a", head)
    original = faults.point
    interleaved: list[str] = []

    def newer_writer_at(name: str) -> None:
        if name == "git.locked" and not interleaved:
            interleaved.append(name)
            swap_main(repo.path, head, theirs, epoch=4)  # B breaks A's lock and moves main
        original(name)

    monkeypatch.setattr(faults, "point", newer_writer_at)
    with pytest.raises(LockLost):
        swap_main(repo.path, head, ours, epoch=3)
    assert interleaved == ["git.locked"]
    assert repo.head() == theirs
    assert not _lock(repo).exists()
    check = subprocess.run(["git", "--git-dir", str(repo.path), "fsck", "--no-dangling"], capture_output=True)
    assert check.returncode == 0, check.stderr  # A's commit is written, on no branch


def test_a_writer_whose_lock_was_replaced_leaves_the_new_one_alone(
    repo: WikiRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B broke A's lock and holds its own when A reaches its rename: A raises ``LockLost`` and leaves B's
    lock (its inode and content) where it is, and ``main`` unmoved."""
    head = repo.head()
    ours = _commit(repo, "a", head)
    original = faults.point
    replaced: list[bytes] = []

    def newer_writer_at(name: str) -> None:
        if name == "git.locked" and not replaced:
            lock = _lock(repo)
            lock.unlink()  # B broke it (A's epoch is older than B's)
            lock.write_bytes(b"1" * 40 + b"\n")
            replaced.append(lock.read_bytes())
        original(name)

    monkeypatch.setattr(faults, "point", newer_writer_at)
    with pytest.raises(LockLost):
        swap_main(repo.path, head, ours, epoch=3)
    assert _lock(repo).read_bytes() == replaced[0]
    assert repo.head() == head
