"""wikiq's MCP tools: how agents read wikis and apply batches, over any ``Backend``.

The tools are defined once here and served two ways:

- in the API process at ``/mcp`` (``api.server.mcp``): the backend is the service itself, called in process
  with the principal of the MCP request's bearer token;
- over stdin/stdout for local agent hosts (``wikiq mcp``, ``api.mcp.stdio``): the backend is the Python
  client against the API at ``WIKIQ_URL``.

Tool results carry the answer twice: as ``structured_content`` (validated against the tool's output schema)
and as text for hosts that show only text. A refusal is an ``is_error`` result whose structured content is
``{"error": {code, message, index}, "hint": ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from worker.schema.answers import Applied, ErrorInfo, Job, JobStatus, MatchList, Page, PageList, WikiList
from worker.schema.edits import Batch, Edit

MAX_WAIT = 60.0  # seconds write_batch and get_job wait for a job at most


class Refused(Exception):
    """A refusal of the backend, carrying the contract's error object."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class Backend(Protocol):
    """What the tools need; every method raises ``Refused`` for a refusal."""

    async def list_wikis(self) -> WikiList: ...

    async def list_pages(self, wiki: str, prefix: str, limit: int, cursor: str | None) -> PageList: ...

    async def read_page(self, wiki: str, path: str) -> Page: ...

    async def search(self, wiki: str, query: str, limit: int) -> MatchList: ...

    async def submit(self, wiki: str, batch: Batch, wait: float, idempotency_key: str | None) -> Job: ...

    async def job(self, job_id: str, wait: float) -> Job: ...

    async def cancel(self, job_id: str) -> Job: ...


BackendFor = Callable[[Context], Backend]
Lifespan = Callable[[MCPServer[Any]], AbstractAsyncContextManager[Any]]

INSTRUCTIONS = """\
wikiq keeps markdown wikis in git. Find pages with list_wikis, list_pages and search_wiki; read_page before \
changing a page (its version is the expected_version of the edit); change pages only with write_batch, which \
applies all its edits as one commit or nothing. Paths: wiki/** takes any edit, raw/** is create-only, \
index.md, log.md and schema.md may be written but never deleted or renamed."""

HINTS = {
    "VERSION_MISMATCH": "The page changed since you read it: read_page it again, redo this edit on the new "
    "content and version, and submit the whole batch again.",
    "VERSION_REQUIRED": "Add expected_version (the version read_page or list_pages gives) to this edit.",
    "OLD_NOT_FOUND": "Call read_page with raw=true and copy `old` exactly from its text (no line numbers).",
    "OLD_NOT_UNIQUE": "Make `old` longer with surrounding text so it occurs once, or set replace_all=true.",
    "COUNT_MISMATCH": "read_page with raw=true and count the occurrences of `old` again.",
    "NOT_FOUND": "No such file at the head: find the right path with list_pages or search_wiki.",
    "PATH_EXISTS": "The path exists: overwrite or replace it with its expected_version, or use another path.",
    "PATH_CONFLICT": "A file stands where a folder is needed, or the reverse: choose another path.",
    "ZONE_FORBIDDEN": "Write under wiki/ (any op) or raw/ (create only), or to index.md, log.md, schema.md.",
    "PROTECTED_PATH": "index.md, log.md, schema.md are never deleted or renamed; overwrite or replace them.",
    "INVALID_PATH": "Use a relative POSIX path like wiki/topic/page.md (no .., no leading or trailing /).",
    "INVALID_ENCODING": "Send text as UTF-8, or bytes as base64 with encoding=base64.",
    "TOO_MANY_EDITS": "Split the work into several batches of at most 1000 edits, index and log last.",
    "BATCH_TOO_LARGE": "Split the work into several smaller batches, index and log last.",
    "BATCH_EMPTY": "Give at least one edit.",
    "INVALID_BATCH": "Fix the argument the message names and call again.",
    "WIKI_NOT_FOUND": "Call list_wikis for the ids you may use.",
    "JOB_NOT_FOUND": "Unknown or expired job id; use the job_id write_batch returned.",
    "IDEMPOTENCY_CONFLICT": "That idempotency_key was used for another batch: use a new key.",
    "NOT_CANCELLABLE": "The job has started or finished: see its outcome with get_job.",
    "UNAUTHORIZED": "The MCP connection needs a valid wikiq bearer token.",
    "FORBIDDEN": "Your token lacks the right for this; ask the user.",
    "UNREACHABLE": "The wikiq API did not answer; try again later or tell the user.",
}

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

