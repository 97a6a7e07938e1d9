"""``/ui``: a server-rendered status page (Jinja2, no build step) refreshed live by a little JavaScript.

``/ui`` lists the wikis the caller may read (head, queued and running jobs, the partition's depth counted
over those wikis only) and their recent jobs; ``/ui/jobs/{id}`` shows one job with its applied list,
webhook attempts and the diff of its commit (``git show`` against the parent, read-only, escaped). Each
page polls ``<page>/state`` every second: a JSON object ``{"parts": {element id: HTML}, "done": bool}``
rendered by the same templates. Auth is the API's (``api.server.auth.principal``); wikis the caller may
not read are left out.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from api.server.auth import UI_COOKIE, Principal
from api.server.deps import Caller, Svc
from worker import keys
from worker.jobs.clock import iso
from worker.jobs.ids import partition_of
from worker.jobs.record import FINISHED, JobRecord, redact_url
from worker.service import Service

router = APIRouter(prefix="/ui", include_in_schema=False)
WikiFilter = Annotated[str | None, Query(max_length=64)]

HERE = Path(__file__).resolve().parent
TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True), auto_reload=False
)
STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    # not no-referrer: with it a browser posts a form (sign-out, a proposal's decision) with "Origin: null",
    # which api.server.hosts refuses; same-origin still sends no referrer to any other site
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}
RECENT = 40  # jobs on the overview
PER_WIKI = 25  # newest jobs read per wiki for the overview
QUEUE_SCAN = 500  # queued job ids read per partition to count a wiki's waiting jobs
DIFF_LINES = 4000
DIFF_BYTES = 1 << 20
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Diff:
    """A commit's patch as ``(css class, text)`` lines, and whether it was cut."""

    lines: list[tuple[str, str]]
    truncated: bool


