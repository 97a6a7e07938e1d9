"""Group commit: batches of one local wiki queued behind the job being run land with it, each its own commit.

Under load a wiki's batches queue up behind the one running. The job ``apply_batch`` runs for a local wiki
takes along the batches of the same wiki queued right behind it on its partition (``claim``, up to
``GROUP_MAX`` and ``GROUP_BYTES``; they are marked ``running``, one compare-and-set script for all), then,
in a thread (``run_group``), checks each batch in acceptance order on the head the previous one left
(preflight against a view that reads the group's new objects from memory) and writes each as its own
commit with its own ``Wikiq-Job`` trailer: all of them in ONE pack, made durable by ONE ``syncfs``, and
put on ``main`` by ONE compare-and-swap (``worker.git.repo.CommitGroup``). Only then are the jobs
recorded finished, all in one script that also takes the followers' entries out of arq's queue (arq never
runs them) and queues their webhooks (``JobStore.finish_many``).

Exactly once holds as for a single batch: a follower is recorded only after the group is on ``main``; if
the worker dies before, its record stays ``running`` and its arq entry queued, so arq runs it again and it
looks for its own commit by trailer first (``runs`` > 1). Order holds: a follower is taken only from the
contiguous run of ``queued`` jobs of the wiki right behind the head (a job of the wiki that is ``running``
from a dead run stops the group, so it is applied before anything accepted after it), and a batch that
rewrites links or replaces across pages stops it too (it reads many pages through git, which cannot see
the group's objects before they land: it runs as the next head). A follower whose check fails unexpectedly
(not a refusal) is left out with everything behind it, and followers not landed are given back
(``queued`` again, ``release``; their next run looks for their commit first), so one bad batch cannot
fail the others.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from worker.engine import Plan, preflight, review
from worker.engine.paths import ZonePolicy
from worker.errors import BatchRejected, RefLocked, RefMoved, WikiqError
from worker.git import STALE_LOCK_SECONDS, Identity, WikiRepo
from worker.git.repo import CommitGroup
from worker.jobs import events as telemetry
from worker.jobs import lifecycle
from worker.jobs.context import Deps
from worker.jobs.leases import Lease
from worker.jobs.queue import queue_name
from worker.jobs.records import JobRecord
from worker.jobs.results import error_info, job_result
from worker.jobs.storage import storage_fault
from worker.schema.answers import ErrorInfo, JobResult
from worker.schema.edits import Batch, Limits, Rename, ReplaceAcross

log = logging.getLogger("wikiq.worker")
GROUP_MAX = 32  # batches one group commit lands at most (the head and 31 followers)
GROUP_BYTES = 8 * 1024 * 1024  # followers are taken while their batches hold less than this in all
MAX_SWAPS = 50


@dataclass
class Member:
    """One batch of a group: its record as running, the exact bytes stored for it, whether it may have
    run before (look for its commit first), and whether arq started it (the head) or not (a follower)."""

    record: JobRecord
    stored: bytes | None
    maybe_ran: bool
    follower: bool


@dataclass
class Decided:
    """What a member ends with: a result or an error (``plan``: a commit to write for it)."""

    job_id: str
    result: JobResult | None = None
    error: ErrorInfo | None = None
    plan: Plan | None = None
    edits: int = 0


@dataclass
class GroupRun:
    """A group's end: the outcome of each member decided, in order, and the members left out (to give
    back: a follower whose check failed unexpectedly, and those behind it)."""

    decided: list[Decided]
    left_out: list[Member] = field(default_factory=list)


def reads_widely(batch: Batch) -> bool:
    """True for a batch that may read many pages through git (it cannot follow another in a group)."""
    return any(
        isinstance(edit, ReplaceAcross) or (isinstance(edit, Rename) and edit.rewrite_links)
        for edit in batch.edits
    )


async def queued_behind(deps: Deps, first: JobRecord, count: int) -> list[bytes]:
    """The stored records of the first ``count`` jobs of ``first``'s partition queue other than ``first``
    itself, in queue order (any wiki, any status; those gone meanwhile are left out)."""
    redis = deps.jobs.redis
    ids = [
        raw.decode() if isinstance(raw, bytes) else str(raw)
        for raw in await redis.zrange(queue_name(first.partition), 0, count)
    ]
    ids = [job_id for job_id in ids if job_id != first.job_id]
    raws = await redis.mget([deps.jobs.key(job_id) for job_id in ids]) if ids else []
    return [raw for raw in raws if raw is not None]


async def claim(deps: Deps, first: JobRecord, lease: Lease | None = None) -> list[Member]:
    """The queued jobs of ``first``'s wiki right behind it on its partition, in order, now ``running``
    (see the module for where the run stops); none for a batch that must run alone."""
    if first.batch is None or reads_widely(first.batch):
        return []
    raws = await queued_behind(deps, first, GROUP_MAX * 4)
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
        if record.status != "queued" or record.batch is None or reads_widely(record.batch):
            break  # a dead run's job, or one that runs alone: nothing behind it may overtake it
        size += record.queued_bytes
        if chosen and size > GROUP_BYTES:
            break
        lifecycle.claim(record)
        chosen.append((record.job_id, raw, record.model_dump_json(exclude_defaults=True).encode()))
        records.append(record)
        if len(chosen) >= GROUP_MAX - 1:
            break
    stored = await deps.jobs.swap_many(chosen, lease, first.partition)
    members = []
    for (_, _, body), record in zip(chosen[:stored], records, strict=False):
        telemetry.job_started(record)
        members.append(Member(record, body, record.runs > 1, True))  # > 1: given back by an earlier group
    return members


async def release(deps: Deps, members: list[Member], lease: Lease | None = None) -> None:
    """Give back followers that were not landed: ``queued`` again, their run counted, so that whichever
    run takes them next looks for their own commit first (safe even if the group did land)."""
    items = []
    for member in members:
        if not member.follower or member.stored is None:
            continue
        record = lifecycle.give_back(member.record.model_copy())
        items.append((record.job_id, member.stored, record.model_dump_json(exclude_defaults=True).encode()))
    if items:
        await deps.jobs.swap_many(items, lease, members[0].record.partition)


def _decide(
    repo: WikiRepo, group: CommitGroup, member: Member, policy: ZonePolicy, limits: Limits, key: bytes | None
) -> Decided:
    """One member on the group's last commit: its outcome, and the plan to commit (if any)."""
    record = member.record
    batch = record.batch
    if batch is None:
        return Decided(record.job_id, error=ErrorInfo(code="INTERNAL", message="the job's batch is gone"))
    if member.maybe_ran and not batch.dry_run:
        # on main (landed groups only), proven by ``key``
        mine = repo.find_job_commit(record.job_id, record.base, key=key, unproven=record.legacy)
        if mine is not None:
            parents = repo.commit_info(mine).parents
            before = repo.snapshot(parents[0]) if parents else repo.snapshot(None)
            return Decided(record.job_id, job_result(mine, preflight(before, batch.edits, policy, limits)))
    view = group.snapshot()
    try:
        plan = preflight(view, batch.edits, policy, limits, batch.expect)
    except BatchRejected as exc:
        return Decided(record.job_id, error=error_info(exc))
    except WikiqError as exc:
        if exc.code == "INTERNAL":
            raise
        return Decided(record.job_id, error=error_info(exc))
    if batch.dry_run:
        return Decided(record.job_id, job_result(None, plan, review(view, plan, policy)))
    return Decided(record.job_id, plan=plan, edits=len(batch.edits))


