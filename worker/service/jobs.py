"""Jobs: status with long-poll, cancellation, webhook redelivery, and a wiki's recent jobs.

Rights: reading a job needs ``read`` on its wiki (otherwise it does not exist for the caller). Cancelling
or redelivering needs ``write`` on the wiki and being the job's submitter or an admin of the wiki; a
redelivery also counts against the caller's rate limit and happens at most once per
``redeliver_interval_seconds`` per job. A job's webhook URL is shown whole only to its submitter and the
wiki's admins; others see it without userinfo, query or fragment.
"""

from __future__ import annotations

import asyncio
import contextlib

from arq.connections import ArqRedis

from worker.errors import AccessDenied, BatchRejected, JobNotFound, NotCancellable, WikiNotFound
from worker.jobs import lifecycle
from worker.jobs.events import job_cancelled
from worker.jobs.queue import cancel_queued
from worker.jobs.record import FINISHED, JobRecord
from worker.jobs.store import JobStore
from worker.jobs.waiters import Waiters
from worker.jobs.wikis import Wikis
from worker.schema.answers import Job, JobList, JobStatus
from worker.service.caller import Principal
from worker.service.plans import plan_token
from worker.service.ratelimit import check_rate, once_per
from worker.settings import Settings

MAX_WAIT = 60.0
DRY_RUN_FETCHED_SECONDS = (
    60  # a finished dry run without a batch, read by its submitter, is kept this long more only
)
RECHECK = 5.0  # a long-poll re-reads the record this often even without a wake-up (a lost pub/sub message)


def reveals(caller: Principal, record: JobRecord) -> bool:
    """True when ``caller`` may see the job's webhook URL whole: its submitter, or an admin of the wiki."""
    return caller.id == record.submitter or caller.may(record.wiki, "admin")


def _redeliver(record: JobRecord) -> JobRecord | None:
    if record.webhook is None or record.status not in ("succeeded", "failed"):
        return None
    record.webhook.round += 1
    record.webhook.state = "pending"
    return record


class Jobs:
    """Job operations of the service."""

    def __init__(
        self, settings: Settings, redis: ArqRedis, wikis: Wikis, jobs: JobStore, waiters: Waiters
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.wikis = wikis
        self.records = jobs
        self.waiters = waiters

    async def visible(self, caller: Principal, job_id: str) -> JobRecord:
        """The record of ``job_id`` if ``caller`` may read its wiki; else ``JOB_NOT_FOUND``."""
        record = await self.records.get(job_id) if len(job_id) <= 64 else None
        if record is None or not caller.may(record.wiki, "read"):
            kept = self.settings.job_retention_seconds
            raise JobNotFound(f"no job {job_id[:64]!r} (jobs are kept {kept} s)")
        return record

    async def get(self, caller: Principal, job_id: str, wait: float = 0) -> Job:
        """The job; with ``wait`` it answers as soon as the job is finished, or after ``wait`` (≤ 60) s.

        A dry run that keeps its batch answers its submitter a ``plan`` token (``worker.service.plans``):
        ``result.plan`` when it succeeded (to commit or amend), ``error.plan`` when it failed (to amend). A
        finished dry run that keeps none (a cancelled one) read by its submitter is kept only
        ``DRY_RUN_FETCHED_SECONDS`` more (its result is meant to be read once; a repeated poll within that
        time still finds it); one that keeps its batch stays its full time, for the corrections.

        The wait is woken by the finish message on ``wikiq:events``; the record is re-read on every wake-up
        and at least every ``RECHECK`` seconds, so a message lost in a Redis outage costs latency, not the
        answer.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(wait, 0.0), MAX_WAIT)
        with self.waiters.register(job_id) as finished:
            while True:
                finished.clear()  # before the read: a finish published after it still wakes the wait below
                record = await self.visible(caller, job_id)
                left = deadline - loop.time()
                mine = caller.id == record.submitter
                if record.status in FINISHED and record.dry_run and record.batch is None and mine:
                    await self.records.expire_soon(record, DRY_RUN_FETCHED_SECONDS)
                if record.status in FINISHED or left <= 0:
                    job = record.public(reveals(caller, record))
                    plans = mine and record.dry_run and not record.proposal and record.batch is not None
                    if plans and record.status in FINISHED:
                        if job.result is not None:
                            job.result.plan = plan_token(record.job_id)
                        elif job.error is not None:
                            job.error = job.error.model_copy(update={"plan": plan_token(record.job_id)})
                    return job
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(finished.wait(), min(left, RECHECK))

    def _owner_or_admin(self, caller: Principal, record: JobRecord, action: str) -> None:
        if not caller.may(record.wiki, "write"):
            raise AccessDenied(
                f"your token does not allow write on this job's wiki, so it may not {action}",
                code="FORBIDDEN",
            )
        if caller.id != record.submitter and not caller.may(record.wiki, "admin"):
            raise AccessDenied(
                f"only the job's submitter or an admin of its wiki may {action}", code="FORBIDDEN"
            )

    async def cancel(self, caller: Principal, job_id: str) -> Job:
        """Cancel a job that has not started (status ``cancelled``); ``NOT_CANCELLABLE`` once it has."""
        record = await self.visible(caller, job_id)
        self._owner_or_admin(caller, record, "cancel it")
        after = await self.records.update(job_id, lifecycle.cancel)
        if after is None:
            raise JobNotFound(f"no job {job_id!r}")
        if after.status != "cancelled":
            started = "started" if after.status == "queued" else after.status  # queued again after a run
            raise NotCancellable(f"job {job_id} is {started}; only a queued job can be cancelled")
        await cancel_queued(self.redis, job_id, after.partition)
        job_cancelled(self.redis, after)
        return after.public(reveals(caller, after))

    async def redeliver(self, caller: Principal, job_id: str) -> Job:
        """Send a finished job's webhook again (a new round of attempts, the same ``webhook-id``): the
        record's new round is handed to the partition's outbox in the same write."""
        record = await self.visible(caller, job_id)
        self._owner_or_admin(caller, record, "redeliver its webhook")
        if record.webhook is None:
            raise BatchRejected("INVALID_BATCH", "this job has no webhook.url; nothing to redeliver")
        if record.status not in ("succeeded", "failed"):
            raise BatchRejected(
                "INVALID_BATCH", f"job is {record.status}; its webhook is sent when it finishes"
            )
        settings = self.settings
        await check_rate(
            self.redis, caller.id, settings.rate_limit_submissions, settings.rate_limit_window_seconds
        )
        if settings.redeliver_interval_seconds > 0:
            await once_per(
                self.redis,
                f"redeliver:{job_id}",
                settings.redeliver_interval_seconds,
                "this job's webhook was redelivered moments ago",
            )
        after = await self.records.update(job_id, _redeliver)  # the new round goes to the outbox with it
        if after is None or after.webhook is None:
            raise JobNotFound(f"no job {job_id!r}")
        return after.public(reveals(caller, after))

    async def list(
        self, caller: Principal, wiki: str, status: JobStatus | None = None, limit: int = 50
    ) -> JobList:
        """A wiki's recent jobs, newest first (optionally only those with ``status``)."""
        caller.require(wiki, "read")
        if not await self.wikis.exists(wiki):
            raise WikiNotFound(f"no wiki {wiki[:80]!r}; create it with POST /v1/wikis")
        records = await self.records.wiki_jobs(wiki, limit, status)
        return JobList(jobs=[r.public(reveals(caller, r)) for r in records])
