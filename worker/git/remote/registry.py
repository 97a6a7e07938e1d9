"""The declared remotes of a running process, re-read from the remotes file whenever it changes.

At start-up the file must be good: ``RemoteRegistry(path)`` raises the ``ValueError`` of ``load_remotes``
and the caller refuses to start. Later, every ``lookup``/``remotes`` call looks at the file's identity
(mtime, ctime, size, inode: one ``stat``) and re-reads it when that changed. A bad edit, or a file that is
gone or unreadable, keeps the last good set and logs ONE warning line naming the file and the problem per
bad version of the file (not one per lookup); the next good version is taken as soon as it is seen.
A registry made with ``path=None`` (no ``WIKIQ_REMOTES_FILE``) declares no remotes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from worker.git.remote.config import Remote, load_remotes
from worker.git.remote.errors import RemoteNotFound

log = logging.getLogger("wikiq.remote")

_Signature = tuple[int, int, int, int, int]
_MAX_LISTED = 20


class RemoteRegistry:
    """The remotes declared in ``path``, kept up to date with the file; thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._remotes: Mapping[str, Remote] = MappingProxyType({})
        self._signature: _Signature | None = None
        self._refused: list[_Signature | None] = []  # the bad version last warned about, if any
        if self.path is not None:
            with contextlib.suppress(OSError):  # then load_remotes says what is wrong
                self._signature = _signature(self.path)
            self._remotes = MappingProxyType(load_remotes(self.path))

    def remotes(self) -> Mapping[str, Remote]:
        """Every declared remote by name, as the file says now (or as it last said when it was good)."""
        self.refresh()
        return self._remotes

    def lookup(self, name: str) -> Remote:
        """The remote called ``name``; ``RemoteNotFound`` (REMOTE_NOT_FOUND) listing the declared names."""
        remotes = self.remotes()
        remote = remotes.get(name)
        if remote is not None:
            return remote
        shown = repr(name[:64]) + ("..." if len(name) > 64 else "")
        if not remotes:
            raise RemoteNotFound(f"no remote named {shown}: no remotes are declared")
        names = sorted(remotes)
        listed = ", ".join(names[:_MAX_LISTED]) + (", ..." if len(names) > _MAX_LISTED else "")
        raise RemoteNotFound(f"no remote named {shown}; declared: {listed}")

    def refresh(self) -> bool:
        """Re-read the file if it changed since last read; True when a new good version was taken."""
        if self.path is None:
            return False
        with self._lock:
            try:
                signature: _Signature | None = _signature(self.path)
            except OSError:
                signature = None
            if signature == self._signature or signature in self._refused:
                return False
            if signature is None:
                self._refuse(None, f"remotes file {self.path}: it is gone or unreadable")
                return False
            try:
                remotes = load_remotes(self.path)
            except ValueError as exc:
                self._refuse(signature, str(exc))
                return False
            self._remotes = MappingProxyType(remotes)
            self._signature = signature
            self._refused = []
            log.info("remotes file %s re-read: %d remotes declared", self.path, len(remotes))
            return True

    def _refuse(self, signature: _Signature | None, problem: str) -> None:
        self._refused = [signature]
        log.warning("%s; keeping the %d remotes of its last good version", problem, len(self._remotes))


def _signature(path: Path) -> _Signature:
    """What changes when the file is edited, replaced or touched (``OSError`` when it is not there)."""
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)
