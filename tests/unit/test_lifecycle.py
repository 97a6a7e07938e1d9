"""The job record's state machine (``worker.jobs.lifecycle``) over any sequence of changes: only its moves
happen, finished is final, each start counts one run, and only the latest run records an outcome."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.jobs import lifecycle
from worker.jobs.record import FINISHED, JobRecord
from worker.schema.answers import Author, ErrorInfo, JobResult

RESULT = JobResult(commit="0" * 40, applied=[])
ERROR = ErrorInfo(code="INTERNAL", message="m")
# a change, named: start, claim, give_back (of a running job only: a caller's own follower), cancel, or
# finish by the latest run, by a stale run, or by an unnamed run
CHANGES = st.lists(
    st.sampled_from(
        ["start", "claim", "give_back", "cancel", "finish", "finish_stale", "finish_any", "fail"]
    ),
    max_size=12,
)


def record() -> JobRecord:
    return JobRecord(job_id="J", wiki="w", submitted_ms=1, author=Author(name="a", email="a@example.org"))


def apply(change: str, job: JobRecord) -> JobRecord | None:
    if change == "start":
        return lifecycle.start(job)
    if change == "claim":
        return lifecycle.claim(job)
    if change == "give_back":
        return lifecycle.give_back(job) if job.status == "running" else None
    if change == "cancel":
        return lifecycle.cancel(job)
    if change == "fail":
        return lifecycle.finish(None, ERROR, job.runs)(job)
    run = {"finish": job.runs, "finish_stale": job.runs - 1, "finish_any": None}[change]
    return lifecycle.finish(RESULT, None, run)(job)


@given(CHANGES)
def test_any_sequence_keeps_the_machine(changes: list[str]) -> None:
    """Every change is one of MOVES or none; finished stays finished; runs count starts; a stale run's
    finish changes nothing; the timestamps follow the status."""
    job = record()
    for change in changes:
        before = job.model_copy(deep=True)
        changed = apply(change, job)
        if changed is None:
            job = before  # a refused change leaves the record as it was (the store stores nothing)
            assert not (change == "start" and before.status not in FINISHED)
            continue
        job = changed
        assert job.status in lifecycle.MOVES[before.status], (before.status, change, job.status)
        assert before.status not in FINISHED
        if change in ("start", "claim"):
            assert job.runs == before.runs + 1 and job.status == "running"
        else:
            assert job.runs == before.runs
        if change == "finish_stale":
            raise AssertionError("a stale run recorded an outcome")
        assert (job.started_ms is not None) == (job.status in ("running", "succeeded", "failed"))
        assert (job.finished_ms is not None) == (job.status in FINISHED)


def test_a_claim_takes_only_a_queued_job() -> None:
    """A follower is taken along only while queued: a job left running by a dead run is its own."""
    job = lifecycle.start(record())
    assert job is not None and lifecycle.claim(job) is None
    assert lifecycle.claim(lifecycle.give_back(job)) is not None


def test_a_job_given_back_cannot_be_cancelled() -> None:
    """A job queued again after a run (given back) may have landed its commit: it is not cancellable;
    one no run has taken is."""
    assert lifecycle.cancel(record()) is not None
    job = lifecycle.start(record())
    assert job is not None
    assert lifecycle.cancel(lifecycle.give_back(job)) is None
