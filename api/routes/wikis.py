"""Wikis, pages, commits and batch submission (contract section 3)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from api.auth import Principal, principal
from api.errors import ERROR_RESPONSES
from api.ratelimit import check_rate
from api.state import AppState, state
from worker.engine import check_static
from worker.errors import AccessDenied, BatchRejected, IdempotencyConflict, WebhookRefused, WikiNotFound
from worker.gitstore import WIKI_ID, WikiRepo
from worker.jobstore import JobRecord, new_job_id, now_iso, partition_of
from worker.ops import Batch, Rename
from worker.paths import path_problem
from worker.policy import policy_for
from worker.queue import enqueue_batch
from worker.telemetry import job_accepted
from worker.webhook_guard import check_webhook_url

router = APIRouter(prefix="/v1", tags=["wikis"], responses=ERROR_RESPONSES)
App = Annotated[AppState, Depends(state)]
Caller = Annotated[Principal, Depends(principal)]


class NewWiki(BaseModel):
    """Body of ``POST /v1/wikis``."""

    model_config = ConfigDict(extra="forbid")
    id: str


def require(caller: Principal, wiki: str, right: str) -> None:
    """Refuse a caller without ``right`` on ``wiki``: 404 when it may not even read it, else 403."""
    if not caller.may(wiki, "read"):
        # the same answer as for a wiki that does not exist: a denied caller learns nothing
        raise WikiNotFound(f"no wiki {wiki!r}; create it with POST /v1/wikis")
    if not caller.may(wiki, right):
        raise AccessDenied(f"your token does not allow {right} on this wiki", code="FORBIDDEN")


async def _repo(app: AppState, caller: Principal, wiki: str, right: str = "read") -> WikiRepo:
    require(caller, wiki, right)
    repo = app.store.opened(wiki)  # the usual case, from memory; opening a repository reads files
    return repo if repo is not None else await run_in_threadpool(app.store.open, wiki)


@router.post("/wikis", status_code=201)
async def create_wiki(body: NewWiki, app: App, caller: Caller) -> dict[str, Any]:
    """Create a wiki with one initial commit holding index.md, log.md and schema.md."""
    if not caller.may(body.id, "admin"):
        raise AccessDenied("creating wikis needs the admin right", code="FORBIDDEN")
    if not WIKI_ID.match(body.id):
        raise BatchRejected("INVALID_BATCH", "a wiki id matches ^[a-z0-9][a-z0-9._-]{0,62}$")
    head = await run_in_threadpool(app.store.create, body.id)
    return {"id": body.id, "head": head}


@router.get("/wikis")
async def list_wikis(app: App, caller: Caller) -> dict[str, Any]:
    """Every wiki the caller may read, with its head commit."""

    def collect() -> list[dict[str, Any]]:
        return [
            {"id": wiki, "head": app.store.open(wiki).head()}
            for wiki in app.store.ids()
            if caller.may(wiki, "read")
        ]

    return {"wikis": await run_in_threadpool(collect)}


@router.get("/wikis/{wiki}/pages")
async def list_pages(
    wiki: str,
    app: App,
    caller: Caller,
    prefix: str = "",
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Files at the head, sorted by path, ``limit`` at a time; pass ``next_cursor`` back for more."""
    repo = await _repo(app, caller, wiki)
    after = _decode_cursor(cursor)

    def collect() -> dict[str, Any]:
        head = repo.head()
        files = [] if head is None else repo.list_files(head, prefix)
        files = [f for f in files if f.path > after] if after else files
        page = files[:limit]
        more = len(files) > limit
        return {
            "pages": [{"path": f.path, "version": f.version, "size": f.size} for f in page],
            "next_cursor": _encode_cursor(page[-1].path) if more and page else None,
        }

    return await run_in_threadpool(collect)


def _encode_cursor(path: str) -> str:
    return base64.urlsafe_b64encode(path.encode()).decode()


def _decode_cursor(cursor: str | None) -> str:
    if not cursor:
        return ""
    try:
        return base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise BatchRejected("INVALID_BATCH", "cursor is not one this API returned") from None


@router.get("/wikis/{wiki}/pages/{path:path}")
async def read_page(wiki: str, path: str, app: App, caller: Caller) -> Response:
    """One file at the head: content (UTF-8 text, or base64 for other bytes), version, size, commit."""
    problem = path_problem(path)
    if problem is not None:
        raise BatchRejected("INVALID_PATH", f"{problem}: {path[:200]!r}")
    repo = await _repo(app, caller, wiki)

    def read() -> dict[str, Any] | None:
        snapshot = repo.snapshot()
        version = snapshot.version(path)
        if version is None:
            return None
        data = snapshot.read(path)
        try:
            content, encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            content, encoding = base64.b64encode(data).decode(), "base64"
        return {
            "path": path,
            "version": version,
            "content": content,
            "encoding": encoding,
            "size": len(data),
            "commit": snapshot.commit,
        }

    page = await run_in_threadpool(read)
    if page is None:
        raise BatchRejected("NOT_FOUND", f"no file {path!r} at the head of {wiki!r}")
    return JSONResponse(page, headers={"ETag": f'"{page["version"]}"'})


