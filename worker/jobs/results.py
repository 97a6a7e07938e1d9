"""A job's outcome in the contract's shapes: the result of a plan (with a dry run's review), an error."""

from __future__ import annotations

from worker.engine import Plan, Review
from worker.errors import WikiqError
from worker.schema.answers import Applied, BatchWarning, Checks, ErrorInfo, FileDiff, JobResult


def job_result(commit: str | None, plan: Plan, seen: Review | None = None) -> JobResult:
    """The ``result`` of a job whose plan is ``plan`` (``commit`` None for a dry run, with its review)."""
    result = JobResult(
        commit=commit, applied=[Applied.model_validate(entry.to_dict()) for entry in plan.applied]
    )
    if seen is not None:  # a dry run: the diff, checks and warnings too
        result.diff = [FileDiff.model_validate(entry.to_dict()) for entry in seen.diff]
        result.warnings = [BatchWarning.model_validate(entry.to_dict()) for entry in seen.warnings]
        result.checks = Checks.model_validate(seen.checks.to_dict())
    return result


def error_info(exc: WikiqError) -> ErrorInfo:
    """The contract's error object of ``exc`` (with every failing edit of a batch refused by its checks)."""
    return ErrorInfo.model_validate(exc.to_dict())
