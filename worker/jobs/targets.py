"""Where a group of batches lands: a ``Target``, a local repository or a git remote.

The pipeline (``worker.jobs.pipeline``) checks a group's batches in order and builds one commit each on a
target's *draft*; the target then lands the draft in one step and says what to do when that fails:

- ``LocalTarget``, a wiki whose repository is the system of record: the draft is a ``CommitGroup`` (its
  objects in memory), landed as ONE pack made durable by ONE ``syncfs`` and put on ``main`` by ONE
  compare-and-swap under ``main.lock`` (carrying the lease epoch, ``worker.git.refs``);
- ``RemoteTarget``, a wiki whose branch lives in a git remote: the draft is a ``CommitGroup`` on the
  branch head (fetched, or the one this cache last saw), written to the cache as ONE durable pack with no
  ref moved, and landed by ONE push with ``--force-with-lease`` from that head; then the cache's ``main``
  follows.

A land that did not happen is a *setback*: ``Again`` (a new round on the head as it is now, after a pause;
``lost_swap`` when someone else moved the branch, counted against the target's ``swaps``) or ``Fail``
(the round's members fail with that error). Anything else is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from worker import faults
from worker.engine.paths import ZonePolicy
from worker.errors import RefLocked, RefMoved, WikiqError
from worker.git import STALE_LOCK_SECONDS, WikiRepo
from worker.git.policy import policy_for
from worker.git.refs import break_stale_locks, read_ref
from worker.git.remote import (
    Accepted,
    Moved,
    Remote,
    RemoteRejected,
    RemoteUnavailable,
    fetch,
    push_cas,
    tracking_ref,
)
from worker.git.repo import CommitGroup
from worker.jobs import events as telemetry
from worker.jobs.clock import now_ms
from worker.jobs.once import runs_alone
from worker.jobs.record import JobRecord
from worker.jobs.registry import WikiEntry
from worker.jobs.resources import Resources
from worker.jobs.storage import storage_fault, storage_fault_in
from worker.jobs.wikis import Wikis
from worker.schema.edits import (
    Batch,
    Delete,
    Each,
    Edit,
    ExtractSection,
    MergePages,
    Rename,
    RenameSection,
    ReplaceAcross,
    RetargetLinks,
)

log = logging.getLogger("wikiq.worker")
GROUP_MAX = 32  # batches a local wiki's group lands at most (the head and 31 followers)
MAX_SWAPS = 50  # swaps of main a local group may lose to other writers before it gives up
LOCKED_BACKOFF = 0.05  # seconds between tries while another writer holds main.lock
MAX_BACKOFF = 30.0  # the longest pause between tries at an unavailable or refusing remote


@dataclass(frozen=True)
class Again:
    """Try again in a new round after ``delay`` seconds; ``lost_swap``: another writer moved the branch
    (counted against the target's ``swaps``); ``stoppable``: a stop (arq's timeout, a shutdown) ends the
    wait, leaving the group's jobs ``running`` to run again."""

    delay: float = 0.0
    lost_swap: bool = False
    stoppable: bool = False


@dataclass(frozen=True)
class Fail:
    """The round's members fail with ``error``; ``plans_only``: only those that had a commit to land."""

    error: WikiqError
    plans_only: bool = False


@dataclass(frozen=True)
class Landed:
    """A land that happened: the branch's head after it, and how many commits it put there."""

    head: str | None
    commits: int