def run_group(
    repo: WikiRepo,
    policy: ZonePolicy,
    limits: Limits,
    members: list[Member],
    lease: Lease | None = None,
    key: bytes | None = None,
) -> GroupRun:
    """Check every member in order on the head the previous left and land their commits together (see
    the module). An unexpected error of the head's own check is raised; a follower's leaves it and those
    behind it out. A full or read-only disk fails the members that had a commit to write
    (``STORAGE_UNAVAILABLE``). A lost swap checks the whole group again on the new head. With ``lease``,
    ``main.lock`` carries its epoch, and a lease known lost stops the run before each swap (``Fenced``).
    With ``key``, commits carry their ``Wikiq-Proof`` and only proven ones are taken for a job's own."""
    swaps = 0
    locked_until = time.monotonic() + STALE_LOCK_SECONDS + 5
    while swaps < MAX_SWAPS:
        decided: list[Decided] = []
        left_out: list[Member] = []
        with repo.group() as group:
            for index, member in enumerate(members):
                try:
                    outcome = _decide(repo, group, member, policy, limits, key)
                except Exception:
                    if index == 0:
                        raise
                    log.exception("job %s: unexpected error; left out of the group", member.record.job_id)
                    left_out = members[index:]
                    break
                if outcome.plan is not None:
                    record = member.record
                    assert record.batch is not None
                    author = Identity(record.author.name, record.author.email)
                    message = record.batch.message
                    commit = group.add(outcome.plan, message, author, job_id=record.job_id, proof_key=key)
                    outcome.result = job_result(commit, outcome.plan)
                decided.append(outcome)
            try:
                if lease is not None:
                    lease.check()  # a safe point: nothing of the group is written yet
                group.land(None if lease is None else lease.epoch)
            except RefLocked:
                telemetry.cas_retry("locked")
                if time.monotonic() > locked_until:
                    raise WikiqError("refs/heads/main.lock stays locked", code="INTERNAL") from None
                time.sleep(0.05)  # another writer holds main.lock: back off, then check the head again
            except RefMoved:
                telemetry.cas_retry("moved")
                swaps += 1
            except OSError as exc:
                fault = storage_fault(exc)
                if fault is None:
                    raise
                log.warning("group of %s: %s", members[0].record.job_id, fault.message)
                for outcome in decided:
                    if outcome.plan is not None:
                        outcome.result, outcome.error = None, error_info(fault)
                return GroupRun(decided, left_out)
            else:
                for outcome in decided:
                    if outcome.plan is not None:
                        telemetry.commit_written(outcome.plan, outcome.edits)
                return GroupRun(decided, left_out)
        for member in members:
            member.maybe_ran = True  # main moved: maybe by an earlier run of one of these
    raise WikiqError(f"main kept moving; gave up after {MAX_SWAPS} attempts", code="INTERNAL")
