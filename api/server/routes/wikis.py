"""Wikis, pages, search, backlinks, commits and batch submission (contract sections 3 and 7): thin adapters
over the service."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from api.server.deps import Caller, Svc
from api.server.errors import ERROR_RESPONSES
from worker.schema.answers import (
    BacklinkList,
    CommitList,
    Job,
    MatchList,
    Page,
    PageList,
    PageSet,
    ReplayedJob,
    Submitted,
    WikiInfo,
    WikiList,
)
from worker.schema.edits import PAGE_PATH, Submission

router = APIRouter(prefix="/v1", tags=["wikis"], responses=ERROR_RESPONSES)

WIKI_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
# a page path as far as a pattern can say it: no leading or trailing '/', no backslash, no control
# character (the engine checks the rest: segments, '.git', lengths)
# a page path as far as a pattern can say it (declared in the schema; the service checks the rules and answers
# INVALID_PATH): pydantic's own regex engine has no look-ahead, so the pattern is not enforced by FastAPI
PATH_SCHEMA = {"pattern": PAGE_PATH}
# a cursor (base64url of a path) short enough that any request within the declared lengths fits the 64 KiB
# request line the HTTP server parses (longer requests get its plain-text 400, not the error object)
CURSOR_CHARS = 5200
WikiId = Annotated[str, Path(pattern=WIKI_PATTERN, description="the wiki's id")]
PagePath = Annotated[
    str, Path(json_schema_extra=PATH_SCHEMA, description="the file's path, e.g. wiki/redis.md")
]


class PagesToRead(BaseModel):
    """Body of ``POST /v1/wikis/{wiki}/pages:read``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    paths: Annotated[
        list[Annotated[str, Field(max_length=4096)]],
        Field(min_length=1, max_length=100, description="the files to read, in the order to answer them"),
    ]
    sections: Annotated[bool, Field(description="also answer each page's heading tree")] = False
    cursor: Annotated[
        str | None,
        Field(
            max_length=8192,
            pattern=r"^[A-Za-z0-9_-]+=*$",
            description="next_cursor of an answer to the same paths: read from the page it names on",
        ),
    ] = None


class NewWiki(BaseModel):
    """Body of ``POST /v1/wikis``."""

    model_config = ConfigDict(extra="forbid", strict=True)
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
    prefix: Annotated[str, Query(max_length=1024, description="only paths starting with this")] = "",
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    cursor: Annotated[
        str | None,
        Query(
            max_length=CURSOR_CHARS, pattern=r"^[A-Za-z0-9_-]+=*$", description="next_cursor of the last page"
        ),
    ] = None,
) -> PageList:
    """Files at the head, sorted by path, ``limit`` at a time; pass ``next_cursor`` back for more."""
    return await svc.reads.list_pages(caller, wiki, prefix, limit, cursor)


@router.post("/wikis/{wiki}/pages:read", operation_id="read_pages", response_model=PageSet)
async def read_pages(wiki: WikiId, body: PagesToRead, svc: Svc, caller: Caller) -> PageSet:
    """Up to 100 files at one commit of the head, in the order asked: ``{commit, pages: [page...],
    errors: [{path, code, message}], next_cursor?}``. A path that is missing or invalid is an error entry,
    not a failure of the call. The first page whose content would take the answer past
    ``WIKIQ_MAX_FILE_BYTES`` in all stops the read: it and the paths after it are error entries, and
    ``next_cursor`` (sent back with the same paths as ``cursor``) reads on from it."""
    return await svc.reads.read_pages(caller, wiki, body.paths, body.sections, body.cursor)


@router.get("/wikis/{wiki}/pages/{path:path}", operation_id="read_page", response_model=Page)
async def read_page(
    wiki: WikiId,
    path: PagePath,
    svc: Svc,
    caller: Caller,
    response: Response,
    sections: Annotated[
        bool, Query(description="also answer the heading tree: each section's address and version")
    ] = False,
) -> Page:
    """One file at the head: content (UTF-8 text, or base64 for other bytes), version, size, commit; with
    ``sections=true``, ``sections``: every heading's level, text, path, address, lines and version."""
    page = await svc.reads.read_page(caller, wiki, path, sections)
    response.headers["ETag"] = f'"{page.version}"'
    return page


