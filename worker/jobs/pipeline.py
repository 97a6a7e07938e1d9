"""One pipeline for every wiki: claim → decide → land, exactly once and in order; ``finish`` records it.

The job ``apply_batch`` runs (``worker.jobs.run``) becomes the head of a *group* on its wiki's ``Target``
(``worker.jobs.targets``: a local repository, or a git remote):

1. ``claim``: the queued jobs of the wiki right behind the head on its partition, in order, marked
   ``running`` in one compare-and-set script (up to the target's ``takes_along`` and ``GROUP_BYTES``).
   They stay in arq's queue, so if this worker dies they run again and look for their own commits;
2. ``decide`` each member in order on the head the previous one left (pure: preflight, the same rules for
   every target), or "already landed" when a member that may have run finds its own proven commit
   (``Wikiq-Job`` and ``Wikiq-Proof`` trailers) back to the head at its acceptance; each commit to write is
   built on the target's draft;
3. a safe point (``Lease.check``: a run whose lease is known lost stops here, ``Fenced``), then the
   target lands the draft in one step; a setback starts a new round on the head as it is (each member then
   looks for its own commit first), bounded by the target's ``swaps``;
4. ``finish`` (``worker.jobs.finish``) records every member's outcome in one script, fenced by the lease.

Order holds: a follower is taken only from the contiguous run of ``queued`` jobs of the wiki right behind
the head (a job of the wiki ``running`` from another run stops the claim, so it is applied before
anything accepted after it), and a batch the target says must run alone stops it too. A follower whose
check fails unexpectedly (not a refusal) is left out with everything behind it, and followers not landed
are given back (``give_back``: ``queued`` again, their run counted, so their next run looks for their own
commit first), so one bad batch cannot fail the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from worker import keys
from worker.engine import Plan, preflight, review
from worker.engine.paths import ZonePolicy
from worker.errors import BatchRejected, Fenced, WikiqError
from worker.git import Identity, WikiRepo
from worker.git.snapshot import Snapshot
from worker.jobs import events as telemetry
from worker.jobs import lifecycle
from worker.jobs.leases import Lease
from worker.jobs.once import Doubt, in_doubt
from worker.jobs.queue import NotDurable
from worker.jobs.record import JobRecord
from worker.jobs.results import error_info, job_result
from worker.jobs.revisions import Checked
from worker.jobs.store import JobStore
from worker.jobs.targets import Fail, Landed, Target, pause
from worker.schema.answers import ErrorInfo, JobResult
from worker.schema.edits import Batch, Limits

log = logging.getLogger("wikiq.worker")
Confirm = Callable[[list[tuple[str, bytes]]], Awaitable[None]]  # ``confirm_on_replica`` for a partition
GROUP_BYTES = 8 * 1024 * 1024  # followers are taken while their batches hold less than this in all


@dataclass
class Member:
    """One job of a group: its record as running, the exact bytes stored for it (None: unknown, read it
    again to finish it), whether arq started it (the head) or not (a follower: its arq entry leaves the
    queue as it finishes), and whether its commit may be on the branch already (``once.Doubt``)."""

    record: JobRecord
    stored: bytes | None
    follower: bool = False
    doubt: Doubt = field(init=False)

    def __post_init__(self) -> None:
        self.doubt = Doubt.of(self.record)

    @property
    def job_id(self) -> str:
        return self.record.job_id

    @property
    def edits(self) -> int:
        """How many edits the member's batch holds."""
        return 0 if self.record.batch is None else len(self.record.batch.edits)


@dataclass
class Decided:
    """What a member ends with: a result or an error (``plan``: the commit written for it, if any;
    ``checked``: a proposal's check that succeeded, whose revision is written once the round landed,
    ``worker.jobs.revisions``)."""

    member: Member
    result: JobResult | None = None
    error: ErrorInfo | None = None
    plan: Plan | None = None
    checked: Checked | None = None

    @property
    def job_id(self) -> str:
        return self.member.job_id