class _DiffCache:
    """Diffs of commits already shown (a commit never changes), a few dozen at most."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, str], Diff] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, repo: Path, commit: str) -> Diff | None:
        key = (str(repo), commit)
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
                return found
        diff = read_diff(repo, commit)
        if diff is not None:
            with self.lock:
                self.items[key] = diff
                while len(self.items) > self.size:
                    self.items.popitem(last=False)
        return diff


def _line_class(line: str) -> str:
    if line.startswith("diff --git"):
        return "file"
    if line.startswith(("+++", "---", "index ", "new file", "deleted file", "similarity", "rename ")):
        return "meta-line"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def read_diff(repo: Path, commit: str) -> Diff | None:
    """The patch of ``commit`` against its first parent (all files for a root commit), or None."""
    if not COMMIT.match(commit):
        return None
    command = [
        "git",
        f"--git-dir={repo}",
        "-c",
        "core.quotepath=off",
        "show",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--first-parent",
        "--find-renames",
        "--format=",
        "--patch-with-stat",
        commit,
    ]
    try:
        done = subprocess.run(command, capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    raw = done.stdout[:DIFF_BYTES]
    text = raw.decode("utf-8", errors="replace").splitlines()
    truncated = len(done.stdout) > DIFF_BYTES or len(text) > DIFF_LINES
    return Diff([(_line_class(line), line) for line in text[:DIFF_LINES]], truncated)


DIFFS = _DiffCache()


def _clock(iso: str | None) -> str:
    return "" if not iso else iso[11:19]


def _seconds(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _timing(record: JobRecord, now_ms: int) -> str:
    """How long the job waited and ran, or has been waiting or running so far."""
    started, finished = record.started_ms, record.finished_ms
    if record.status == "queued":
        return f"waiting {_seconds(max(0, now_ms - record.submitted_ms))}"
    if record.status == "cancelled":
        return "cancelled before it started"
    waited = f"waited {_seconds(max(0, started - record.submitted_ms))}" if started else ""
    if record.status == "running" and started:
        return f"{waited} · running {_seconds(max(0, now_ms - started))}"
    if started and finished:
        return f"{waited} · ran {_seconds(max(0, finished - started))}"
    return waited


def _webhook_view(record: JobRecord) -> dict[str, Any] | None:
    hook = record.webhook
    if hook is None:
        return None
    attempts = [a.model_dump(mode="json") for a in hook.attempts]
    if hook.attempts:
        last = hook.attempts[-1]
        answer = last.status if last.status is not None else (last.error or "no answer")
        plural = "" if len(attempts) == 1 else "s"
        summary = f"{len(attempts)} attempt{plural}, last: {answer}, {last.ms} ms"
    else:
        summary = "no attempt yet"
    return {
        "state": hook.state,
        "attempts": attempts,
        "summary": summary,
        "target": redact_url(hook.url),  # its origin only: the rest may hold a secret
    }


def job_view(record: JobRecord, now_ms: int) -> dict[str, Any]:
    """What the templates show of a job: never page content, only ops, paths, ids and timings."""
    edits = [e.model_dump() for e in record.summary.edits]
    error = None if record.error is None else record.error.model_dump(mode="json")
    index = record.error.index if record.error else None
    result = record.result
    return {
        "job_id": record.job_id,
        "wiki": record.wiki,
        "status": record.status,
        "partition": record.partition,
        "dry_run": record.dry_run,
        "submitted_at": iso(record.submitted_ms),
        "submitted_clock": _clock(iso(record.submitted_ms)),
        "started_at": iso(record.started_ms),
        "finished_at": iso(record.finished_ms),
        "runs": record.runs,
        "timing": _timing(record, now_ms),
        "message": record.summary.message,
        "author": f"{record.author.name} <{record.author.email}>",
        "base": record.base,
        "commit": None if result is None else result.commit,
        "applied": [] if result is None else [a.model_dump(mode="json") for a in result.applied],
        "edits": edits,
        "edit_count": record.summary.count,
        "edits_not_listed": record.summary.more,
        "error": error,
        "failing": edits[index] if isinstance(index, int) and 0 <= index < len(edits) else None,
        "webhook": _webhook_view(record),
        "proposal": record.proposal or None,  # the proposal it checks or lands
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def overview(svc: Service, caller: Principal, only: str | None) -> dict[str, Any]:
    """The wikis the caller may read with their queue figures, and the most recent jobs (of ``only``)."""
    app = svc.resources
    listed = {info.id: info for info in (await svc.reads.list_wikis(caller)).wikis}
    wikis = [(w, info.head) for w, info in listed.items()]
    partitions = sorted({partition_of(w, app.settings.partitions) for w, _ in wikis})
    shown = [w for w, _ in wikis if only is None or w == only]
    async with app.redis.pipeline(transaction=False) as pipe:
        for partition in partitions:
            pipe.zcard(keys.queue(partition))
            pipe.zrange(keys.queue(partition), 0, QUEUE_SCAN - 1)
        for wiki in shown:
            pipe.zrevrange(keys.wiki_jobs(wiki), 0, PER_WIKI - 1, withscores=True)
        replies = await pipe.execute()
    # a partition's length counts every wiki's jobs: it only says whether the scan below saw them all
    capped = {p: int(replies[2 * i]) > QUEUE_SCAN for i, p in enumerate(partitions)}
    waiting = [_text(j) for i in range(len(partitions)) for j in replies[2 * i + 1]]
    newest = sorted(
        ((score, _text(job_id)) for reply in replies[2 * len(partitions) :] for job_id, score in reply),
        reverse=True,
    )[:RECENT]
    records = [keys.job(j) for j in waiting] + [keys.job(j) for _, j in newest]
    raws = await app.redis.mget(records) if records else []
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"queued": 0, "running": 0})
    for raw in raws[: len(waiting)]:
        if raw is not None:
            record = JobRecord.model_validate_json(raw)
            if record.status in ("queued", "running"):
                counts[record.wiki][record.status] += 1
    # the depth shown is of the wikis the caller may read: other principals' work is not theirs to see
    depth: dict[int, int] = defaultdict(int)
    for wiki in listed:
        depth[partition_of(wiki, app.settings.partitions)] += counts[wiki]["queued"] + counts[wiki]["running"]
    now_ms = int(time.time() * 1000)
    jobs = [JobRecord.model_validate_json(raw) for raw in raws[len(waiting) :] if raw is not None]
    return {
        "wikis": [
            {
                "id": wiki,
                "head": head,
                "partition": partition_of(wiki, app.settings.partitions),
                "depth": depth[partition_of(wiki, app.settings.partitions)],
                "queued": counts[wiki]["queued"],
                "running": counts[wiki]["running"],
                "capped": capped[partition_of(wiki, app.settings.partitions)],
                "remote": listed[wiki].remote,
                "published_at": listed[wiki].published_at,
                "problems": listed[wiki].problems or [],
            }
            for wiki, head in wikis
        ],
        "jobs": [job_view(r, now_ms) for r in jobs],
        "wiki": only,
    }


def _render(name: str, **context: Any) -> str:
    return TEMPLATES.get_template(name).render(**context)


def _page(html: str) -> HTMLResponse:
    return HTMLResponse(html, headers=HEADERS)


def _json(value: dict[str, Any]) -> JSONResponse:
    return JSONResponse(value, headers=HEADERS)


def _poll_url(path: str, wiki: str | None) -> str:
    return path + ("?" + urlencode({"wiki": wiki}) if wiki else "")


def _signed_in(request: Request) -> bool:
    """Whether the page was reached with a session cookie (then it offers to sign out)."""
    return UI_COOKIE in request.cookies


@router.get("", response_class=HTMLResponse)
async def index(request: Request, svc: Svc, caller: Caller, wiki: WikiFilter = None) -> Response:
    """The status page: wikis and recent jobs."""
    view = await overview(svc, caller, wiki)
    poll = _poll_url("/ui/state", wiki)
    return _page(
        _render(
            "index.html", title="status", poll_url=poll, done=False, signed_in=_signed_in(request), **view
        )
    )


@router.get("/state")
async def index_state(svc: Svc, caller: Caller, wiki: WikiFilter = None) -> JSONResponse:
    """The status page's parts, for its live refresh."""
    view = await overview(svc, caller, wiki)
    return _json(
        {
            "parts": {"wikis": _render("_wikis.html", **view), "jobs": _render("_jobs.html", **view)},
            "done": False,
        }
    )


