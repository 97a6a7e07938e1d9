"""Storage faults, named: a full or read-only data directory is ``STORAGE_UNAVAILABLE``, never ``INTERNAL``.

A job whose git write fails because the filesystem of ``WIKIQ_DATA_DIR`` is full (``ENOSPC``), over a quota
(``EDQUOT``) or mounted read-only (``EROFS``) fails at once with ``STORAGE_UNAVAILABLE`` and a message saying
what an operator must do; it is not retried, since trying again cannot help until someone frees space, and
the git layer has already removed what it had begun to write (temporary packs; the ref is moved last, by
compare-and-swap), so nothing partial is left. The same faults met by the API (creating a wiki) answer 503
with the same code. ``free_bytes`` serves ``/readyz`` and ``wikiq doctor``, which report a data directory
below ``WIKIQ_MIN_FREE_BYTES`` before jobs start failing.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from worker.errors import StorageUnavailable

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
# what git itself prints for the same faults (a fetch into a remote-backed wiki's cache runs git)
_GIT_TELLS = re.compile(r"No space left on device|Disk quota exceeded|Read-only file system", re.IGNORECASE)


def storage_fault(exc: BaseException) -> StorageUnavailable | None:
    """The ``STORAGE_UNAVAILABLE`` error ``exc`` stands for (an ``OSError`` of a full, over-quota or
    read-only filesystem, or a failed git command whose ``stderr`` says so, also when wrapped as its
    cause), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in STORAGE_ERRNOS:
            return StorageUnavailable(describe(current.errno))
        stderr = getattr(current, "stderr", None)  # GitPython's GitCommandError, subprocess errors
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        if isinstance(stderr, str) and (told := storage_fault_in(stderr)) is not None:
            return told
        current = current.__cause__ or current.__context__
    return None


def storage_fault_in(text: str) -> StorageUnavailable | None:
    """The ``STORAGE_UNAVAILABLE`` error a git message (stderr) reports, else None."""
    match = _GIT_TELLS.search(text)
    if match is None:
        return None
    told = match.group(0).lower()
    code = errno.EROFS if "read-only" in told else errno.EDQUOT if "quota" in told else errno.ENOSPC
    return StorageUnavailable(describe(code))


def describe(code: int | None) -> str:
    """What happened and what to do, for a client and an operator (no path, no host detail)."""
    if code == errno.EROFS:
        return (
            "the server's wiki storage is read-only (EROFS); nothing was written. An operator must make "
            "the data directory (WIKIQ_DATA_DIR) writable again; then submit the batch again"
        )
    what = "over its disk quota (EDQUOT)" if code == errno.EDQUOT else "full (ENOSPC)"
    return (
        f"the server's wiki storage is {what}; nothing was written. An operator must free space on the "
        "filesystem of the data directory (WIKIQ_DATA_DIR): delete other files there, or run "
        "`git gc --prune=now` in the wikis' repositories to drop unreferenced objects; then submit the "
        "batch again"
    )


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (None if it cannot be read)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # a data directory not made yet: its filesystem is its first existing parent's
    try:
        stats = os.statvfs(probe)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def human(count: float) -> str:
    """Bytes as a short figure (``12.3 MiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"