@router.get("/wikis/{wiki}/backlinks", operation_id="backlinks", response_model=BacklinkList)
async def backlinks(
    wiki: WikiId,
    svc: Svc,
    caller: Caller,
    path: Annotated[
        str,
        Query(
            max_length=4096,
            json_schema_extra=PATH_SCHEMA,
            description="the page linked to, e.g. wiki/redis.md",
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=10_000, description="at most this many links")] = 1000,
    cursor: Annotated[
        str | None,
        Query(
            max_length=CURSOR_CHARS, pattern=r"^[A-Za-z0-9_-]+=*$", description="next_cursor of the last page"
        ),
    ] = None,
) -> BacklinkList:
    """Every link at the head (outside code) that resolves to ``path``: ``{path, version, commit,
    backlinks: [{path, line, text, version}], truncated, next_cursor?}``, by linking page then line;
    pass ``next_cursor`` back for more."""
    return await svc.links.backlinks(caller, wiki, path, limit, cursor)


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
    regex: Annotated[bool, Query(description="q is an RE2 pattern, ^ and $ at line ends")] = False,
    prefix: Annotated[str, Query(max_length=1024, description="only paths starting with this")] = "",
    case_sensitive: Annotated[bool, Query(description="match letter case exactly")] = False,
    cursor: Annotated[
        str | None,
        Query(
            max_length=CURSOR_CHARS, pattern=r"^[A-Za-z0-9_-]+=*$", description="next_cursor of the last page"
        ),
    ] = None,
    outside_code: Annotated[
        bool, Query(description="only matches in prose: not in code blocks, code spans, HTML, front matter")
    ] = False,
    multiline: Annotated[bool, Query(description="regex: a match may cross line breaks")] = False,
    count: Annotated[
        bool,
        Query(description="no lines: matches per page and in all, counted as replace_across counts them"),
    ] = False,
) -> MatchList:
    """Search of the head, literal and case-insensitive by default: ``{"matches": [{"path", "line",
    "text", "version"}], "next_cursor"}`` in path then line order; ``regex=true`` takes an RE2 pattern
    (``PATTERN_INVALID`` if RE2 refuses it), a match within one line unless ``multiline=true``;
    ``outside_code=true`` keeps only matches in prose. ``count=true`` answers ``{"matches": [], "pages":
    [{"path", "count"}], "total", "next_cursor"}`` instead, ``limit`` pages at a time: what
    ``replace_across`` with ``old=q`` (``pattern=q`` with ``regex``), ``prefix`` and ``outside_code`` would
    replace (case-sensitive, over the whole page, ``raw/`` left out); ``total`` is its
    ``expected_count``."""
    return await svc.reads.find(
        caller,
        wiki,
        q,
        limit,
        count=count,
        regex=regex,
        prefix=prefix,
        case_sensitive=case_sensitive,
        cursor=cursor,
        outside_code=outside_code,
        multiline=multiline,
    )


@router.post(
    "/wikis/{wiki}/batches",
    status_code=202,
    operation_id="submit_batch",
    response_model=Submitted,
    responses={
        202: {"links": JOB_LINKS},
        200: {
            "model": ReplayedJob,
            "description": "the job an earlier submission with this Idempotency-Key made",
        },
    },
)
async def submit_batch(
    wiki: WikiId,
    batch: Submission,
    svc: Svc,
    caller: Caller,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> Submitted | JSONResponse:
    """Check a batch statically and queue it: ``202 {job_id, status, status_url}``. ``{"plan": ...}``
    instead of a batch commits exactly what a dry run checked (its ``result.plan``), or fails PLAN_STALE.

    The same ``Idempotency-Key`` with the same body answers ``200`` with the job it made before.
    """
    answer = await svc.submissions.submit(caller, wiki, batch, idempotency_key)
    if isinstance(answer, Job):
        body = answer.model_dump(mode="json")
        body["status_url"] = f"/v1/jobs/{answer.job_id}"
        return JSONResponse(body, status_code=200)
    return answer
