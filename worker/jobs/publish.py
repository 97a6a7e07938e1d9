"""Commit = publish: batches of a remote-backed wiki land only once their commits are on the remote branch.

The job ``apply_batch`` runs for a remote-backed wiki becomes the head of a *group*: it claims the wiki's
batches queued behind it on its partition (up to ``remote_coalesce_max``; they are marked ``running`` and
stay in the queue, so if this worker dies they run again and look for their own commits). A round, in a
thread (``publish_round``):

1. fetch the remote branch (the system of record) and move the cache's ``main`` to it;
2. for a job that may have run before, look for its ``Wikiq-Job`` trailer on the branch first;
3. check each batch in order on the head the previous one left (preflight, the same rules as a local
   wiki), writing one commit each (objects durable, no ref moved);
4. push the last commit with a compare-and-swap on the branch (``--force-with-lease`` from the fetched head;
   never a force), so one push publishes the whole group; then ``main`` follows.

The remote moved (someone pushed): a new round from step 1, so an edit of a page changed meanwhile fails
``VERSION_MISMATCH``; after ``remote_push_attempts`` such rounds the group fails ``REMOTE_REJECTED``, as it
does when the remote keeps refusing (a hook). The remote unreachable: the group waits (backing off up to
30 s) and tries again, up to ``remote_wait_seconds``, then fails ``REMOTE_UNAVAILABLE``; since a push that
timed out may still have landed, every job then looks for its trailer first. Each job reports only after
the push carrying its commit was accepted (failures and dry runs of the group are decided by that same
round). ``remote_push_interval_seconds`` spaces pushes to one remote (forges rate-limit pushes); batches
arriving meanwhile join the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from worker import faults
from worker.engine import Plan, preflight, review
from worker.engine.paths import ZonePolicy
from worker.errors import BatchRejected, RefMoved, WikiqError
from worker.git import Identity, WikiRepo
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
from worker.git.snapshot import Snapshot
from worker.jobs import events as telemetry
from worker.jobs import lifecycle
from worker.jobs.context import Deps
from worker.jobs.group import queued_behind
from worker.jobs.leases import Lease
from worker.jobs.records import JobRecord, now_ms
from worker.jobs.registry import WikiEntry
from worker.jobs.results import error_info, job_result
from worker.jobs.storage import storage_fault, storage_fault_in
from worker.jobs.wikis import Wikis
from worker.schema.answers import ErrorInfo, JobResult
from worker.schema.edits import Limits

log = logging.getLogger("wikiq.publish")
MAX_BACKOFF = 30.0


@dataclass
class Outcome:
    """What one job of a group ends with: a result, or an error.

    A local wiki's group commit (``worker.jobs.group``) also hands over the job's running record and the
    exact bytes stored for it (``record``, ``stored``: it is then finished without being read again) and
    whether arq never started it (``follower``: its arq entry leaves the queue as it finishes).
    """

    job_id: str
    result: JobResult | None = None
    error: ErrorInfo | None = None
    record: JobRecord | None = None
    stored: bytes | None = None
    follower: bool = False


@dataclass
class Member:
    """One job of a group; ``maybe_ran`` when its commit may already be on the remote."""

    record: JobRecord
    maybe_ran: bool


class _Moved(Exception):
    """The remote branch moved between our fetch and our push."""


class _Refused(Exception):
    """The remote refused the push (a hook, a protected branch)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Published:
    """A finished round: each member's outcome, the branch's head after it, and whether we pushed."""

    outcomes: list[Outcome]
    head: str | None
    pushed: bool
    commits: list[tuple[Plan, int]] = field(default_factory=list)


def _view(repo: WikiRepo, commit: str | None) -> Snapshot:
    """The engine's view of ``commit`` (None: an empty branch, an empty tree)."""
    return repo.snapshot(commit) if commit is not None else Snapshot(repo, None, None)


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


def _decide(
    repo: WikiRepo,
    member: Member,
    tip: str | None,
    head: str | None,
    policy: ZonePolicy,
    limits: Limits,
    key: bytes | None,
) -> tuple[Outcome, Plan | None]:
    """One member on ``head``: its outcome, and the plan to commit (None: nothing to write)."""
    record = member.record
    batch = record.batch
    if batch is None:
        return Outcome(
            record.job_id, error=ErrorInfo(code="INTERNAL", message="the job's batch is gone")
        ), None
    if member.maybe_ran and not batch.dry_run and tip is not None:
        unproven = record.legacy
        mine = repo.find_job_commit(record.job_id, record.base, start=tip, key=key, unproven=unproven)
        if mine is not None:
            parents = repo.commit_info(mine).parents
            plan = preflight(_view(repo, parents[0] if parents else None), batch.edits, policy, limits)
            return Outcome(record.job_id, job_result(mine, plan)), None
    try:
        plan = preflight(_view(repo, head), batch.edits, policy, limits, batch.expect)
    except BatchRejected as exc:
        return Outcome(record.job_id, error=error_info(exc)), None
    if batch.dry_run:
        seen = review(_view(repo, head), plan, policy)
        return Outcome(record.job_id, job_result(None, plan, seen)), None
    return Outcome(record.job_id), plan