class Target(Protocol):
    """A wiki's branch as the pipeline lands groups on it (see the module)."""

    repo: WikiRepo  # reads the branch's objects (a draft's too, once opened)
    policy: ZonePolicy
    swaps: int  # lost swaps a group may meet before it gives up (``kept_moving``)

    @property
    def remote(self) -> Remote | None:
        """The git remote the wiki lives in (None: its repository is the system of record)."""
        ...

    def takes_along(self, first: JobRecord) -> int:
        """How many followers a group headed by ``first`` may claim (0: it runs alone)."""
        ...

    def alone(self, batch: Batch) -> bool:
        """True for a batch that must head its own group (a claim stops before it)."""
        ...

    async def ready(self, stop: asyncio.Event) -> bool:
        """Wait until a group may be claimed (False: stopped meanwhile)."""
        ...

    async def open(self) -> None:
        """Make ``repo`` and ``policy`` ready for a round (the first may clone)."""
        ...

    def draft(self, epoch: int | None, fresh: bool) -> AbstractContextManager[CommitGroup]:
        """A new draft on the branch's head (``fresh``: read the head as it is, never a guess): a
        ``CommitGroup`` whose ``base`` is that head and ``head`` the last commit built (``base`` when
        none)."""
        ...

    def land(self, draft: CommitGroup, epoch: int | None) -> Landed:
        """Put the draft's commits on the branch, all or none (raises what ``setback`` reads)."""
        ...

    def setback(self, exc: Exception, in_doubt: bool) -> Again | Fail | None:
        """What to do after ``exc`` ended a round (``in_doubt``: a member may have landed already);
        None when ``exc`` is not a setback (it is raised)."""
        ...

    def kept_moving(self, swaps: int) -> WikiqError:
        """The error of a group that lost ``swaps`` swaps in a row (``INTERNAL``: raised; else recorded)."""
        ...

    async def landed(self, landed: Landed, first: JobRecord) -> None:
        """After a round landed (or had nothing to land): what the target keeps of it."""
        ...


def reads_widely(batch: Batch) -> bool:
    """True for a batch that may read many pages through git (it cannot follow another in a local group:
    git cannot see a draft's objects before they land)."""
    return any(_reads_widely(edit) for edit in batch.edits)


def _reads_widely(edit: Edit) -> bool:
    """An edit that reads the pages mentioning something: the link-rewriting ops (an ``each`` that moves
    or deletes pages with their links too) and replace_across."""
    if isinstance(edit, ReplaceAcross | RetargetLinks | ExtractSection | MergePages):
        return True
    if isinstance(edit, Rename | RenameSection | Each):
        return edit.rewrite_links or (isinstance(edit, Each) and edit.redirect_links_to is not None)
    return isinstance(edit, Delete) and edit.redirect_links_to is not None


class LocalTarget:
    """A wiki whose repository is the system of record (see the module)."""

    swaps = MAX_SWAPS
    remote = None

    def __init__(self, repo: WikiRepo) -> None:
        self.repo = repo
        self.policy = policy_for(repo.path)
        self.locked_until = time.monotonic() + STALE_LOCK_SECONDS + 5

    def takes_along(self, first: JobRecord) -> int:
        """A job run again (after an error or a crash) runs alone, as does a batch that reads widely."""
        if runs_alone(first) or first.batch is None or reads_widely(first.batch):
            return 0
        return GROUP_MAX - 1

    def alone(self, batch: Batch) -> bool:
        return reads_widely(batch)

    async def ready(self, stop: asyncio.Event) -> bool:
        return True

    async def open(self) -> None:
        return None

    def draft(self, epoch: int | None, fresh: bool) -> AbstractContextManager[CommitGroup]:
        return self.repo.group()

    def land(self, draft: CommitGroup, epoch: int | None) -> Landed:
        draft.land(epoch)
        return Landed(draft.head, len(draft.commits))

    def setback(self, exc: Exception, in_doubt: bool) -> Again | Fail | None:
        """Another writer's lock: a short pause (but not past the lock's staleness); a moved ``main``: at
        once; a full or read-only disk fails what had a commit to write."""
        if isinstance(exc, RefLocked):
            telemetry.cas_retry("locked")
            if time.monotonic() > self.locked_until:
                raise WikiqError("refs/heads/main.lock stays locked", code="INTERNAL") from None
            return Again(LOCKED_BACKOFF)
        if isinstance(exc, RefMoved):
            telemetry.cas_retry("moved")
            return Again(lost_swap=True)
        if isinstance(exc, OSError) and (fault := storage_fault(exc)) is not None:
            log.warning("group commit: %s", fault.message)
            return Fail(fault, plans_only=True)
        return None

    def kept_moving(self, swaps: int) -> WikiqError:
        return WikiqError(f"main kept moving; gave up after {swaps} attempts", code="INTERNAL")

    async def landed(self, landed: Landed, first: JobRecord) -> None:
        return None