@dataclass(frozen=True)
class View:
    """What a member is decided on: ``repo`` to read, ``landed`` the branch head when the round began
    (where a member's own commit is looked for), ``head`` the commit the previous member left."""

    repo: WikiRepo
    landed: str | None
    head: str | None
    policy: ZonePolicy
    limits: Limits
    key: bytes | None  # the commit key: only commits proven by it are a job's own

    def snapshot(self, commit: str | None) -> Snapshot:
        """The engine's view of ``commit`` (None: an empty branch, an empty tree)."""
        return self.repo.snapshot(commit) if commit is not None else Snapshot(self.repo, None, None)


def _decide(member: Member, view: View) -> Decided:
    """``member`` on ``view``: already landed (its own commit found), refused, a dry run's review, or a
    plan to commit. An unexpected error (``INTERNAL``, or not a ``WikiqError``) is raised."""
    record = member.record
    batch = record.batch
    if batch is None:
        return Decided(member, error=ErrorInfo(code="INTERNAL", message="the job's batch is gone"))
    mine = member.doubt.own_commit(view.repo, record, view.landed, view.key)
    if mine is not None:
        parents = view.repo.commit_info(mine).parents
        before = view.snapshot(parents[0] if parents else None)
        return Decided(member, job_result(mine, preflight(before, batch.edits, view.policy, view.limits)))
    now = view.snapshot(view.head)
    try:
        plan = preflight(now, batch.edits, view.policy, view.limits, batch.expect)
    except BatchRejected as exc:
        return Decided(member, error=error_info(exc))
    except WikiqError as exc:
        if exc.code == "INTERNAL":
            raise
        return Decided(member, error=error_info(exc))
    if batch.dry_run:
        checked = Checked(plan, view.head) if record.proposal else None
        return Decided(member, job_result(None, plan, review(now, plan, view.policy)), checked=checked)
    return Decided(member, plan=plan)


async def queued_behind(jobs: JobStore, first: JobRecord, count: int) -> list[bytes]:
    """The stored records of the jobs right behind ``first`` among the first ``count`` of its partition
    queue, in queue order (any wiki, any status; those gone meanwhile are left out). A job ahead of
    ``first`` (one arq skipped for its in-progress marker, which may be stale) is never among them: taken
    along, it would land after ``first``."""
    redis = jobs.redis
    ids = [
        raw.decode() if isinstance(raw, bytes) else str(raw)
        for raw in await redis.zrange(keys.queue(first.partition), 0, count)
    ]
    ids = ids[ids.index(first.job_id) + 1 :] if first.job_id in ids else []
    raws = await redis.mget([keys.job(job_id) for job_id in ids]) if ids else []
    return [raw for raw in raws if raw is not None]


def _never(batch: Batch) -> bool:
    return False


async def claim(
    jobs: JobStore,
    first: JobRecord,
    limit: int,
    lease: Lease | None = None,
    alone: Callable[[Batch], bool] = _never,
) -> list[Member]:
    """Up to ``limit`` queued jobs of ``first``'s wiki right behind it on its partition, in order, now
    ``running`` (one script for all; see the module for where the run stops)."""
    if limit <= 0:
        return []
    raws = await queued_behind(jobs, first, (limit + 1) * 4)
    chosen: list[tuple[str, bytes, bytes]] = []
    records: list[JobRecord] = []
    size = 0
    mark = f'"wiki":"{first.wiki}"'.encode()  # records are compact JSON: others' are skipped unparsed
    for raw in raws:
        if mark not in raw:
            continue
        record = JobRecord.model_validate_json(raw)
        if record.wiki != first.wiki or record.status in ("succeeded", "failed", "cancelled"):
            continue
        if record.status != "queued" or record.batch is None or alone(record.batch):
            break  # another run's job, or one that runs alone: nothing behind it may overtake it
        size += record.queued_bytes
        if chosen and size > GROUP_BYTES:
            break
        lifecycle.claim(record)
        chosen.append((record.job_id, raw, record.model_dump_json(exclude_defaults=True).encode()))
        records.append(record)
        if len(chosen) >= limit:
            break
    stored = await jobs.swap_many(chosen, lease, first.partition)  # stops at one changed meanwhile
    members = []
    for (_, _, body), record in zip(chosen[:stored], records, strict=False):
        telemetry.job_started(record)
        members.append(Member(record, body, follower=True))
    return members