def publish_round(
    repo: WikiRepo,
    remote: Remote,
    members: Sequence[Member],
    policy: ZonePolicy,
    limits: Limits,
    fetch_first: bool = True,
    epoch: int | None = None,
    key: bytes | None = None,
) -> Published:
    """One round (see the module): fetch, find earlier runs, check and commit in order, push once.

    Without ``fetch_first`` the round builds on the branch head this cache last saw (our last accepted
    push, or the last fetch) and lets the push's compare-and-swap tell whether someone pushed meanwhile:
    one git command less per round. Raises ``_Moved`` or ``_Refused`` when the push is not accepted,
    ``RemoteUnavailable`` when the remote cannot be used; nothing is reported from such a round.
    ``epoch``: the lease epoch the cache's ``main.lock`` carries (``worker.git.refs``); ``key``: the
    commit key (commits carry their ``Wikiq-Proof``; only proven ones are taken for a job's own).
    """
    break_stale_locks(repo.path, epoch)  # a writer killed during a fetch or push leaves ref locks behind
    known = None if fetch_first else read_ref(repo.path, tracking_ref(remote))
    tip = known if known is not None else fetch(repo.path, remote)
    follow(repo, tip, epoch=epoch)
    head = tip
    outcomes: list[Outcome] = []
    commits: list[tuple[Plan, int]] = []
    for member in members:
        outcome, plan = _decide(repo, member, tip, head, policy, limits, key)
        if plan is not None:
            record = member.record
            assert record.batch is not None
            author = Identity(record.author.name, record.author.email)
            message = record.batch.message
            head = repo.write_commit(plan, head, message, author, job_id=record.job_id, proof_key=key)
            outcome.result = job_result(head, plan)
            commits.append((plan, len(record.batch.edits)))
        outcomes.append(outcome)
    if not commits:
        if known is not None:  # nothing pushed confirmed the head we built on: decide on the real one
            return publish_round(repo, remote, members, policy, limits, True, epoch, key)
        return Published(outcomes, tip, pushed=False)
    assert head is not None
    faults.point("publish.after_commit")
    faults.soon("publish.during_push")
    pushed = push_cas(repo.path, remote, head, tip, built_on_expected=True)
    if isinstance(pushed, Moved):
        raise _Moved(pushed.reason)
    if not isinstance(pushed, Accepted):
        raise _Refused(pushed.reason)
    faults.point("publish.after_push")
    try:
        # the remote holds it: the cache's main may be rebuilt from there
        follow(repo, head, durable=False, epoch=epoch)
    except OSError as exc:
        # published: the remote is the system of record and the next round's fetch moves the cache; a
        # full or read-only cache here must not turn published commits into failed jobs
        log.warning("published %s but the local cache did not follow (%s)", head[:12], exc)
    return Published(outcomes, head, pushed=True, commits=commits)


async def claim_followers(
    deps: Deps, first: JobRecord, limit: int, lease: Lease | None = None
) -> list[JobRecord]:
    """Queued jobs of ``first``'s wiki right behind it on its partition, in order, now marked ``running``.

    The claim stops at a job of the wiki that is not ``queued`` (``running``: a dead or stale run's, which
    runs again first), as a local wiki's group does: nothing accepted after a job may land before it."""
    if limit <= 0:
        return []
    candidates = [JobRecord.model_validate_json(raw) for raw in await queued_behind(deps, first, limit * 8)]
    claimed: list[JobRecord] = []
    for record in candidates:
        if record.wiki != first.wiki or record.status in ("succeeded", "failed", "cancelled"):
            continue
        if record.status != "queued":
            break
        after = await deps.jobs.update(record.job_id, lifecycle.claim, lease)
        if after is None or after.status != "running" or after.runs != record.runs + 1:
            break  # it changed meanwhile (started by another run, cancelled): those behind it wait too
        claimed.append(after)
        telemetry.job_started(after)
        if len(claimed) >= limit:
            break
    return claimed


async def _spaced(last_push: dict[str, float], remote: Remote, interval: float, stop: asyncio.Event) -> None:
    """Wait until ``interval`` seconds have passed since the last push to ``remote`` (or a stop)."""
    left = last_push.get(remote.name, 0.0) + interval - time.monotonic()
    if left > 0:
        await _pause(stop, left)


