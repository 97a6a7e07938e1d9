"""``refs/heads/main``: reading it, and moving it by compare-and-swap under git's own lock protocol.

``swap_main`` is the only way wikiq moves a branch. The order of its steps is what makes a commit survive a
SIGKILL *and* a power cut at any point:

1. the new objects are already written as ``tmp_pack_*``/``tmp_idx_*`` (``write_pack``): names no reader
   (ours or git's) ever opens;
2. take ``main.lock`` (``O_EXCL``), check the ref is still at the expected commit, write the new id into
   the lock;
3. ONE ``syncfs``: the temporary pack, its index and the lock's content reach the disk together;
4. rename pack then index to ``pack-<checksum>.*``, then fsync ``objects/pack``: a pack becomes visible
   only once its bytes are durable, and its name is durable before anything can refer to it;
5. rename the lock over the ref, fsync ``refs/heads``: the commit is on ``main`` only once every object it
   needs is durable under its real name.

A crash before 4 leaves ``tmp_`` files (removed by ``Maintenance`` after a day, or by ``git gc``) and a
stale lock; between 4 and 5 a complete, durable pack nothing refers to (its objects are pruned with git's
own grace-period rules, see ``worker.git.maintenance``); never a truncated pack under a real name, nor a
ref to objects that are not on disk. Without step 3 before step 4 (the order until now), a power cut right
after the renames could leave a pack whose name reached the journal before its data. That order costs
one more directory fsync per commit; one ``syncfs`` is cheaper than an ``fdatasync`` per file
(docs/benchmarks.md, "Measurements behind choices"). The ``faults.point`` calls are crash points for the tests
(no-ops otherwise).

Fencing. Only a partition's lease holder writes a wiki, but a holder paused past its lease (a GC, a VM
stall, SIGSTOP) resumes believing it still holds it. So a writer with a lease passes its lease epoch
(``worker.jobs.leases``), which ``main.lock`` carries (the extended attribute ``user.wikiq.epoch``: the
lock's content is what the ref becomes, so it stays the commit id alone), and:

- a lock of epoch ``e`` is broken only by a writer of a newer epoch than ``e`` (its writer is then stale,
  paused or dead); never by age, since its writer's lease may be alive;
- a lock without an epoch (a writer without a lease, an earlier wikiq, git itself) is broken once older
  than ``STALE_LOCK_SECONDS``, as before: a swap holds it for milliseconds;
- right before the rename the writer checks the lock is still its own (the inode it created, which it
  holds open until the rename, so that no other file can get its number); if not, a newer writer broke
  it, and ``LockLost`` says nothing of this writer moved ``main``.

A check and a rename are two steps, so a writer paused exactly between them can still rename a newer
writer's lock over ``main``. That puts the *newer* writer's commit on ``main`` (the lock holds its id) and
none of the stale writer's; the newer writer's own rename then fails and its job runs again, finding its
commit by trailer. The stale writer cannot report its own commits as landed: every finish script refuses
a run of an older epoch (``worker.jobs.record_scripts``), so what it believes is never recorded.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from worker import faults
from worker.errors import LockLost, RefLocked, RefMoved
from worker.git.objects import PendingPack

MAIN = "refs/heads/main"
STALE_LOCK_SECONDS = 5.0
EPOCH_ATTRIBUTE = "user.wikiq.epoch"  # the lease epoch of a lock's writer (see the module)

_libc = ctypes.CDLL(None, use_errno=True)


def sync_filesystem(path: str | Path | int) -> None:
    """Flush every dirty page of the file system holding ``path`` (or the open file ``path``, a
    descriptor: no open of its own) to disk (one ``syncfs``)."""
    fd = path if isinstance(path, int) else os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        if fd is not path:
            os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ref(repo: str | Path, ref: str = MAIN) -> str | None:
    """The commit ``ref`` points at, read from its file (or packed-refs), None when it does not exist."""
    root = os.fspath(repo)  # paths as strings: a pathlib object per step costs more than the read
    try:
        fd = os.open(f"{root}/{ref}", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    else:
        try:
            return os.read(fd, 256).decode().strip() or None
        finally:
            os.close(fd)
    try:
        for line in Path(root, "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    except FileNotFoundError:
        pass
    return None


def publish_durably(repo: str | Path, pack: PendingPack, held: int | None = None) -> None:
    """Make ``pack`` durable, then visible (steps 3 and 4 of the module's order, without a ref move);
    ``held``: a descriptor open on the repository's file system, to flush it through."""
    sync_filesystem(repo if held is None else held)
    faults.point("git.synced")
    pack.publish()
    fsync_dir(pack.pack_dir)
    faults.point("git.published")


def swap_main(
    repo: Path,
    expected: str | None,
    new: str,
    pack: PendingPack | None = None,
    durable: bool = True,
    epoch: int | None = None,
) -> None:
    """Move ``main`` of ``repo`` from ``expected`` to ``new``, publishing ``pack`` first (see the module),
    under a ``main.lock`` of lease epoch ``epoch`` (None: a writer without a lease).

    Raises ``RefMoved`` when ``main`` is not at ``expected``, ``RefLocked`` when another writer holds the
    lock and ``LockLost`` when a newer writer broke ours; on any failure the unpublished pack is deleted
    and the lock (if ours) removed.
    """
    root = os.fspath(repo)
    ref = f"{root}/{MAIN}"
    lock = ref + ".lock"
    held = False  # the lock path is ours until renamed; after that it may be another writer's lock
    fd = -1
    try:
        fd = _take_lock(lock, expected, epoch)
        held = True
        if epoch is not None:
            _set_epoch(fd, epoch)
        mine = _Mine.of(fd, new.encode() + b"\n")
        actual = read_ref(root)
        if actual != expected:
            raise RefMoved(expected, actual)
        os.write(fd, mine.content)  # the lock stays open until renamed: see ``_Mine``
        faults.point("git.locked")
        if pack is not None:
            if durable:
                publish_durably(root, pack, fd)  # one syncfs also flushes the lock's content
            else:
                pack.publish()
        elif durable:
            sync_filesystem(fd)  # the objects were made durable by whoever wrote them
        if not mine.still(lock):
            held = False  # not ours any more: a newer writer's, or gone
            raise LockLost(expected)
        os.rename(lock, ref)
        held = False
        os.close(fd)
        fd = -1
        if durable:
            fsync_dir(os.path.dirname(ref))
        faults.point("git.ref_moved")
    finally:
        if fd >= 0:
            os.close(fd)
        if held:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
        if pack is not None:
            pack.discard()


@dataclass(frozen=True)
class _Mine:
    """The lock a writer created: its inode and the content the writer puts in it.

    The writer keeps the lock open from its creation until it is renamed over the ref, so the inode
    cannot be freed meanwhile, nor its number given to another file (a newer writer's lock, made after
    breaking this one): while the lock's path names this inode, it is this writer's file, holding what
    only this writer wrote into it (git and wikiq open a lock only with ``O_EXCL``)."""

    device: int
    inode: int
    content: bytes

    @classmethod
    def of(cls, fd: int, content: bytes) -> _Mine:
        """The lock open as ``fd`` (kept open by the caller), to hold ``content``."""
        info = os.fstat(fd)
        return cls(info.st_dev, info.st_ino, content)

    def still(self, lock: str | Path) -> bool:
        """True while ``lock`` is this writer's: the path names the inode it created (one ``stat``)."""
        try:
            info = os.stat(lock)
        except FileNotFoundError:
            return False
        return (info.st_dev, info.st_ino) == (self.device, self.inode)


def _set_epoch(fd: int, epoch: int) -> None:
    """Mark the lock open as ``fd`` with its writer's lease epoch (a file system without user extended
    attributes leaves it unmarked: it is then broken by age, as a lock without an epoch)."""
    with contextlib.suppress(OSError):
        os.setxattr(fd, EPOCH_ATTRIBUTE, str(epoch).encode())


def lock_epoch(lock: str | Path) -> int | None:
    """The lease epoch ``lock`` carries, None when it carries none (``FileNotFoundError`` if it is gone)."""
    try:
        return int(os.getxattr(lock, EPOCH_ATTRIBUTE))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        return None  # no such attribute, or none supported here
    except ValueError:
        return None


def _take_lock(lock: str | Path, expected: str | None, epoch: int | None = None) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        return os.open(lock, flags, 0o644)
    except FileNotFoundError:
        Path(lock).parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        if not _break_stale_lock(lock, epoch):
            raise RefLocked(expected) from None
    try:
        return os.open(lock, flags, 0o644)
    except FileExistsError:
        raise RefLocked(expected) from None


def _break_stale_lock(lock: str | Path, epoch: int | None = None) -> bool:
    """Remove ``lock`` if its writer is stale (see the module): it carries an epoch older than ``epoch``
    (the breaker's lease), or it carries none and is older than ``STALE_LOCK_SECONDS``. A lock of the
    breaker's epoch or newer stays, however old: its writer's lease may be alive (or the breaker's own may
    not be). Returns True when the lock is gone."""
    try:
        held = lock_epoch(lock)
        if held is not None:
            if epoch is None or held >= epoch:
                return False
        elif time.time() - os.stat(lock).st_mtime < STALE_LOCK_SECONDS:
            return False
    except FileNotFoundError:
        return True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)
    return True


def break_stale_locks(repo: Path, epoch: int | None = None) -> int:
    """Remove every stale ref lock of ``repo`` (``refs/**.lock``, ``packed-refs.lock``; see
    ``_break_stale_lock`` for which are, with ``epoch`` the breaker's lease epoch): a git process killed
    mid-update (a fetch, a push) leaves one, and git never breaks it by itself. Only the wiki's writer
    calls this. The number of locks removed."""
    found = list((repo / "refs").rglob("*.lock"))
    packed = repo / "packed-refs.lock"
    if packed.exists():
        found.append(packed)
    return sum(1 for lock in found if _break_stale_lock(lock, epoch))


def write_ref(repo: Path, ref: str, value: str) -> None:
    """Set ``ref`` of ``repo`` to ``value`` (a new file renamed over the old one; not made durable): for
    private refs that only record what this cache last saw, such as a remote branch's last known head."""
    path = repo / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(value + "\n")
    os.replace(tmp, path)