async def give_back(
    jobs: JobStore, members: list[Member], lease: Lease | None = None, head: bool = False
) -> None:
    """Give back followers that were not landed (and, with ``head``, the head too): ``queued`` again,
    their run counted, so that whichever run takes them next looks for their own commit first (safe even
    if the group did land; a job given back cannot be cancelled)."""
    items = []
    for member in members:
        if not (member.follower or head) or member.stored is None:
            continue
        record = lifecycle.give_back(member.record.model_copy())
        items.append((record.job_id, member.stored, record.model_dump_json(exclude_defaults=True).encode()))
    if items:
        await jobs.swap_many(items, lease, members[0].record.partition)


async def _give_back_all(jobs: JobStore, members: list[Member], lease: Lease | None) -> None:
    """``give_back`` every member, the head too, as a run stopped while waiting does; Redis away or the
    lease lost leaves them ``running`` (their next run, or the partition's next owner, takes them)."""
    with contextlib.suppress(RedisError, OSError, Fenced):
        await give_back(jobs, members, lease, head=True)


@dataclass
class _Round:
    """A round's end: the members decided (in order), those left out, and either what landed or the
    setback (``failed``: the head's own check failed unexpectedly, raised as it is)."""

    decided: list[Decided] = field(default_factory=list)
    left_out: list[Member] = field(default_factory=list)
    landed: Landed | None = None
    setback: Exception | None = None
    failed: Exception | None = None


def _round(
    target: Target, members: list[Member], limits: Limits, key: bytes | None, lease: Lease | None
) -> _Round:
    """Decide every member in order on the head the previous left, building their commits on a draft,
    and land it (in a thread: git work blocks)."""
    epoch = None if lease is None else lease.epoch
    done = _Round()
    try:
        with target.draft(epoch, fresh=in_doubt([m.doubt for m in members])) as draft:
            for index, member in enumerate(members):
                view = View(target.repo, draft.base, draft.head, target.policy, limits, key)
                try:
                    outcome = _decide(member, view)
                except Exception as exc:
                    if index == 0:
                        done.failed = exc
                        return done
                    log.exception("job %s: unexpected error; left out of the group", member.job_id)
                    done.left_out = members[index:]
                    break
                if outcome.plan is not None:
                    record = member.record
                    assert record.batch is not None
                    author = Identity(record.author.name, record.author.email)
                    commit = draft.add(
                        outcome.plan, record.batch.message, author, job_id=record.job_id, proof_key=key
                    )
                    outcome.result = job_result(commit, outcome.plan)
                done.decided.append(outcome)
            if lease is not None:
                lease.check()  # a safe point: nothing of the round is on the branch yet
            done.landed = target.land(draft, epoch)
    except Fenced:
        raise
    except Exception as exc:  # opening the draft (a fetch), building a commit, or landing it
        done.setback = exc
    return done


