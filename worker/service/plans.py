"""Plans: commit exactly what a dry run checked, without sending the batch again.

A succeeded dry run keeps its batch while its record is kept (``WIKIQ_DRY_RUN_RETENTION_SECONDS``) and
answers its submitter ``result.plan``, a token naming it. Submitting ``{"plan": token}``
(``PlanSubmission``) queues that batch again, with the ``applied`` list the dry run answered as what it
must produce (``Batch.expect``): the worker checks it on the head it lands on, as any batch, and commits
only when the result is the same, change for change (same paths, same resulting versions), so what lands
is byte for byte what was shown; if a file it touches changed meanwhile, the job fails ``PLAN_STALE`` and
writes nothing. A plan commits once; its dry run is then kept only ``PLAN_USED_SECONDS`` more.

A token of a dry run that is unknown, expired, failed, of another wiki or of another submitter is
``PLAN_NOT_FOUND`` (the same answer for each, so a token says nothing about another principal's jobs).
"""

from __future__ import annotations

from worker.errors import BatchRejected
from worker.jobs.records import JobRecord, JobStore
from worker.schema.edits import Batch, PlanSubmission

PREFIX = "plan-"
PLAN_USED_SECONDS = 60  # a dry run whose plan was committed is kept this long more


def plan_token(job_id: str) -> str:
    """The plan token of the succeeded dry run ``job_id``."""
    return PREFIX + job_id


async def planned_batch(
    jobs: JobStore, caller_id: str, wiki: str, submission: PlanSubmission
) -> tuple[Batch, JobRecord]:
    """The batch ``submission`` names, to queue as a real run that must produce what its dry run did, and
    that dry run's record; ``PLAN_NOT_FOUND`` when the token names no plan of this caller on this wiki."""
    job_id = submission.plan.removeprefix(PREFIX)
    record = await jobs.get(job_id) if submission.plan.startswith(PREFIX) and len(job_id) <= 64 else None
    if not _usable(record, caller_id, wiki):
        raise BatchRejected(
            "PLAN_NOT_FOUND",
            f"no plan {submission.plan[:80]!r} of yours on {wiki!r}: plans are kept "
            f"{jobs.dry_run_retention} s after their dry run and commit once; check the batch again",
        )
    assert record is not None and record.batch is not None and record.result is not None
    batch = Batch(
        message=submission.message or record.batch.message,
        edits=record.batch.edits,
        webhook=submission.webhook,
        expect=[entry.model_dump(mode="json", exclude_defaults=True) for entry in record.result.applied],
    )
    return batch, record


def _usable(record: JobRecord | None, caller_id: str, wiki: str) -> bool:
    return (
        record is not None
        and record.dry_run
        and record.status == "succeeded"
        and record.batch is not None
        and record.result is not None
        and record.wiki == wiki
        and record.submitter == caller_id
    )