WikiId = Annotated[str, Field(description="Wiki id, as returned by list_wikis.")]
PagePath = Annotated[str, Field(description="File path inside the wiki, e.g. wiki/redis.md.")]
JobId = Annotated[str, Field(description="Job id, as returned by write_batch.")]


class WriteOutcome(BaseModel):
    """Answer of write_batch: the job and, once it succeeded, its commit and applied edits."""

    job_id: str
    status: JobStatus
    dry_run: bool = False
    commit: str | None = Field(None, description="the new commit; null for a dry run or an unfinished job")
    applied: list[Applied] | None = Field(None, description="one entry per edit, with the path's new version")


def _text(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _answer(model: BaseModel, text: str | None = None) -> CallToolResult:
    data = model.model_dump(mode="json", exclude_unset=True)
    return CallToolResult(
        content=[TextContent(text=_text(data) if text is None else text)], structured_content=data
    )


def _refusal(error: ErrorInfo, **extra: Any) -> CallToolResult:
    data = {"error": error.model_dump(mode="json"), **extra, "hint": HINTS.get(error.code, "")}
    return CallToolResult(content=[TextContent(text=_text(data))], structured_content=data, is_error=True)


async def _answered(call: Awaitable[BaseModel]) -> CallToolResult:
    """The tool result of a backend call: its answer, or the refusal with a hint."""
    try:
        return _answer(await call)
    except Refused as exc:
        return _refusal(exc.error)


def _numbered(page: Page) -> str:
    head = f"{page.path} version={page.version} size={page.size} commit={page.commit}"
    if page.encoding != "utf-8":
        return f"{head}\n(not UTF-8 text: {page.size} bytes, base64 in structured content; raw=true for it)"
    lines = page.content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    width = len(str(len(lines)))
    return head + "\n" + "\n".join(f"{n:>{width}}| {line}" for n, line in enumerate(lines, 1))


def build_server(backend_for: BackendFor, lifespan: Lifespan | None = None) -> MCPServer:
    """An MCP server whose tools call the backend ``backend_for`` gives for each call."""
    server: MCPServer = MCPServer(
        "wikiq", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING", lifespan=lifespan
    )

    @server.tool(title="List wikis", annotations=READ_ONLY)
    async def list_wikis(ctx: Context) -> Annotated[CallToolResult, WikiList]:
        """List the wikis you may read, each with its head commit: {wikis: [{id, head}]}.

        Read-only. Call it first to learn the wiki ids the other tools take. A wiki that is missing here
        either does not exist or is not visible to your token; the two look the same.
        """

        return await _answered(backend_for(ctx).list_wikis())

    @server.tool(title="List pages", annotations=READ_ONLY)
    async def list_pages(
        wiki: WikiId,
        ctx: Context,
        prefix: Annotated[
            str, Field(description="Only paths starting with this text, e.g. wiki/redis/.")
        ] = "",
        limit: Annotated[int, Field(ge=1, le=10_000, description="At most this many entries.")] = 200,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous call.")] = None,
    ) -> Annotated[CallToolResult, PageList]:
        """List the files at a wiki's head, sorted by path: {pages: [{path, version, size}], next_cursor}.

        Read-only. Use it to see what exists before planning edits. `version` is the token write_batch's
        expected_version needs (the same one read_page gives); `size` is in bytes. `prefix` is a plain
        string prefix, not a glob. When next_cursor is not null there are more files: call again with
        cursor=next_cursor. Errors: WIKI_NOT_FOUND (see list_wikis).
        """
        return await _answered(backend_for(ctx).list_pages(wiki, prefix, limit, cursor))

    @server.tool(title="Read page", annotations=READ_ONLY)
    async def read_page(
        wiki: WikiId,
        path: PagePath,
        ctx: Context,
        raw: Annotated[
            bool, Field(description="Text is exactly the file's content: copy a replace's `old` from it.")
        ] = False,
    ) -> Annotated[CallToolResult, Page]:
        """Read one file at a wiki's head: content, version, size, and the commit it was read at.

        Read-only. Read a page before you change it: write_batch needs its `version` as expected_version
        for overwrite, replace, delete and rename, and that version goes stale as soon as anyone commits a
        change to the page. By default the text shows a header line and the content with line numbers, for
        reading: never copy the numbers into an edit. With raw=true the text is exactly the file's content,
        byte for byte what a replace's `old` must match; use it before writing a replace. The structured
        result always holds the exact content; a file that is not UTF-8 comes base64-encoded
        (encoding="base64"). Errors: NOT_FOUND (find the path with list_pages or search_wiki),
        INVALID_PATH, WIKI_NOT_FOUND.
        """
        try:
            page = await backend_for(ctx).read_page(wiki, path)
        except Refused as exc:
            return _refusal(exc.error)
        return _answer(page, page.content if raw else _numbered(page))

    @server.tool(title="Search wiki", annotations=READ_ONLY)
    async def search_wiki(
        wiki: WikiId,
        query: Annotated[str, Field(min_length=1, max_length=1000, description="Text to find, one line.")],
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many matches.")] = 50,
    ) -> Annotated[CallToolResult, MatchList]:
        """Find the lines that contain a text at a wiki's head: {matches: [{path, line, text}]}.

        Read-only. Literal, case-insensitive substring match within one line (no regex, no wildcards);
        `line` is 1-based. Use it to find the pages to read and, before a rename, every page that links to
        the old name (e.g. query "[[redis/old"), so the same batch can fix those links. A result with
        exactly `limit` matches may be cut short: narrow the query or raise the limit. Errors:
        WIKI_NOT_FOUND, INVALID_BATCH (an empty or multi-line query).
        """

        return await _answered(backend_for(ctx).search(wiki, query, limit))

    @server.tool(
        title="Write batch (commits changes)",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        ),
    )
    async def write_batch(
        wiki: WikiId,
        message: Annotated[str, Field(min_length=1, description="Commit message describing the change.")],
        edits: Annotated[list[Edit], Field(description="Edits, applied in order; see the tool description.")],
        ctx: Context,
        dry_run: Annotated[bool, Field(description="Check everything and report; commit nothing.")] = False,
        wait: Annotated[
            bool, Field(description="Wait up to 60 s for the outcome (false: job id only).")
        ] = True,
        idempotency_key: Annotated[
            str | None, Field(max_length=256, description="Same key + same batch = same job; for retries.")
        ] = None,
    ) -> Annotated[CallToolResult, WriteOutcome]:
        """Apply typed edits to a wiki as one git commit on main: all of them, or none.

        Changes the wiki: files are created, rewritten, renamed or deleted (git history keeps old
        versions, but no tool undoes a commit). Call it only after the user agreed to the plan: the wiki
        and every edit. Read each page you change first and pass its version as expected_version.

        Each edit is one {op, ...}, applied in order, each to the state the earlier ones left:
        - create: {op, path, content, encoding?}; fails if the path exists.
        - overwrite: {op, path, content, encoding?, expected_version}; whole-file rewrite.
        - replace: {op, path, old, new, expected_version, replace_all?, expected_count?}; `old` must match
          the file byte for byte (read_page with raw=true) and occur exactly once unless replace_all=true.
        - delete: {op, path, expected_version}.
        - rename: {op, path, new_path, expected_version}; links to the old name are not rewritten: fix them
          with replace edits in the same batch (search_wiki finds them).
        expected_version is required for a path that exists when the batch starts, ignored for one created
        earlier in the batch. encoding="base64" sends bytes that are not UTF-8.

        Paths: wiki/** takes any op; raw/** is create-only; index.md, log.md and schema.md may be created,
        overwritten or replaced, never deleted or renamed; anything else is refused. At most 1000 edits and
        8 MiB of content a batch: split bigger work up front, index and log in the last batch.

        Returns {job_id, status, commit, applied} with one applied entry per edit (the path's new version).
        If the job is still queued or running after 60 s (or wait=false), call get_job with job_id. Retrying
        after a lost answer? Pass the same idempotency_key to get the same job instead of a second commit.

        On failure nothing is written and the result is an error {code, message, index}, index being the
        failing edit, with a hint: VERSION_MISMATCH: read_page again and redo that edit; VERSION_REQUIRED:
        add expected_version; OLD_NOT_FOUND, OLD_NOT_UNIQUE, COUNT_MISMATCH: re-read with raw=true and copy
        a longer `old`; NOT_FOUND, PATH_EXISTS, PATH_CONFLICT: check list_pages; ZONE_FORBIDDEN,
        PROTECTED_PATH, INVALID_PATH: use a path the rules allow; TOO_MANY_EDITS, BATCH_TOO_LARGE: split.
        """
        try:
            batch = Batch(message=message, edits=edits, dry_run=dry_run)
        except ValidationError as exc:
            return _refusal(ErrorInfo(code="INVALID_BATCH", message=str(exc.errors()[0]["msg"])))
        try:
            job = await backend_for(ctx).submit(wiki, batch, MAX_WAIT if wait else 0.0, idempotency_key)
        except Refused as exc:
            return _refusal(exc.error)
        if job.status == "failed" and job.error is not None:
            return _refusal(job.error, job_id=job.job_id, status=job.status)
        result = job.result
        return _answer(
            WriteOutcome(
                job_id=job.job_id,
                status=job.status,
                dry_run=job.dry_run,
                commit=result.commit if result else None,
                applied=result.applied if result else None,
            )
        )

    @server.tool(title="Get job", annotations=READ_ONLY)
    async def get_job(
        job_id: JobId,
        ctx: Context,
        wait_seconds: Annotated[
            float, Field(ge=0, le=MAX_WAIT, description="Hold the answer until the job finishes, this long.")
        ] = 0,
    ) -> Annotated[CallToolResult, Job]:
        """Get a batch job: {job_id, wiki, status, result: {commit, applied}, error: {code, message, index}}.

        Read-only. Use it when write_batch returned a job still queued or running, or was called with
        wait=false. status is queued, running, succeeded, failed or cancelled. A failed job wrote nothing;
        its error names the failing edit's index (write_batch's description says what to do per code).
        wait_seconds (up to 60) answers as soon as the job finishes: prefer it to calling in a loop.
        Errors: JOB_NOT_FOUND (unknown or expired id).
        """
        return await _answered(backend_for(ctx).job(job_id, wait_seconds))

    @server.tool(
        title="Cancel job",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def cancel_job(job_id: JobId, ctx: Context) -> Annotated[CallToolResult, Job]:
        """Cancel a batch job that has not started, so its edits are never applied; returns the job.

        Only a queued job can be cancelled, and a cancel cannot be undone (submit the batch again to redo
        it). Cancelling a job already cancelled succeeds again. Errors: NOT_CANCELLABLE (it is running or
        finished: its batch is or will be applied; see get_job), JOB_NOT_FOUND.
        """
        return await _answered(backend_for(ctx).cancel(job_id))

    return server
