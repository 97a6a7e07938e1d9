"""Submitting a batch: every check that needs no repository, then one job record and one queue entry.

In order: the caller's write right on the wiki (404 if it may not read it, 403 otherwise), its rate limit,
the batch's static checks (limits, paths, zones, encodings), the caller's path prefixes, the webhook URL
(a configured secret, and no private address unless allowed), the idempotency key, the caller's queued
bytes, then the record and the arq job. If queueing fails half-way, the record, the idempotency key and the
queued bytes are given back, so a refused submission leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json

from arq.connections import ArqRedis

from worker.engine import check_static
from worker.errors import AccessDenied, BatchRejected, IdempotencyConflict, RateLimited, WebhookRefused
from worker.git.policy import policy_for
from worker.jobs.events import job_accepted
from worker.jobs.queue import enqueue_batch
from worker.jobs.records import (
    BatchSummary,
    JobRecord,
    JobStore,
    QueuedBytesExceeded,
    WebhookDelivery,
    new_job_id,
    now_ms,
    partition_of,
)
from worker.jobs.wikis import Wikis
from worker.schema.answers import Author, Job, Submitted
from worker.schema.edits import Batch, written_paths
from worker.service.caller import Principal
from worker.service.ratelimit import check_rate
from worker.settings import Settings
from worker.webhooks.guard import check_webhook_url


def batch_paths(batch: Batch) -> list[str]:
    """Every path (or path prefix) a batch may write: rename targets, a replace_across's prefix, and
    ``""`` (anywhere) for a rename that rewrites links in every page."""
    return [path for edit in batch.edits for path in written_paths(edit)]


def fingerprint(wiki: str, batch: Batch) -> str:
    """A digest of what was submitted, to tell a retried submission from a different one."""
    canonical = json.dumps([wiki, batch.model_dump(mode="json")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def status_url(job_id: str) -> str:
    """Where a job is polled."""
    return f"/v1/jobs/{job_id}"


class Submissions:
    """Accepting batches."""

    def __init__(self, settings: Settings, redis: ArqRedis, wikis: Wikis, jobs: JobStore) -> None:
        self.settings = settings
        self.redis = redis
        self.wikis = wikis
        self.jobs = jobs

    async def submit(
        self, caller: Principal, wiki: str, batch: Batch, idempotency_key: str | None = None
    ) -> Submitted | Job:
        """Check ``batch`` and queue it: ``Submitted`` for a new job, or the ``Job`` an idempotency key named.

        Raises the refusal (``BatchRejected``, ``AccessDenied``, ``RateLimited``, ...) when any check
        fails; nothing is then stored.
        """
        caller.require(wiki, "write")
        at = await self.wikis.head(wiki)
        repo = at.repo
        settings = self.settings
        await check_rate(
            self.redis, caller.id, settings.rate_limit_submissions, settings.rate_limit_window_seconds
        )
        check_static(batch, policy_for(repo.path), settings.limits)
        if not caller.may_write_paths(wiki, batch_paths(batch)):
            # like the seeds: the whole batch is refused and the denied path is not named
            raise AccessDenied("your token may not write every path of this batch", code="FORBIDDEN")
        if batch.webhook is not None:
            if settings.webhook_secret is None:
                raise WebhookRefused(
                    "this server has no WIKIQ_WEBHOOK_SECRET, so it sends no webhooks; poll the job"
                )
            await check_webhook_url(batch.webhook.url, allow_private=settings.webhook_allow_private)
        job_id = new_job_id()
        scope = f"{caller.id}\x00{wiki}"
        if idempotency_key is not None:
            digest = fingerprint(wiki, batch)
            bound, bound_digest = await self.jobs.claim_idempotency(scope, idempotency_key, digest, job_id)
            if bound != job_id:
                if bound_digest != digest:
                    raise IdempotencyConflict("this Idempotency-Key was used with a different batch")
                existing = await self.jobs.get(bound)
                if existing is None:  # the first submission is still storing its record: it is queued
                    return Job(job_id=bound, wiki=wiki, status="queued")
                return existing.public(reveal=True)
        record = self._record(caller, wiki, job_id, batch, at.commit)
        try:
            await self._claim_bytes(record)
        except BaseException:
            if idempotency_key is not None:
                await self.jobs.release_idempotency(scope, idempotency_key)
            raise
        await self.jobs.create(record)
        try:
            await enqueue_batch(self.redis, job_id, record.partition, settings.job_retention_seconds)
        except BaseException:
            await self.jobs.delete(job_id, wiki)
            await self.jobs.release_bytes(record)
            if idempotency_key is not None:
                await self.jobs.release_idempotency(scope, idempotency_key)
            raise
        job_accepted(self.redis, record)
        return Submitted(job_id=job_id, status="queued", status_url=status_url(job_id))

    def _record(self, caller: Principal, wiki: str, job_id: str, batch: Batch, base: str | None) -> JobRecord:
        record = JobRecord(
            job_id=job_id,
            wiki=wiki,
            submitted_ms=now_ms(),
            batch=batch,
            summary=BatchSummary.of(batch),
            author=Author(name=caller.name, email=caller.email),
            submitter=caller.id,
            base=base,
            partition=partition_of(wiki, self.settings.partitions),
            webhook=None if batch.webhook is None else WebhookDelivery(url=batch.webhook.url),
        )
        record.queued_bytes = len(batch.model_dump_json(exclude_defaults=True))
        return record

    async def _claim_bytes(self, record: JobRecord) -> None:
        """Count the batch against its submitter's queued bytes: 413 if it can never fit, 429 while full."""
        cap = self.settings.max_queued_bytes
        if cap <= 0:
            return
        if record.queued_bytes > cap:
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"the batch is {record.queued_bytes} bytes, over the {cap} bytes one principal may have "
                "waiting; split it",
            )
        try:
            await self.jobs.claim_bytes(record, cap)
        except QueuedBytesExceeded as exc:
            raise RateLimited(
                f"{exc.held} bytes of your batches are still waiting (the limit is {cap}); wait for some "
                "to finish, then submit again",
                retry_after=1,
            ) from None
