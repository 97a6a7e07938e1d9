"""One call per job event: a structured log line and the matching metrics, for the API and the workers.

Lines carry ids, codes, counts and durations only (``job_id``, ``wiki``, ``partition``, ``commit``,
``duration_ms``, ``error``, ``index``), never page content, batch bodies, webhook URLs, tokens or secrets.
Every function costs microseconds: the log line is rendered in-process and the metrics are increments
in memory (``worker.metrics``), written to Redis in the background.
"""

from __future__ import annotations

from typing import Any

from worker.engine import Plan
from worker.jobs.record import JobRecord
from worker.schema.answers import Attempt
from worker.telemetry import logs
from worker.telemetry.metrics import RECORDER

log = logs.get("wikiq.jobs")


def _ms_between(start: int | None, end: int | None) -> int | None:
    return None if start is None or end is None else max(0, end - start)


def job_accepted(redis: Any, record: JobRecord) -> None:
    """A batch was queued (API)."""
    RECORDER.start(redis)
    RECORDER.inc("wikiq_jobs_accepted")
    log.info(
        "job.accepted",
        job_id=record.job_id,
        wiki=record.wiki,
        partition=record.partition,
        edit_count=record.summary.count,
        dry_run=record.dry_run,
        webhook=record.webhook is not None,
    )


def job_cancelled(redis: Any, record: JobRecord) -> None:
    """A queued job was cancelled (API)."""
    RECORDER.start(redis)
    RECORDER.inc("wikiq_jobs_cancelled")
    log.info("job.cancelled", job_id=record.job_id, wiki=record.wiki, partition=record.partition)


def job_started(record: JobRecord) -> None:
    """A worker began a run of ``record`` (the first run observes the queue wait)."""
    queued = _ms_between(record.submitted_ms, record.started_ms)
    if record.runs == 1 and queued is not None:
        RECORDER.observe("wikiq_job_queue_seconds", queued / 1000)
    log.info(
        "job.started",
        job_id=record.job_id,
        wiki=record.wiki,
        partition=record.partition,
        run=record.runs,
        queued_ms=queued if record.runs == 1 else None,
    )


def job_finished(record: JobRecord | None) -> None:
    """A worker recorded ``record`` as succeeded or failed."""
    if record is None or record.status not in ("succeeded", "failed"):
        return
    duration = _ms_between(record.started_ms, record.finished_ms)
    if duration is not None:
        RECORDER.observe("wikiq_job_run_seconds", duration / 1000, (("outcome", record.status),))
    common = {"job_id": record.job_id, "wiki": record.wiki, "partition": record.partition, "run": record.runs}
    if record.status == "succeeded":
        RECORDER.inc("wikiq_jobs_succeeded")
        result = record.result
        log.info(
            "job.succeeded",
            **common,
            commit=None if result is None else result.commit,
            edit_count=record.summary.count,
            applied_count=0 if result is None else len(result.applied),
            duration_ms=duration,
        )
        return
    error = record.error
    code = "INTERNAL" if error is None else error.code
    RECORDER.inc("wikiq_jobs_failed", (("code", code),))
    index = None if error is None else error.index
    log.info("job.failed", **common, error=code, index=index, duration_ms=duration)


def job_retry(job_id: str, exc: BaseException) -> None:
    """A run ended with an unexpected error and is handed back to arq to run again."""
    RECORDER.inc("wikiq_job_retries")
    log.warning("job.retry", job_id=job_id, error="INTERNAL", exc_type=type(exc).__name__)


def commit_written(plan: Plan, edit_count: int) -> None:
    """A batch's commit is on ``main`` (called from the git thread)."""
    size = sum(len(f.data) for f in plan.changes.values() if f is not None and f.data is not None)
    RECORDER.observe("wikiq_commit_edits", float(edit_count))
    RECORDER.observe("wikiq_commit_bytes", float(size))


def cas_retry(reason: str) -> None:
    """The compare-and-swap of ``main`` lost (``moved``) or found it locked (``locked``); checking again."""
    RECORDER.inc("wikiq_cas_retries", (("reason", reason),))


def webhook_outcome(attempt: Attempt) -> str:
    """The outcome of one recorded attempt: delivered, http_4xx, http_5xx, redirect, timeout or network."""
    status = attempt.status
    if status is None:
        return "timeout" if attempt.error == "timeout" else "network"
    if 200 <= status < 300:
        return "delivered"
    if 300 <= status < 400:
        return "redirect"
    return "http_4xx" if status < 500 else "http_5xx"


def webhook_attempt(record: JobRecord | None, round_: int, attempt_no: int, attempt: Attempt) -> None:
    """One delivery attempt of a job's webhook was made and recorded (``record`` is the job after it)."""
    outcome = webhook_outcome(attempt)
    RECORDER.inc("wikiq_webhook_attempts", (("outcome", outcome),))
    state = None if record is None or record.webhook is None else record.webhook.state
    log.info(
        "webhook.attempt",
        job_id=None if record is None else record.job_id,
        wiki=None if record is None else record.wiki,
        round=round_,
        attempt=attempt_no,
        outcome=outcome,
        status=attempt.status,
        duration_ms=attempt.ms,
        state=state,
    )
