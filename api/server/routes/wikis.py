"""Wikis, pages, search, commits and batch submission (contract section 3): thin adapters over the service."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from api.server.deps import Caller, Svc
from api.server.errors import ERROR_RESPONSES
from worker.schema.answers import CommitList, Job, MatchList, Page, PageList, Submitted, WikiInfo, WikiList
from worker.schema.edits import Batch

router = APIRouter(prefix="/v1", tags=["wikis"], responses=ERROR_RESPONSES)

WIKI_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
# a page path as far as a pattern can say it: no leading or trailing '/', no backslash, no control
# character (the engine checks the rest: segments, '.git', lengths)
PATH_PATTERN = (
    r"^[^/\\\u0000-\u001f\u007f-\u009f]([^\\\u0000-\u001f\u007f-\u009f]*[^/\\\u0000-\u001f\u007f-\u009f])?$"
)
WikiId = Annotated[str, Path(pattern=WIKI_PATTERN, description="the wiki's id")]
PagePath = Annotated[str, Path(pattern=PATH_PATTERN, description="the file's path, e.g. wiki/redis.md")]


class NewWiki(BaseModel):
    """Body of ``POST /v1/wikis``."""

    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(pattern=WIKI_PATTERN, description="the new wiki's id")]
    remote: Annotated[
        str | None,
        Field(
            max_length=64,
            description="attach the wiki to this remote of the operator's remotes file (never a URL)",
        ),
    ] = None


def _links(**links: tuple[str, dict[str, str]]) -> dict[str, Any]:
    """OpenAPI links: ``name=(operationId, {parameter: runtime expression})``."""
    return {name: {"operationId": op, "parameters": params} for name, (op, params) in links.items()}


WIKI_LINKS = _links(
    listPages=("list_pages", {"wiki": "$response.body#/id"}),
    submitBatch=("submit_batch", {"wiki": "$response.body#/id"}),
    listJobs=("list_jobs", {"wiki": "$response.body#/id"}),
)
JOB_LINKS = _links(
    getJob=("get_job", {"job_id": "$response.body#/job_id"}),
    cancelJob=("cancel_job", {"job_id": "$response.body#/job_id"}),
    redeliverWebhook=("redeliver_webhook", {"job_id": "$response.body#/job_id"}),
)


@router.post(
    "/wikis",
    status_code=201,
    operation_id="create_wiki",
    response_model=WikiInfo,
    responses={201: {"links": WIKI_LINKS}},
)
async def create_wiki(body: NewWiki, svc: Svc, caller: Caller) -> WikiInfo:
    """Create a wiki with one initial commit holding index.md, log.md and schema.md (admin).

    With ``remote``, attach it to that declared git remote instead: an empty branch gets the initial commit
    pushed, a non-empty one is taken as it is. ``422 REMOTE_NOT_FOUND`` for an unknown remote, ``502
    REMOTE_UNAVAILABLE`` when it cannot be reached or refuses the credentials (nothing is created).
    """
    return await svc.reads.create_wiki(caller, body.id, body.remote)


@router.get("/wikis", operation_id="list_wikis", response_model=WikiList)
async def list_wikis(svc: Svc, caller: Caller) -> WikiList:
    """Every wiki the caller may read, with its head commit."""
    return await svc.reads.list_wikis(caller)


@router.get("/wikis/{wiki}/pages", operation_id="list_pages", response_model=PageList)
async def list_pages(
    wiki: WikiId,
    svc: Svc,
    caller: Caller,
    prefix: Annotated[str, Query(max_length=4096, description="only paths starting with this")] = "",
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    cursor: Annotated[
        str | None,
        Query(max_length=8192, pattern=r"^[A-Za-z0-9_-]+=*$", description="next_cursor of the last page"),
    ] = None,
) -> PageList:
    """Files at the head, sorted by path, ``limit`` at a time; pass ``next_cursor`` back for more."""
    return await svc.reads.list_pages(caller, wiki, prefix, limit, cursor)


@router.get("/wikis/{wiki}/pages/{path:path}", operation_id="read_page", response_model=Page)
async def read_page(wiki: WikiId, path: PagePath, svc: Svc, caller: Caller, response: Response) -> Page:
    """One file at the head: content (UTF-8 text, or base64 for other bytes), version, size, commit."""
    page = await svc.reads.read_page(caller, wiki, path)
    response.headers["ETag"] = f'"{page.version}"'
    return page


@router.get("/wikis/{wiki}/commits", operation_id="list_commits", response_model=CommitList)
async def list_commits(
    wiki: WikiId, svc: Svc, caller: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> CommitList:
    """Commits of ``main``, newest first, with author and the job that made each."""
    return await svc.reads.commits(caller, wiki, limit)


@router.get("/wikis/{wiki}/search", operation_id="search", response_model=MatchList)
async def search(
    wiki: WikiId,
    svc: Svc,
    caller: Caller,
    q: Annotated[str, Query(min_length=1, max_length=1000, pattern=r"^[^\u0000\n\r]+$")],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MatchList:
    """Literal, case-insensitive search of the head: ``{"matches": [{"path", "line", "text"}]}``."""
    return await svc.reads.search(caller, wiki, q, limit)


@router.post(
    "/wikis/{wiki}/batches",
    status_code=202,
    operation_id="submit_batch",
    response_model=Submitted,
    responses={
        202: {"links": JOB_LINKS},
        200: {"model": Job, "description": "the job an earlier submission with this Idempotency-Key made"},
    },
)
async def submit_batch(
    wiki: WikiId,
    batch: Batch,
    svc: Svc,
    caller: Caller,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> Submitted | JSONResponse:
    """Check a batch statically and queue it: ``202 {job_id, status, status_url}``.

    The same ``Idempotency-Key`` with the same body answers ``200`` with the job it made before.
    """
    answer = await svc.submissions.submit(caller, wiki, batch, idempotency_key)
    if isinstance(answer, Job):
        body = answer.model_dump(mode="json")
        body["status_url"] = f"/v1/jobs/{answer.job_id}"
        return JSONResponse(body, status_code=200)
    return answer