@router.get("/wikis/{wiki}/commits")
async def list_commits(
    wiki: str, app: App, caller: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> dict[str, Any]:
    """Commits of ``main``, newest first, with author and the job that made each."""
    repo = await _repo(app, caller, wiki)
    infos = await run_in_threadpool(repo.log, limit)
    return {
        "commits": [
            {
                "commit": info.commit,
                "message": info.message,
                "author": {"name": info.author.name, "email": info.author.email},
                "time": datetime.fromtimestamp(info.time, UTC).isoformat().replace("+00:00", "Z"),
                "job_id": info.job_id,
            }
            for info in infos
        ]
    }


@router.get("/wikis/{wiki}/search")
async def search(
    wiki: str,
    app: App,
    caller: Caller,
    q: Annotated[str, Query(min_length=1, max_length=1000)],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Literal, case-insensitive search of the head: ``{"matches": [{"path", "line", "text"}]}``."""
    if any(ch in q for ch in "\x00\n\r"):
        raise BatchRejected("INVALID_BATCH", "q must be one line of text")
    repo = await _repo(app, caller, wiki)

    def run() -> list[dict[str, Any]]:
        head = repo.head()
        if head is None:
            return []
        return [{"path": p, "line": n, "text": t} for p, n, t in repo.search(head, q, limit)]

    return {"matches": await run_in_threadpool(run)}


def batch_paths(batch: Batch) -> list[str]:
    """Every path a batch touches, rename targets included."""
    paths = [edit.path for edit in batch.edits]
    paths += [edit.new_path for edit in batch.edits if isinstance(edit, Rename)]
    return paths


def fingerprint(wiki: str, batch: Batch) -> str:
    """A digest of what was submitted, to tell a retried submission from a different one."""
    canonical = json.dumps([wiki, batch.model_dump(mode="json")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@router.post("/wikis/{wiki}/batches", status_code=202)
async def submit_batch(
    wiki: str,
    batch: Batch,
    app: App,
    caller: Caller,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JSONResponse:
    """Check a batch statically and queue it; ``202 {job_id, status, status_url}``."""
    repo = await _repo(app, caller, wiki, "write")
    settings = app.settings
    await check_rate(
        app.redis, caller.name, settings.rate_limit_submissions, settings.rate_limit_window_seconds
    )
    check_static(batch, policy_for(repo.path), settings.limits)
    if not caller.may_write_paths(wiki, batch_paths(batch)):
        # like the seeds: the whole batch is refused and the denied path is not named
        raise AccessDenied("your token may not write every path of this batch", code="FORBIDDEN")
    if batch.webhook is not None:
        if settings.webhook_secret is None:
            raise WebhookRefused(
                "this server has no WIKIQ_WEBHOOK_SECRET, so it sends no webhooks; poll the job"
            )
        await check_webhook_url(batch.webhook.url, allow_private=settings.webhook_allow_private)
    job_id = new_job_id()
    scope = f"{caller.name}\x00{wiki}"
    if idempotency_key is not None:
        digest = fingerprint(wiki, batch)
        bound, bound_digest = await app.jobs.claim_idempotency(scope, idempotency_key, digest, job_id)
        if bound != job_id:
            if bound_digest != digest:
                raise IdempotencyConflict("this Idempotency-Key was used with a different batch")
            existing = await app.jobs.get(bound)
            body = existing.public() if existing else {"job_id": bound, "status": "queued"}
            body["status_url"] = f"/v1/jobs/{bound}"
            return JSONResponse(body, status_code=200)
    now_ms = int(time.time() * 1000)
    record = JobRecord(
        job_id=job_id,
        wiki=wiki,
        submitted_at=now_iso(),
        submitted_ms=now_ms,
        batch=batch.model_dump(mode="json", exclude_none=True),
        author={"name": caller.name, "email": caller.email},
        principal=caller.name,
        base=repo.head(),  # one small file read: cheaper than a thread hop
        partition=partition_of(wiki, settings.partitions),
        webhook=None
        if batch.webhook is None
        else {"url": batch.webhook.url, "state": "pending", "attempts": [], "round": 0},
    )
    await app.jobs.create(record)
    try:
        await enqueue_batch(app.redis, job_id, record.partition, settings.job_retention_seconds)
    except Exception:
        await app.jobs.delete(job_id, wiki)
        if idempotency_key is not None:
            await app.jobs.release_idempotency(scope, idempotency_key)
        raise
    job_accepted(app.redis, record)
    return JSONResponse(
        {"job_id": job_id, "status": "queued", "status_url": f"/v1/jobs/{job_id}"}, status_code=202
    )
