"""Jobs: status with long-poll, cancellation, a wiki's recent jobs, webhook redelivery."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query

from api.auth import Principal, principal
from api.errors import ERROR_RESPONSES
from api.state import AppState, state
from worker.errors import AccessDenied, BatchRejected, JobNotFound, NotCancellable, WikiNotFound
from worker.jobstore import FINISHED, JobRecord, now_iso
from worker.queue import cancel_queued
from worker.telemetry import job_cancelled
from worker.webhooks import enqueue_attempt

router = APIRouter(prefix="/v1", tags=["jobs"], responses=ERROR_RESPONSES)
App = Annotated[AppState, Depends(state)]
Caller = Annotated[Principal, Depends(principal)]
MAX_WAIT = 60.0
RECHECK = 5.0  # a long-poll re-reads the record this often even without a wake-up (a lost pub/sub message)


async def _visible(app: AppState, caller: Principal, job_id: str) -> JobRecord:
    record = await app.jobs.get(job_id)
    if record is None or not caller.may(record.wiki, "read"):
        raise JobNotFound(f"no job {job_id[:64]!r} (jobs are kept {app.settings.job_retention_seconds} s)")
    return record


@router.get("/jobs/{job_id}")
async def get_job(
    job_id: str, app: App, caller: Caller, wait: Annotated[float, Query(ge=0)] = 0
) -> dict[str, Any]:
    """The job; with ``wait=S`` it answers as soon as the job is finished, or after S (at most 60) s.

    The wait is woken by the finish message on ``wikiq:events``; the record is re-read on every wake-up
    and at least every ``RECHECK`` seconds, so a message lost in a Redis outage costs latency, not the answer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait, MAX_WAIT)
    with app.waiters.register(job_id) as finished:
        while True:
            finished.clear()  # before the read: a finish published after it still wakes the wait below
            record = await _visible(app, caller, job_id)
            left = deadline - loop.time()
            if record.status in FINISHED or left <= 0:
                return record.public()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), min(left, RECHECK))


def _cancel(record: JobRecord) -> JobRecord | None:
    if record.status != "queued":
        return None
    record.status = "cancelled"
    record.finished_at = now_iso()
    return record


@router.delete("/jobs/{job_id}")
async def cancel_job(job_id: str, app: App, caller: Caller) -> dict[str, Any]:
    """Cancel a job that has not started: ``200`` with status ``cancelled``, ``409`` once it started."""
    record = await _visible(app, caller, job_id)
    if not caller.may(record.wiki, "write"):
        raise AccessDenied("your token does not allow write on this job's wiki", code="FORBIDDEN")
    after = await app.jobs.update(job_id, _cancel)
    if after is None:
        raise JobNotFound(f"no job {job_id!r}")
    if after.status != "cancelled":
        raise NotCancellable(f"job {job_id} is {after.status}; only a queued job can be cancelled")
    await cancel_queued(app.redis, job_id, after.partition)
    job_cancelled(app.redis, after)
    return after.public()


def _redeliver(record: JobRecord) -> JobRecord | None:
    if record.webhook is None or record.status not in ("succeeded", "failed"):
        return None
    record.webhook["round"] = int(record.webhook.get("round", 0)) + 1
    record.webhook["state"] = "pending"
    return record


@router.post("/jobs/{job_id}/webhook/redeliver", status_code=202)
async def redeliver_webhook(job_id: str, app: App, caller: Caller) -> dict[str, Any]:
    """Send a finished job's webhook again (a new round of attempts, same ``webhook-id``): ``202``."""
    record = await _visible(app, caller, job_id)
    if not caller.may(record.wiki, "write"):
        raise AccessDenied("your token does not allow write on this job's wiki", code="FORBIDDEN")
    if record.webhook is None:
        raise BatchRejected("INVALID_BATCH", "this job has no webhook.url; nothing to redeliver")
    if record.status not in ("succeeded", "failed"):
        raise BatchRejected("INVALID_BATCH", f"job is {record.status}; its webhook is sent when it finishes")
    after = await app.jobs.update(job_id, _redeliver)
    assert after is not None and after.webhook is not None
    await enqueue_attempt(app.redis, job_id, int(after.webhook["round"]), 0, 0.0)
    return after.public()


@router.get("/wikis/{wiki}/jobs")
async def list_jobs(
    wiki: str,
    app: App,
    caller: Caller,
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """A wiki's recent jobs, newest first."""
    if not caller.may(wiki, "read") or not app.store.exists(wiki):
        raise WikiNotFound(f"no wiki {wiki!r}")
    records = await app.jobs.wiki_jobs(wiki, limit, status)
    return {"jobs": [r.public() for r in records]}
