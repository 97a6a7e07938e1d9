"""Upkeep of a repository's packs that the commit itself does not do (see ``Maintenance``), and the one
background ``git repack`` a process runs at a time (``Repacker``)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from worker.git.packs import PACKS

MAINTENANCE_CHECK_EVERY = 16  # commits between two looks at objects/pack

GIT_REPACK_AT = 4  # packs the commit's roll-up leaves alone (big, or git's deltified ones) that call for git

REPACK_BUDGET = 0.5  # share of one core a process's background repacks may use, averaged over time

PRUNE_EVERY = 24 * 3600.0  # seconds between two prunes of one wiki (the marker file's age)

PRUNE_GRACE_SECONDS = 24 * 3600  # an unreachable object younger than this is never pruned

PRUNE_MARKER = "wikiq-pruned"  # in the repository's folder: its mtime is the last prune

STALE_TEMP_SECONDS = 3600  # tmp_* files and index-less packs older than this are a dead writer's


class Maintenance:
    """The writer's upkeep of one repository's ``objects/pack``, beyond the roll-up each commit does.

    ``committed(big)`` runs in the committing thread after each commit (under the repository lock), with
    a way to count the packs the roll-up cannot absorb (``big()``: over ``ROLLUP_MAX_BYTES`` or deltified
    by git), asked only when a look is due.
    Every ``MAINTENANCE_CHECK_EVERY`` commits it lists ``objects/pack`` once to remove a dead writer's
    leftovers (``remove_leftovers``), and asks the process's ``Repacker`` for

    - a ``git repack --geometric=2 -d`` (deltas on) once ``GIT_REPACK_AT`` big packs accumulated: git keeps
      them in a geometric progression and deltifies what the roll-up copied whole;
    - a prune once the last one (``PRUNE_MARKER``'s mtime) is over ``PRUNE_EVERY`` old (see ``prune``).

    Neither waits for an idle wiki: both run next to a steady stream of commits, on the repacker's budget.
    """

    def __init__(self, path: Path, repacker: Repacker | None = None) -> None:
        self.path = path
        self.packs_dir = path / "objects" / "pack"
        self.repacker = REPACKER if repacker is None else repacker
        self.since_check = MAINTENANCE_CHECK_EVERY - 1  # look at objects/pack after the first commit

    def committed(self, big: Callable[[], int]) -> None:
        """Count one commit; now and then clean up and ask for a repack or a prune when due."""
        self.since_check += 1
        if self.since_check < MAINTENANCE_CHECK_EVERY:
            return
        self.since_check = 0
        self._scan()
        if big() >= GIT_REPACK_AT:
            self.repacker.request(self.path, "geometric")
        marker = self.path / PRUNE_MARKER
        try:
            due = time.time() - marker.stat().st_mtime >= PRUNE_EVERY
        except FileNotFoundError:  # a wiki never pruned: its first prune is a day away
            with contextlib.suppress(OSError):
                marker.touch()
            due = False
        if due:
            self.repacker.request(self.path, "prune")

    def close(self) -> None:
        """Nothing to stop: a repack asked for runs (or is already running) in the repacker."""

    def _scan(self) -> None:
        remove_leftovers(self.path, STALE_TEMP_SECONDS)


class Repacker:
    """The process's background ``git`` repacks: one at a time, each niced with one thread (never both
    cores of a small machine), and after each a pause as long as it ran (``REPACK_BUDGET``: at most half
    of one core over time, whatever the load; git's deltas shrink a wide folder's rolled-up trees 30-fold,
    at ~150 MB/s here, so it is worth that much). Requests for a repository already waiting
    are merged. The ``git`` runs in its own session: it outlives a killed worker and finishes or dies
    cleanly on its own (it writes temporary files, renames them and fsyncs its packs).
    """

    def __init__(self, budget: float = REPACK_BUDGET) -> None:
        self.budget = budget
        self.waiting: OrderedDict[Path, set[str]] = OrderedDict()
        self.running: Path | None = None
        self.thread: threading.Thread | None = None
        self.cond = threading.Condition()
        self.runs = 0

    def request(self, path: Path, kind: str) -> None:
        """Ask for a ``kind`` ("geometric" or "prune") repack of ``path``."""
        with self.cond:
            self.waiting.setdefault(path, set()).add(kind)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="wikiq repacker", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is waiting or running (tests); False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: not self.waiting and self.running is None, timeout)

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.waiting)
                path, kinds = self.waiting.popitem(last=False)
                self.running = path
            start = time.monotonic()
            try:
                if "prune" in kinds:
                    prune(path)
                else:
                    repack(path, deltas=True)
            finally:
                with self.cond:
                    self.running = None
                    self.runs += 1
                    self.cond.notify_all()
            spent = time.monotonic() - start
            time.sleep(spent * (1 - self.budget) / self.budget)  # the budget: rest in proportion


REPACKER = Repacker()


def remove_leftovers(repo: Path, older_than: float) -> int:
    """Delete what dead writers left in ``objects/pack`` more than ``older_than`` seconds ago: ``tmp_*``
    files (a pack never published) and ``.pack`` files without an ``.idx`` (killed between the two renames
    of a publish, or between the two deletions of a retired pack: either way nothing refers to it; ``git
    repack --cruft`` refuses to run next to one). A live writer holds either for microseconds to seconds,
    hence the age. The number of files deleted."""
    try:
        with os.scandir(repo / "objects" / "pack") as listing:
            names = {entry.name: entry for entry in listing}
    except OSError:
        return 0
    stale = time.time() - older_than
    removed = 0
    for name, entry in names.items():
        leftover = name.startswith("tmp_")
        if name.endswith(".pack"):
            leftover = name.removesuffix(".pack") + ".idx" not in names
        with contextlib.suppress(OSError):
            if leftover and entry.stat(follow_symlinks=False).st_mtime < stale:
                os.unlink(entry.path)
                removed += 1
    return removed


def _git(repo: Path, *args: str) -> bool:
    """Run ``git`` on ``repo`` niced, one thread, in its own session, output discarded; True on success.

    The packs this process's roll-ups retired are deleted first: git's repack refuses to run while a pack's
    index is gone and its pack file not yet."""
    PACKS.wait_retired(30)
    argv = ["nice", "-n", "10", "git", "-c", "pack.threads=1", "-c", "repack.writeBitmaps=false"]
    argv += ["--git-dir", str(repo), *args]
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=null, setsid=True)
        _, status = os.waitpid(pid, 0)
    except OSError:
        return False  # no git or nice here: the next look tries again
    return os.waitstatus_to_exitcode(status) == 0


def repack(repo: Path, deltas: bool) -> bool:
    """``git repack --geometric=2 -d`` on ``repo``: the smallest packs (and loose objects) merged until pack
    sizes grow geometrically, every object of a merged pack kept, reachable or not (``--stdin-packs``), only
    packs it has fully copied deleted; a pack published while it runs is not in its list and stays.
    ``deltas=False``: no delta search (``pack.window=0``). True when git succeeded."""
    args = ["-c", "pack.window=0"] if not deltas else []
    return _git(repo, *args, "repack", "--geometric=2", "-d", "-q", "-n")


def prune(repo: Path, grace_seconds: int = PRUNE_GRACE_SECONDS) -> bool:
    """Drop objects nothing references any more (lost swaps, a writer killed between publishing its pack
    and moving ``main``, remote publishes that lost), with git's own rules: ``git repack --cruft -d``.

    Every reachable object goes into one pack; unreachable ones into a cruft pack that records each one's
    mtime (its pack's, or when it was last written); those older than ``grace_seconds`` are dropped.

    Why it never drops an object a concurrent writer may reference: a wikiq writer only refers to objects it
    wrote itself into a pack of its own moments earlier (fresh: far inside the grace period) and to objects
    reachable from the commit it builds on. That commit is ``main`` (checked under ``main.lock`` when the
    ref moves, and ``main`` only ever moves to a descendant) or, for a remote-backed wiki, a commit of the
    remote's branch kept by its tracking ref, or the writer's own fresh commit of the same publish round.
    git computes reachability from every ref at its start and deletes only the packs it listed then, so a
    pack published while it runs stays, and one published just before but not yet on ``main`` is fresh,
    hence kept in the cruft pack. The grace period (a day) is far beyond the longest a writer holds
    objects before referring to them (a publish round, bounded by the fetch and push timeouts).
    Touches ``PRUNE_MARKER``; True when git succeeded.
    """
    remove_leftovers(repo, min(grace_seconds, STALE_TEMP_SECONDS))
    expire = f"@{int(time.time()) - grace_seconds}"
    done = _git(repo, "repack", "--cruft", "-d", "-q", "-n", f"--cruft-expiration={expire}")
    if done:
        with contextlib.suppress(OSError):
            (repo / PRUNE_MARKER).touch()
    return done