async def publish_group(
    deps: Deps,
    wikis: Wikis,
    first: JobRecord,
    entry: WikiEntry,
    owner: str | None,
    stop: asyncio.Event,
    lease: Lease | None = None,
) -> list[Outcome]:
    """Publish ``first`` and the batches of its wiki queued behind it (see the module).

    Returns every member's outcome; an empty list when ``stop`` was set while waiting for the remote
    (the jobs stay ``running`` and run again, looking for their commits first). With ``lease``, a
    lease known lost stops it before each round (``Fenced``): nothing of a round is pushed after that.
    """
    settings = deps.settings
    remote = wikis.remote(entry)
    await _spaced(deps.last_push, remote, settings.remote_push_interval_seconds, stop)
    if stop.is_set():
        return []
    followers = await claim_followers(deps, first, settings.remote_coalesce_max - 1, lease)
    members = [Member(first, first.runs > 1)] + [Member(r, r.runs > 1) for r in followers]
    waited_since: float | None = None
    moved = refused = 0
    backoff = 0.5
    fetch_first = any(m.maybe_ran for m in members)  # a possible earlier run: see the branch as it is
    epoch = None if lease is None else lease.epoch
    key = await deps.commit_key.get(settings, deps.jobs.redis)
    while True:
        if lease is not None:
            lease.check()  # a safe point: nothing of this round is written yet
        try:
            repo = await wikis.cache(first.wiki, entry)  # cloned on first use: may wait for it too
            policy = policy_for(repo.path)
            done = await asyncio.to_thread(
                publish_round, repo, remote, members, policy, settings.limits, fetch_first, epoch, key
            )
        except (OSError, RemoteUnavailable) as exc:
            # a full or read-only cache (our write, or git's during a fetch) is STORAGE_UNAVAILABLE
            fault = storage_fault(exc) if isinstance(exc, OSError) else _local_fault(exc)
            if fault is None and isinstance(exc, OSError):
                raise
            if fault is not None and not any(m.maybe_ran for m in members):
                # nothing of this group can have been published: fail at once, no wait
                return [Outcome(m.record.job_id, error=error_info(fault)) for m in members]
            # else an earlier push of the group may have landed: wait and look for it, like below
            unavailable = fault or exc
            assert isinstance(unavailable, WikiqError)
            fetch_first = True
            _may_have_run(members)  # a push whose answer was lost may have landed
            now = time.monotonic()
            waited_since = now if waited_since is None else waited_since
            if now - waited_since >= settings.remote_wait_seconds:
                return [Outcome(m.record.job_id, error=error_info(unavailable)) for m in members]
            log.warning(
                "remote %s unavailable (%s); waiting %.1f s", remote.name, unavailable.message, backoff
            )
        except _Moved:
            telemetry.cas_retry("remote_moved")
            fetch_first = True
            _may_have_run(members)
            moved += 1
            if moved >= settings.remote_push_attempts:
                error = RemoteRejected(
                    f"the branch of remote {remote.name!r} kept moving while we published "
                    f"({moved} attempts); submit the batch again"
                )
                return [Outcome(m.record.job_id, error=error_info(error)) for m in members]
            continue  # fetch and check again at once
        except _Refused as exc:
            _may_have_run(members)  # a ref that moved under git's lease check is refused, not "moved"
            refused += 1
            if refused >= settings.remote_push_attempts:
                error = RemoteRejected(f"remote {remote.name!r} refused the push: {exc.reason}")
                return [Outcome(m.record.job_id, error=error_info(error)) for m in members]
            log.warning("remote %s refused the push (%s); trying again", remote.name, exc.reason)
        else:
            if done.pushed:
                deps.last_push[remote.name] = time.monotonic()
                for plan, edits in done.commits:
                    telemetry.commit_written(plan, edits)
            if done.head is not None:
                await wikis.note_head(
                    first.wiki,
                    repo,
                    entry,
                    done.head,
                    len(done.commits),
                    published_ms=now_ms() if done.pushed else None,
                    partition=first.partition,
                    owner=owner,
                )
            return done.outcomes
        if await _pause(stop, backoff):
            return []
        backoff = min(backoff * 2, MAX_BACKOFF)


def _may_have_run(members: Sequence[Member]) -> None:
    """From now on, each member looks for its own commit on the branch first: a push we lost, or whose
    answer we lost, may have published it, and so may an overlapping run of the same jobs (a worker that
    stalled past its partition lease resumes the group it had claimed while the partition's new owner runs
    the same jobs again). Checked again without looking, such a job would fail ``PATH_EXISTS`` (or be
    committed twice) although its commit is on the branch."""
    for member in members:
        member.maybe_ran = True


def _local_fault(exc: RemoteUnavailable) -> WikiqError | None:
    """``STORAGE_UNAVAILABLE`` when git failed writing our own cache (a full or read-only disk), not when
    the remote reports its own (``remote:`` lines)."""
    if "remote:" in exc.message:
        return None
    return storage_fault_in(exc.message)


async def _pause(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` (waiting for the remote, not for a task) unless ``stop`` is set; True if stopped."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True
