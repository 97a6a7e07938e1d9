"""Plans: commit exactly what a dry run checked, without sending the batch again.

A succeeded dry run keeps its batch while its record is kept (``WIKIQ_DRY_RUN_RETENTION_SECONDS``) and
answers its submitter ``result.plan``, a token naming it. Submitting ``{"plan": token}``
(``PlanSubmission``) queues that batch again, with the ``applied`` list the dry run answered as what it
must produce (``Batch.expect``): the worker checks it on the head it lands on, as any batch, and commits
only when the result is the same, change for change (same paths, same resulting versions), so what lands
is byte for byte what was shown; if a file it touches changed meanwhile, the job fails ``PLAN_STALE`` and
writes nothing. A plan commits once; its dry run is then kept only ``PLAN_USED_SECONDS`` more.

A failed dry run keeps its batch too and answers its submitter ``error.plan``, the same kind of token, to
amend: ``{"plan": token, "amend": {"<index>": edit, ...}}`` (of a succeeded dry run too) submits the dry
run's batch with the edits at those indexes replaced (indexes from its length on append, in order) as a
new batch (``dry_run`` to check it only), checked in full like any batch: nothing of the earlier check is
expected of it, so it never fails ``PLAN_STALE``, and the dry run amended stays as it was.

A token of a dry run that is unknown, expired, of another wiki or of another submitter, or a failed one
given without ``amend``, is ``PLAN_NOT_FOUND`` (the same answer for each, so a token says nothing about
another principal's jobs).
"""

from __future__ import annotations

from worker.errors import BatchRejected
from worker.jobs.record import JobRecord
from worker.jobs.store import JobStore
from worker.schema.edits import Batch, PlanSubmission

PREFIX = "plan-"
PLAN_USED_SECONDS = 60  # a dry run whose plan was committed is kept this long more


def plan_token(job_id: str) -> str:
    """The plan token of the dry run ``job_id`` (to commit it when it succeeded, to amend it either way)."""
    return PREFIX + job_id


async def planned_batch(
    jobs: JobStore, caller_id: str, wiki: str, submission: PlanSubmission
) -> tuple[Batch, JobRecord]:
    """The batch ``submission`` names and the dry run's record: without ``amend``, that dry run's batch,
    to queue as a real run that must produce what it did; with ``amend``, its batch amended (``amended``).
    ``PLAN_NOT_FOUND`` when the token names no dry run of this caller on this wiki that may serve (a failed
    one only to amend); ``INVALID_BATCH`` for an amended index past the batch's end."""
    job_id = submission.plan.removeprefix(PREFIX)
    record = await jobs.get(job_id) if submission.plan.startswith(PREFIX) and len(job_id) <= 64 else None
    if not _usable(record, caller_id, wiki, amending=submission.amend is not None):
        raise BatchRejected(
            "PLAN_NOT_FOUND",
            f"no plan {submission.plan[:80]!r} of yours on {wiki!r}: plans are kept "
            f"{jobs.dry_run_retention} s after their dry run and commit once; check the batch again",
        )
    assert record is not None and record.batch is not None
    if submission.amend is not None:
        return amended(record.batch, submission), record
    assert record.result is not None
    batch = Batch(
        message=submission.message or record.batch.message,
        edits=record.batch.edits,
        webhook=submission.webhook,
        expect=[entry.model_dump(mode="json", exclude_defaults=True) for entry in record.result.applied],
    )
    return batch, record


def amended(checked: Batch, submission: PlanSubmission) -> Batch:
    """``checked`` with ``submission.amend``'s edits at their indexes: an index below its length replaces
    that edit, indexes from its length on must follow it without a gap and are appended in order (else
    ``INVALID_BATCH`` naming the first that does not). The result has no ``expect``: it is checked in
    full."""
    assert submission.amend is not None
    edits, count = list(checked.edits), len(checked.edits)
    for index in sorted(int(key) for key in submission.amend):
        if index > len(edits):
            raise BatchRejected(
                "INVALID_BATCH",
                f"amend: no edit {index}: the checked batch has {count} edits (0 to {count - 1}); "
                f"indexes from {count} on append, without a gap",
            )
        edit = submission.amend[str(index)]
        if index == len(edits):
            edits.append(edit)
        else:
            edits[index] = edit
    return Batch(
        message=submission.message or checked.message,
        edits=edits,
        webhook=submission.webhook,
        dry_run=submission.dry_run,
    )


def _usable(record: JobRecord | None, caller_id: str, wiki: str, amending: bool) -> bool:
    return (
        record is not None
        and record.dry_run
        and (record.status == "succeeded" or (amending and record.status == "failed"))
        and record.batch is not None
        and (record.result is not None or amending)
        and record.wiki == wiki
        and record.submitter == caller_id
        and not record.proposal  # a proposal's check lands only through its approval
    )
