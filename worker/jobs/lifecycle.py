"""A job record's life, in one place: every change of its status, and who may make it.

::

    queued ──start──▶ running ──finish──▶ succeeded | failed
      │  ▲               │  ▲
      │  └──give_back────┘  └─start (a new run of a job whose run died)
      └──cancel──▶ cancelled

- ``start``: a run begins. A queued job becomes running; a job left running by a run that died (its
  worker killed, its lease lost) starts again. Either way ``runs`` counts one more, and that run is the
  job's latest: only it may record an outcome.
- ``claim``: a group commit or a remote publish takes a queued job along as a follower (``start``, from
  queued only).
- ``give_back``: a follower that was not landed goes back to queued, its run still counted, so that its
  next run looks for its own commit first.
- ``finish(result, error, run)``: the outcome, recorded only on a running job and, with ``run``, only
  while that run is the job's latest.
- ``cancel``: a queued job that no run has taken (one given back may have landed already).

Each is a change for ``JobStore.update`` (it returns None to leave the record as it is) and leaves
``JobRecord`` consistent: ``started_ms`` set while running, ``finished_ms`` once finished. Finished is
final: no change leaves it (a webhook redelivery changes only the webhook).
"""

from __future__ import annotations

from collections.abc import Callable

from worker.jobs.clock import now_ms
from worker.jobs.once import may_record
from worker.jobs.record import FINISHED, JobRecord, Status
from worker.schema.answers import ErrorInfo, JobResult

MOVES: dict[Status, frozenset[Status]] = {
    "queued": frozenset({"running", "cancelled"}),
    "running": frozenset({"running", "queued", "succeeded", "failed"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}


def _move(record: JobRecord, to: Status) -> None:
    if to not in MOVES[record.status]:
        raise ValueError(f"job {record.job_id}: no move from {record.status} to {to}")
    record.status = to


def start(record: JobRecord) -> JobRecord | None:
    """A run begins: queued or left running by a dead run becomes running, with one more run counted.
    None for a finished job."""
    if record.status in FINISHED:
        return None
    if record.status == "queued":
        record.started_ms = now_ms()
    _move(record, "running")
    record.begin_run()
    return record


def claim(record: JobRecord) -> JobRecord | None:
    """A follower taken along by a group commit or a publish: ``start``, but only from queued."""
    return start(record) if record.status == "queued" else None


def give_back(record: JobRecord) -> JobRecord:
    """A follower that was not landed goes back to queued; its run stays counted."""
    _move(record, "queued")
    record.started_ms = None
    return record


def finish(
    result: JobResult | None, error: ErrorInfo | None, run: int | None = None
) -> Callable[[JobRecord], JobRecord | None]:
    """The change recording an outcome (``error`` set: failed, else succeeded) on a running record; with
    ``run``, only while that run is the record's latest: once a newer run started (a partition whose
    lease moved while this run went on), the outcome is the newer run's to record."""

    def change(record: JobRecord) -> JobRecord | None:
        if not may_record(record, run):
            return None
        _move(record, "failed" if error is not None else "succeeded")
        record.result, record.error = result, error
        record.finished_ms = now_ms()
        return record

    return change


def cancel(record: JobRecord) -> JobRecord | None:
    """Cancel a job no run has taken; None when it is running or finished, or queued again after a run
    (given back: that run may have landed its commit, which its next run finds and reports)."""
    if record.status != "queued" or record.runs > 0:
        return None
    _move(record, "cancelled")
    record.finished_ms = now_ms()
    return record
