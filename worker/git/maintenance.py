"""Background upkeep of a repository's packs (see ``Maintenance``)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

MAINTENANCE_CHECK_EVERY = 16  # commits between two looks at objects/pack

REPACK_AT_PACKS = 50  # packs that call for a repack once the wiki is idle (git's gc.autoPackLimit)

REPACK_IDLE_SECONDS = 30.0  # ... idle meaning: no commit by this process for this long

REPACK_FORCED_AT_PACKS = 256  # packs that call for a repack at once, even under a steady stream of commits

STALE_TEMP_SECONDS = 24 * 3600  # tmp_* files and index-less packs older than this are a dead writer's


class Maintenance:
    """Background upkeep of one repository's ``objects/pack``: rolls the per-commit packs up.

    ``committed()`` runs in the committing thread after each successful swap (under the repository lock);
    every ``MAINTENANCE_CHECK_EVERY`` commits it lists ``objects/pack`` (one ``scandir``, which also removes
    a dead writer's leftovers: ``tmp_*`` files and ``.pack`` files without an ``.idx`` older than
    ``STALE_TEMP_SECONDS``). Past ``REPACK_AT_PACKS`` packs it starts a daemon thread that waits until the
    wiki has been idle for ``REPACK_IDLE_SECONDS`` and then runs ``git repack --geometric=2 -d`` (deltas
    on); past ``REPACK_FORCED_AT_PACKS`` (a steady stream of commits never leaves it idle) it runs at once,
    without delta search (``pack.window=0``: consolidation only, a third of the CPU). The commit path never
    waits for it: a repack next to a stream of commits costs them ~40% (its CPU, and its writes that each
    commit's ``syncfs`` must flush), so it waits for a pause when it can.

    The repack is a separate ``git`` process, niced and with one delta thread (it must not take both cores
    of a small machine), in its own session: it outlives a killed worker and finishes or dies cleanly on
    its own (git writes temporary files and renames them, as we do, and fsyncs its packs by default). The
    thread only waits for it. ``--geometric=2`` merges the smallest packs (and any loose objects) until pack
    sizes grow geometrically, so a wiki keeps O(log commits) packs and the big initial pack is rewritten
    only when the rest adds up to half of it. It is safe next to a concurrent writer: it packs every
    object of the packs it rolls up, reachable or not (``--stdin-packs``), and deletes only packs it has
    fully copied; a pack published while it runs is not in its list and stays. Readers (``git cat-file``)
    re-scan ``objects/pack`` when an object is missing; a ``git fsck`` running while a repack deletes the
    packs it rolled up reports them as inaccessible, as it would next to ``git gc``, and is clean once the
    repack ends (checked over 30 SIGKILLs of a writer in a tight commit loop). The idle wait is long (30 s)
    so that a burst of work and its checks are over before a repack starts. Unreferenced objects (lost
    swaps) are kept; a plain ``git gc`` drops them after its grace period.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.packs_dir = path / "objects" / "pack"
        self.since_check = MAINTENANCE_CHECK_EVERY - 1  # look at objects/pack after the first commit
        self.packs = 0  # packs at the last look, plus one per commit since
        self.last_commit = time.monotonic()
        self.thread: threading.Thread | None = None  # waiting for an idle moment, or repacking
        self.forced = False
        self.closed = False
        self.wake = threading.Event()

    def committed(self) -> None:
        """Count one more pack; look at ``objects/pack`` now and then and start a repack when due."""
        self.last_commit = time.monotonic()
        self.packs += 1
        self.since_check += 1
        if self.thread is not None:
            if self.packs >= REPACK_FORCED_AT_PACKS and not self.forced:
                self.forced = True
                self.wake.set()
            return
        if self.since_check < MAINTENANCE_CHECK_EVERY:
            return
        self.since_check = 0
        self.packs = self._scan()
        if self.packs >= REPACK_AT_PACKS:
            self.forced = self.packs >= REPACK_FORCED_AT_PACKS
            self.wake.clear()
            self.thread = threading.Thread(target=self._run, name=f"repack {self.path.name}", daemon=True)
            self.thread.start()

    def close(self) -> None:
        """Give up waiting for an idle moment (a repack already running is left to finish)."""
        self.closed = True
        self.wake.set()

    def _scan(self) -> int:
        try:
            with os.scandir(self.packs_dir) as listing:
                names = {entry.name: entry for entry in listing}
        except OSError:
            return 0
        packs = 0
        stale = time.time() - STALE_TEMP_SECONDS
        for name, entry in names.items():
            leftover = name.startswith("tmp_")
            if name.endswith(".pack"):
                packs += 1
                leftover = name.removesuffix(".pack") + ".idx" not in names
            with contextlib.suppress(OSError):
                if leftover and entry.stat(follow_symlinks=False).st_mtime < stale:
                    os.unlink(entry.path)
        return packs

    def _run(self) -> None:
        try:
            while not self.forced:
                idle = time.monotonic() - self.last_commit
                if idle >= REPACK_IDLE_SECONDS:
                    break
                self.wake.wait(REPACK_IDLE_SECONDS - idle)
                if self.closed:
                    return
            repack(self.path, deltas=not self.forced)
        finally:
            self.since_check = MAINTENANCE_CHECK_EVERY - 1  # look again after the next commit
            self.forced = False
            self.thread = None


def repack(repo: Path, deltas: bool) -> None:
    """Run ``git repack --geometric=2 -d`` on ``repo`` (niced, own session) and wait for it to end."""
    args = ["nice", "-n", "10", "git", "-c", "pack.threads=1", "--git-dir", str(repo)]
    if not deltas:
        args[-2:-2] = ["-c", "pack.window=0"]
    args += ["repack", "--geometric=2", "-d", "-q", "-n"]
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    try:
        pid = os.posix_spawnp(args[0], args, os.environ, file_actions=null, setsid=True)
        os.waitpid(pid, 0)
    except OSError:
        pass  # no git or nice here: the next look tries again