async def run(
    jobs: JobStore,
    target: Target,
    head: Member,
    limits: Limits,
    key: bytes | None,
    lease: Lease | None,
    stop: asyncio.Event,
    confirm: Confirm | None = None,
) -> list[Decided]:
    """Land ``head`` and the batches claimed behind it on ``target`` (see the module): every member's
    outcome, in order; empty when ``stop`` was set while waiting, every member given back (``queued``
    again, at its place: the head's arq entry is still queued, and each looks for its own commit first
    when it runs again). With ``confirm`` (a replica-durable deployment), nothing lands before it has
    confirmed the claimed records (``_confirmed``). Unexpected errors are raised, the followers given
    back."""
    if not await target.ready(stop):
        await _give_back_all(jobs, [head], lease)
        return []
    members = [head]
    try:
        members += await claim(jobs, head.record, target.takes_along(head.record), lease, target.alone)
        if confirm is not None and not await _confirmed(confirm, members, lease, stop):
            await _give_back_all(jobs, members, lease)
            return []
        ended = await _rounds(target, members, limits, key, lease, stop)
    except BaseException:
        with contextlib.suppress(RedisError, OSError, Fenced):  # else they run again by themselves, later
            await give_back(jobs, members[1:], lease)
        raise
    if ended is None:
        await _give_back_all(jobs, members, lease)
        return []
    if ended.left_out:
        with contextlib.suppress(RedisError, OSError, Fenced):
            await give_back(jobs, ended.left_out, lease)
    return ended.decided


async def _confirmed(
    confirm: Confirm, members: list[Member], lease: Lease | None, stop: asyncio.Event
) -> bool:
    """Wait until ``confirm`` has a replica confirm the members' records (True), or ``stop`` is set (False).
    A replica away is waited out here, with the partition held (nothing of it could land anyway), so the
    wait counts no run against ``max_job_tries``; ``ClaimLost`` (Redis failed over since the claim) is
    raised: the job runs again on the Redis as it is."""
    claimed = [(m.job_id, m.stored) for m in members if m.stored is not None]
    delay, warned = 0.05, False
    while True:
        if lease is not None:
            lease.check()  # a run whose lease is lost stops waiting
        try:
            await confirm(claimed)
            return True
        except NotDurable as exc:
            if not warned:
                log.warning("job %s: %s; waiting for a replica before landing", members[0].job_id, exc)
                warned = True
        if await pause(stop, delay):
            return False
        delay = min(delay * 2, 1.0)


async def _rounds(
    target: Target,
    members: list[Member],
    limits: Limits,
    key: bytes | None,
    lease: Lease | None,
    stop: asyncio.Event,
) -> _Round | None:
    """Rounds until one lands or fails; None when stopped while waiting."""
    swaps = 0
    while True:
        if lease is not None:
            lease.check()  # a safe point: nothing of this round is written yet
        try:
            await target.open()
        except Exception as exc:
            done = _Round(setback=exc)
        else:
            done = await asyncio.to_thread(_round, target, members, limits, key, lease)
        if done.failed is not None:
            raise done.failed
        if done.landed is not None:
            for outcome in done.decided:
                if outcome.plan is not None:
                    telemetry.commit_written(outcome.plan, outcome.member.edits)
            await target.landed(done.landed, members[0].record)
            return done
        assert done.setback is not None
        step = target.setback(done.setback, in_doubt([m.doubt for m in members]))
        if step is None:
            raise done.setback
        if isinstance(step, Fail):
            return _failed(done, members, step)
        for member in members:
            member.doubt.after_setback()
        if step.lost_swap:
            swaps += 1
            if swaps >= target.swaps:
                error = target.kept_moving(swaps)
                if error.code == "INTERNAL":
                    raise error
                return _failed(done, members, Fail(error))
        if step.delay > 0:
            if step.stoppable:
                if await pause(stop, step.delay):
                    return None
            else:
                await asyncio.sleep(step.delay)  # another writer holds main.lock: it is done in a moment


def _failed(done: _Round, members: list[Member], fail: Fail) -> _Round:
    """``done`` with its members failed by ``fail`` (those left out stay out: they are given back)."""
    error = error_info(fail.error)
    if fail.plans_only and done.decided:
        for outcome in done.decided:
            if outcome.plan is not None:
                outcome.result, outcome.error = None, error
        return done
    done.decided = [Decided(m, error=error) for m in members[: len(members) - len(done.left_out)]]
    return done