async def _job(svc: Service, caller: Principal, job_id: str) -> tuple[dict[str, Any], Diff | None, bool]:
    record = await svc.jobs.visible(caller, job_id)
    view = job_view(record, int(time.time() * 1000))
    diff = None
    if view["commit"]:
        diff = await run_in_threadpool(DIFFS.get, svc.resources.store.path(record.wiki), view["commit"])
    webhook_pending = record.webhook is not None and record.webhook.state == "pending"
    done = record.status in FINISHED and not webhook_pending
    return view, diff, done


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: str, svc: Svc, caller: Caller) -> Response:
    """One job: status, timings, error, applied list, webhook attempts and the diff of its commit."""
    view, diff, done = await _job(svc, caller, job_id)
    poll = "" if done else f"/ui/jobs/{view['job_id']}/state"
    html = _render(
        "job.html",
        title=f"job {view['job_id']}",
        poll_url=poll,
        done=done,
        job=view,
        diff=diff,
        signed_in=_signed_in(request),
    )
    return _page(html)


@router.get("/jobs/{job_id}/state")
async def job_state(job_id: str, svc: Svc, caller: Caller) -> JSONResponse:
    """One job's parts, for its page's live refresh; ``done`` once nothing about it can change."""
    view, diff, done = await _job(svc, caller, job_id)
    parts = {
        "job-meta": _render("_job_meta.html", job=view),
        "job-applied": _render("_job_applied.html", job=view),
        "job-webhook": _render("_job_webhook.html", job=view),
        "job-diff": _render("_job_diff.html", job=view, diff=diff),
    }
    return _json({"parts": parts, "done": done, "status": view["status"]})


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """The page's stylesheet and script."""
    if name not in STATIC:
        raise HTTPException(404)
    return Response((HERE / "static" / name).read_bytes(), media_type=STATIC[name], headers=HEADERS)
