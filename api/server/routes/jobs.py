"""Jobs: status with long-poll, cancellation, a wiki's recent jobs, webhook redelivery."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.server.deps import App, Caller, Svc
from api.server.errors import ERROR_RESPONSES, ErrorBody
from api.server.routes.wikis import WikiId
from worker.schema.answers import Job, JobList, JobStatus

router = APIRouter(prefix="/v1", tags=["jobs"], responses=ERROR_RESPONSES)
JobId = Annotated[str, Path(min_length=1, max_length=64, description="the job id a submission answered")]


@router.get("/jobs/{job_id}", operation_id="get_job", response_model=Job)
async def get_job(
    job_id: JobId,
    state: App,
    caller: Caller,
    wait: Annotated[float, Query(ge=0, description="answer once finished, or after this many s (≤ 60)")] = 0,
) -> Job:
    """The job; with ``wait=S`` it answers as soon as the job is finished, or after S (at most 60) s (at
    once when the API process is stopping: poll again)."""
    return await state.draining.long_poll(lambda left: state.service.jobs.get(caller, job_id, left), wait)


@router.delete("/jobs/{job_id}", operation_id="cancel_job", response_model=Job)
async def cancel_job(job_id: JobId, svc: Svc, caller: Caller) -> Job:
    """Cancel a job that has not started: ``200`` with status ``cancelled``, ``409`` once it started.

    Only the job's submitter or an admin of its wiki may cancel it.
    """
    return await svc.jobs.cancel(caller, job_id)


@router.post(
    "/jobs/{job_id}/webhook/redeliver",
    status_code=202,
    operation_id="redeliver_webhook",
    response_model=Job,
    responses={
        422: {
            "model": ErrorBody,
            "description": "INVALID_BATCH: the job has no webhook.url, or has not finished yet",
        }
    },
)
async def redeliver_webhook(job_id: JobId, svc: Svc, caller: Caller) -> Job:
    """Send a finished job's webhook again (a new round of attempts, same ``webhook-id``): ``202``.

    Only the job's submitter or an admin of its wiki may; at most once every few seconds per job.
    """
    return await svc.jobs.redeliver(caller, job_id)


@router.get("/wikis/{wiki}/jobs", operation_id="list_jobs", response_model=JobList)
async def list_jobs(
    wiki: WikiId,
    svc: Svc,
    caller: Caller,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobList:
    """A wiki's recent jobs, newest first."""
    return await svc.jobs.list(caller, wiki, status, limit)