class _Unsure(Exception):
    """A round with nothing to push was built on a guessed head: decide again on the fetched one."""


class _PushMoved(Exception):
    """The remote branch moved between our fetch and our push."""


class _Refused(Exception):
    """The remote refused the push (a hook, a protected branch)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def follow(repo: WikiRepo, tip: str | None, durable: bool = True, epoch: int | None = None) -> None:
    """Move the cache's ``main`` to the remote's head ``tip`` (the remote is the system of record), under
    a ``main.lock`` of lease epoch ``epoch``."""
    for _ in range(3):
        local = repo.head()
        if tip is None or local == tip:
            return
        try:
            repo.move_main(local, tip, durable=durable, epoch=epoch)
            return
        except RefMoved:
            continue  # moved under us (a stale writer of this cache): read it again


class RemoteTarget:
    """A wiki whose branch lives in a git remote (see the module).

    A round fetches the branch first when a member may have run (else it builds on the head this cache
    last saw and lets the push's compare-and-swap tell). The remote moved (someone pushed): a new round
    at once, so an edit of a page changed meanwhile fails ``VERSION_MISMATCH``; after
    ``remote_push_attempts`` the group fails ``REMOTE_REJECTED``, as it does when the remote keeps refusing
    (a hook). The remote unreachable: the group waits (backing off up to ``MAX_BACKOFF``) up to
    ``remote_wait_seconds``, then fails ``REMOTE_UNAVAILABLE``. ``remote_push_interval_seconds`` spaces
    pushes to one remote (forges rate-limit pushes): batches arriving meanwhile join the group.
    """

    def __init__(
        self, resources: Resources, wikis: Wikis, wiki: str, entry: WikiEntry, owner: str | None
    ) -> None:
        self.resources = resources
        self.wiki = wiki
        self.settings = resources.settings
        self.wikis = wikis
        self.entry = entry
        self.owner = owner
        self.remote: Remote = wikis.remote(entry)
        self.swaps = self.settings.remote_push_attempts
        self.refused = 0
        self.backoff = 0.5
        self.waited_since: float | None = None
        self.guessed = False  # the open draft is on the head this cache last saw, not on a fetched one
        self.repo: WikiRepo
        self.policy: ZonePolicy

    def takes_along(self, first: JobRecord) -> int:
        return self.settings.remote_coalesce_max - 1

    def alone(self, batch: Batch) -> bool:
        return reads_widely(batch)  # as on a local wiki: the draft's objects are in memory until the push

    async def ready(self, stop: asyncio.Event) -> bool:
        """Wait until ``remote_push_interval_seconds`` have passed since the last push to this remote."""
        interval = self.settings.remote_push_interval_seconds
        left = self.resources.last_push.get(self.remote.name, 0.0) + interval - time.monotonic()
        if left > 0:
            await pause(stop, left)
        return not stop.is_set()

    async def open(self) -> None:
        self.repo = await self.wikis.cache(self.wiki, self.entry)  # cloned on first use
        self.policy = policy_for(self.repo.path)

    @contextlib.contextmanager
    def draft(self, epoch: int | None, fresh: bool) -> Iterator[CommitGroup]:
        break_stale_locks(self.repo.path, epoch)  # a writer killed during a fetch or push leaves locks
        known = None if fresh else read_ref(self.repo.path, tracking_ref(self.remote))
        tip = known if known is not None else fetch(self.repo.path, self.remote)
        follow(self.repo, tip, epoch=epoch)
        self.guessed = known is not None
        with self.repo.group_on(tip) as group:
            yield group

    def land(self, draft: CommitGroup, epoch: int | None) -> Landed:
        if not draft.commits:
            if self.guessed:
                raise _Unsure  # nothing pushed confirmed the head we built on: decide on the real one
            return Landed(draft.base, 0)
        assert draft.head is not None
        draft.write()  # git pushes from the cache: every commit durable there first, as one pack
        faults.point("publish.after_commit")
        faults.soon("publish.during_push")
        pushed = push_cas(self.repo.path, self.remote, draft.head, draft.base, built_on_expected=True)
        if isinstance(pushed, Moved):
            raise _PushMoved(pushed.reason)
        if not isinstance(pushed, Accepted):
            raise _Refused(pushed.reason)
        faults.point("publish.after_push")
        try:
            # the remote holds it: the cache's main may be rebuilt from there
            follow(self.repo, draft.head, durable=False, epoch=epoch)
        except OSError as exc:
            # published: the remote is the system of record and the next round's fetch moves the cache; a
            # full or read-only cache here must not turn published commits into failed jobs
            log.warning("published %s but the local cache did not follow (%s)", draft.head[:12], exc)
        return Landed(draft.head, len(draft.commits))

    def setback(self, exc: Exception, in_doubt: bool) -> Again | Fail | None:
        """See the class; every setback but a first-try storage fault may have published something, so
        the next round fetches and each member looks for its own commit first."""
        if isinstance(exc, _Unsure):
            return Again()
        if isinstance(exc, _PushMoved):
            telemetry.cas_retry("remote_moved")
            return Again(lost_swap=True)
        if isinstance(exc, _Refused):
            self.refused += 1  # a ref that moved under git's lease check is refused, not "moved"
            if self.refused >= self.settings.remote_push_attempts:
                return Fail(RemoteRejected(f"remote {self.remote.name!r} refused the push: {exc.reason}"))
            log.warning("remote %s refused the push (%s); trying again", self.remote.name, exc.reason)
            return self._later()
        if not isinstance(exc, OSError | RemoteUnavailable):
            return None
        # a full or read-only cache (our write, or git's during a fetch) is STORAGE_UNAVAILABLE
        fault = storage_fault(exc) if isinstance(exc, OSError) else _local_fault(exc)
        if fault is None and isinstance(exc, OSError):
            return None
        if fault is not None and not in_doubt:
            return Fail(fault)  # nothing of this group can have been published: fail at once, no wait
        unavailable = fault or exc  # else an earlier push of the group may have landed: wait, look for it
        assert isinstance(unavailable, WikiqError)
        now = time.monotonic()
        self.waited_since = now if self.waited_since is None else self.waited_since
        if now - self.waited_since >= self.settings.remote_wait_seconds:
            return Fail(unavailable)
        log.warning(
            "remote %s unavailable (%s); waiting %.1f s", self.remote.name, unavailable.message, self.backoff
        )
        return self._later()

    def _later(self) -> Again:
        wait = Again(self.backoff, stoppable=True)
        self.backoff = min(self.backoff * 2, MAX_BACKOFF)
        return wait

    def kept_moving(self, swaps: int) -> WikiqError:
        return RemoteRejected(
            f"the branch of remote {self.remote.name!r} kept moving while we published "
            f"({swaps} attempts); submit the batch again"
        )

    async def landed(self, landed: Landed, first: JobRecord) -> None:
        """Note the push's time (pushes are spaced by it) and the branch's new head."""
        if landed.commits:
            self.resources.last_push[self.remote.name] = time.monotonic()
        if landed.head is not None:
            await self.wikis.note_head(
                self.wiki,
                self.repo,
                self.entry,
                landed.head,
                landed.commits,
                published_ms=now_ms() if landed.commits else None,
                partition=first.partition,
                owner=self.owner,
            )


async def target_for(resources: Resources, wiki: str, owner: str | None) -> Target:
    """Where ``wiki``'s batches land: its remote when it is remote-backed, else its repository (``owner``:
    the worker holding the partition's lease, which fences the registry's head updates)."""
    entry = await resources.wikis.entry(wiki)
    if entry is not None:
        return RemoteTarget(resources, resources.wikis, wiki, entry, owner)
    return LocalTarget(resources.store.open(wiki))


def _local_fault(exc: RemoteUnavailable) -> WikiqError | None:
    """``STORAGE_UNAVAILABLE`` when git failed writing our own cache (a full or read-only disk), not when
    the remote reports its own (``remote:`` lines)."""
    if "remote:" in exc.message:
        return None
    return storage_fault_in(exc.message)


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` (waiting for the remote, not for a task) unless ``stop`` is set; True if stopped."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True
