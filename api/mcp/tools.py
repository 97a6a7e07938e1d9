"""wikiq's MCP tools: how agents read wikis and apply batches, over any ``Backend``.

The tools are defined once here and served two ways:

- in the API process at ``/mcp`` (``api.server.mcp``): the backend is the service itself, called in process
  with the principal of the MCP request's bearer token;
- over stdin/stdout for local agent hosts (``wikiq mcp``, ``api.mcp.stdio``): the backend is the Python
  client against the API at ``WIKIQ_URL``.

Tool results carry the answer twice: as ``structured_content`` (validated against the tool's output schema)
and as text for hosts that show only text. Every refusal, argument validation included, is an ``is_error``
result whose structured content is ``{"error": {code, message, index}, "hint": ...}``: the message names
the field or the failing edit, the hint says what to do. The limits the descriptions state are the
server's own (``build_server`` is given them from the settings).
"""

# No ``from __future__ import annotations``: the tools' parameter types are built from the limits given to
# ``build_server`` and must be evaluated where they are defined.

import importlib.metadata
import inspect
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, JsonValue, ValidationError

from worker.schema.answers import (
    Applied,
    BacklinkList,
    BatchWarning,
    ErrorInfo,
    FileDiff,
    Job,
    JobStatus,
    MatchList,
    Page,
    PageList,
    PageSet,
    SectionInfo,
    WikiList,
)
from worker.schema.edits import OPS, Batch, Edit, Limits

MAX_WAIT = 60.0  # seconds write_batch, check_batch and get_job wait for a job at most
DIFF_CHARS = 60_000  # characters of diff a check answers an agent (get_job answers the whole diff)
MAX_PAGES_READ = 100  # paths read_pages takes (the service's bound)
WIKI_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class Refused(Exception):
    """A refusal of the backend, carrying the contract's error object."""

    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class Backend(Protocol):
    """What the tools need; every method raises ``Refused`` for a refusal."""

    async def list_wikis(self) -> WikiList: ...

    async def list_pages(self, wiki: str, prefix: str, limit: int, cursor: str | None) -> PageList: ...

    async def read_page(self, wiki: str, path: str, sections: bool) -> Page: ...

    async def read_pages(self, wiki: str, paths: list[str], sections: bool) -> PageSet: ...

    async def backlinks(self, wiki: str, path: str, limit: int) -> BacklinkList: ...

    async def search(
        self,
        wiki: str,
        query: str,
        limit: int,
        regex: bool,
        case_sensitive: bool,
        prefix: str,
        cursor: str | None,
    ) -> MatchList: ...

    async def submit(self, wiki: str, batch: Batch, wait: float, idempotency_key: str | None) -> Job: ...

    async def job(self, job_id: str, wait: float) -> Job: ...

    async def cancel(self, job_id: str) -> Job: ...


BackendFor = Callable[[Context], Backend]
Lifespan = Callable[[MCPServer[Any]], AbstractAsyncContextManager[Any]]

INSTRUCTIONS = """\
wikiq keeps markdown wikis in git and changes them only in batches: one commit with every edit, or nothing. \
Find pages with list_wikis, list_pages, search_wiki and find_backlinks; read them with read_page, read_pages \
or page_outline (each gives the version an edit's expected_version needs). For a refactor (split, move, \
rename, fix links, update index and log) draft ONE batch, run check_batch and show the user its diff and \
warnings, then write_batch the same edits. Zones: wiki/** any edit; raw/** create only; index.md, log.md \
and schema.md are never deleted or renamed."""

HINTS = {
    "VERSION_MISMATCH": "The page changed since you read it. expected_version must be its version at the "
    "head or one an earlier edit of this batch gave it: read_page it again, redo this edit on the new "
    "content, and send the whole batch again.",
    "VERSION_REQUIRED": "Add expected_version (from read_page or list_pages; a section op may give "
    "expected_section_version from page_outline instead).",
    "OLD_NOT_FOUND": "Read the page with raw=true and copy `old` exactly (no line numbers); for "
    "replace_across, check the text or pattern with search_wiki.",
    "OLD_NOT_UNIQUE": "Make `old` longer with surrounding text so it occurs once, or set replace_all=true "
    "(with expected_count to guard the number).",
    "COUNT_MISMATCH": "The message gives the real count: read again (search_wiki for replace_across) and "
    "correct expected_count or the text.",
    "SECTION_NOT_FOUND": "Call page_outline and use one of the section addresses it lists as heading.",
    "SECTION_AMBIGUOUS": "Use one of the addresses the message lists ('Parent > Child') as heading.",
    "FRONTMATTER_INVALID": "The page's front matter is not a YAML mapping: fix it with overwrite or replace.",
    "PATTERN_INVALID": "Fix the RE2 pattern (no look-around or backreferences) or the \\1 groups in new.",
    "NOT_FOUND": "No such file (or folder) at this point: find the path with list_pages or search_wiki.",
    "PATH_EXISTS": "The target exists: edit it with its expected_version, or use another path.",
    "PATH_CONFLICT": "A file stands where a folder is needed, or the reverse: choose another path.",
    "ZONE_FORBIDDEN": "Write under wiki/ (any op) or raw/ (create only), or to index.md, log.md, schema.md.",
    "PROTECTED_PATH": "index.md, log.md, schema.md are never deleted or renamed; edit them in place.",
    "INVALID_PATH": "Use a relative POSIX path like wiki/topic/page.md (no .., no leading or trailing /).",
    "INVALID_ENCODING": "Send text as UTF-8, or bytes as base64 with encoding=base64 (create/overwrite).",
    "TOO_MANY_EDITS": "Split the work into several batches under the edit limit, index and log last.",
    "BATCH_TOO_LARGE": "Split the work into smaller batches (or narrow a replace_across prefix or pattern).",
    "BATCH_TOO_COSTLY": "The batch would cost more work than one batch may buy (the message says which): "
    "split it, narrow a replace_across prefix, or use a simpler pattern or a literal old.",
    "PLAN_STALE": "The wiki changed since the plan was checked: run check_batch again, commit its new plan.",
    "PLAN_NOT_FOUND": "The plan is unknown, expired (10 minutes), already committed or not yours: run "
    "check_batch again.",
    "QUERY_TOO_COSTLY": "The read would cost more work than one request may buy (the message says which): "
    "narrow it (a prefix, fewer pages, a literal query instead of a pattern).",
    "BATCH_EMPTY": "Give at least one edit.",
    "INVALID_BATCH": "Fix the argument or field the message names and call again.",
    "WIKI_NOT_FOUND": "Call list_wikis for the ids you may use.",
    "JOB_NOT_FOUND": "Unknown or expired job id; use the job_id write_batch or check_batch returned.",
    "IDEMPOTENCY_CONFLICT": "That idempotency_key was used for another batch: use a new key.",
    "NOT_CANCELLABLE": "The job has started or finished: see its outcome with get_job.",
    "UNAUTHORIZED": "The MCP connection needs a valid wikiq bearer token: tell the user.",
    "FORBIDDEN": "Your token lacks the right (or the path prefix) for this: ask the user, do not retry.",
    "RATE_LIMITED": "Too many calls or bytes waiting: wait a few seconds, then call again once.",
    "INTERNAL": "A server error, already logged: retry once (write_batch with the same idempotency_key), "
    "then tell the user.",
    "STORAGE_UNAVAILABLE": "The wiki's storage is unavailable: wait and retry, or tell the user.",
    "REMOTE_UNAVAILABLE": "The wiki's git remote cannot be reached: retry later or tell the user.",
    "REMOTE_REJECTED": "The git remote refused the push: tell the user.",
    "REMOTE_NOT_FOUND": "No such remote is configured: tell the user.",
    "UNREACHABLE": "The wikiq API did not answer; try again later or tell the user.",
}

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

WikiId = Annotated[str, Field(pattern=WIKI_PATTERN, description="Wiki id, as returned by list_wikis.")]
PagePath = Annotated[str, Field(min_length=1, max_length=4096, description="File path, e.g. wiki/redis.md.")]
JobId = Annotated[
    str, Field(min_length=1, max_length=64, description="Job id, as write_batch or check_batch returned.")
]
Message = Annotated[
    str, Field(min_length=1, max_length=10_000, description="Commit message: what the batch does and why.")
]
IdempotencyKey = Annotated[
    str | None,
    Field(
        max_length=256,
        description="Optional. The same key with the same batch returns the same job instead of a second "
        "commit: reuse it when retrying after a lost answer.",
    ),
]
EXAMPLE_EDITS: list[JsonValue] = [
    {"op": "create", "path": "wiki/redis/persistence.md", "content": "# Persistence\n\nAOF and RDB.\n"},
    {
        "op": "remove_section",
        "path": "wiki/redis.md",
        "heading": "Redis > Persistence",
        "expected_version": "3b18e512dba79e4c8300dd08aeb37f8e728b8dad",
    },
    {"op": "rename", "path": "wiki/db", "new_path": "wiki/databases", "rewrite_links": True},
    {"op": "append", "path": "log.md", "content": "- Split the Redis page\n"},
]


class WriteOutcome(BaseModel):
    """Answer of write_batch: the job and, once it succeeded, its commit and applied changes."""

    job_id: str = Field(description="the job; get_job follows it")
    status: JobStatus = Field(description="queued, running, succeeded, failed or cancelled")
    dry_run: bool = Field(default=False, description="true when the batch was only checked")
    commit: str | None = Field(
        default=None, description="the new commit; null for a dry run or an unfinished job"
    )
    applied: list[Applied] | None = Field(
        default=None,
        description="one entry per edit, plus one per moved file and rewritten page",
    )
    diff: list[FileDiff] | None = Field(
        default=None, description="dry run only: the unified diff of each file"
    )
    warnings: list[BatchWarning] | None = Field(default=None, description="dry run only: what to look at")


class CheckOutcome(BaseModel):
    """Answer of check_batch: what the batch would do, a diff per changed file, and warnings."""

    job_id: str = Field(description="the dry-run job; get_job shows it again")
    status: JobStatus = Field(description="succeeded when every check passed (else the result is an error)")
    applied: list[Applied] | None = Field(default=None, description="what each edit would change, in order")
    diff: list[FileDiff] | None = Field(
        default=None, description="unified diff per changed file, in path order"
    )
    warnings: list[BatchWarning] | None = Field(
        default=None,
        description="LINK_BROKEN, NOT_IN_INDEX, NOT_REWRITTEN; empty when clean",
    )


class Outline(BaseModel):
    """Answer of page_outline: a page's version and its heading tree."""

    path: str = Field(description="the page")
    version: str = Field(description="the page's version (expected_version)")
    commit: str | None = Field(default=None, description="the commit it was read at")
    sections: list[SectionInfo] = Field(
        description="each heading: level, heading, path, address (a section op's heading), line, end_line, "
        "version (a section op's expected_section_version)"
    )


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


def invalid_arguments(exc: ValidationError) -> CallToolResult:
    """The refusal for arguments that do not fit a tool's schema: INVALID_BATCH naming the field (and the
    failing edit's index for an edit); BATCH_EMPTY or TOO_MANY_EDITS for a list of edits of the wrong
    length."""
    errors = exc.errors()
    first: dict[str, Any] = dict(errors[0]) if errors else {}
    loc = [str(part) for part in first.get("loc", ())]
    index = None
    if len(loc) >= 2 and loc[0] == "edits" and loc[1].isdigit():
        index = int(loc[1])
        if len(loc) > 2 and loc[2] in OPS:  # the discriminated union names the op: drop it
            loc = loc[:2] + loc[3:]
    where = ".".join(loc) or "arguments"
    kind = str(first.get("type", ""))
    message = "unknown field" if kind == "extra_forbidden" else str(first.get("msg", "invalid"))
    code = "INVALID_BATCH"
    if loc == ["edits"] and kind in ("too_short", "too_long"):
        code = "BATCH_EMPTY" if kind == "too_short" else "TOO_MANY_EDITS"
    return _refusal(ErrorInfo(code=code, message=f"{where}: {message}", index=index))


class WikiqServer(MCPServer):
    """The SDK's server, answering arguments that fail the input schema like every other refusal."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return invalid_arguments(exc.__cause__)
            raise


def trimmed(diff: list[FileDiff] | None, budget: int = DIFF_CHARS) -> list[FileDiff] | None:
    """``diff`` cut to ``budget`` characters in all, at line ends: the entry that crosses it is cut and
    marked truncated, later ones keep their path with an empty diff."""
    if diff is None:
        return None
    out = []
    for entry in diff:
        if len(entry.diff) <= budget:
            budget -= len(entry.diff)
            out.append(entry)
            continue
        kept = entry.diff[: entry.diff.rfind("\n", 0, budget) + 1] if budget > 0 else ""
        budget = 0
        out.append(entry.model_copy(update={"diff": kept, "truncated": True}))
    return out


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
    body = "\n".join(f"{n:>{width}}| {line}" for n, line in enumerate(lines, 1))
    return head + "\n" + body + _outline_text(page.sections)


def _outline_text(sections: list[SectionInfo] | None) -> str:
    if not sections:
        return ""
    rows = [
        f"  line {s.line}-{s.end_line} {'#' * s.level} {s.address} (version {s.version})" for s in sections
    ]
    return "\nsections:\n" + "\n".join(rows)


def _size(value: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} bytes"


BATCH_ERRORS = """\
Errors (nothing is written; index names the failing edit; the hint says what to do): VERSION_MISMATCH, \
VERSION_REQUIRED: read the page again, redo that edit; OLD_NOT_FOUND, OLD_NOT_UNIQUE, COUNT_MISMATCH: \
copy a longer `old` from read_page raw=true, fix the count; SECTION_NOT_FOUND, SECTION_AMBIGUOUS: use an \
address from page_outline; NOT_FOUND, PATH_EXISTS, PATH_CONFLICT: check list_pages; ZONE_FORBIDDEN, \
PROTECTED_PATH, INVALID_PATH: use a path the zones allow; FRONTMATTER_INVALID, PATTERN_INVALID, \
INVALID_ENCODING, INVALID_BATCH: fix the field named; TOO_MANY_EDITS, BATCH_TOO_LARGE, BATCH_TOO_COSTLY: \
split; PLAN_STALE, PLAN_NOT_FOUND: check again; WIKI_NOT_FOUND: list_wikis; IDEMPOTENCY_CONFLICT: new key; \
FORBIDDEN: ask the user; RATE_LIMITED: wait, retry; INTERNAL: retry once, then tell them."""

WRITE_BATCH = """\
Apply typed edits to a wiki as ONE git commit on main: all of them, or none.

It changes the wiki (git keeps history, but no tool undoes a commit). Call it only after the user agreed \
to the plan; for any refactor (moves, several pages, sections, links) run check_batch with the same edits \
first and show its diff and warnings.

Edits apply in order, each to the state the earlier ones left; each op's fields are in the edits schema: \
create, overwrite, replace, delete, rename (a file or folder; rewrite_links fixes every link to it), \
append, frontmatter, replace_section, append_section, insert_section_after, remove_section, \
rename_section, replace_across (literal or RE2 over every page under a prefix).

expected_version: the version read_page/list_pages gave, or one an earlier edit of this batch gave the path \
(chain edits without re-reading). Required to change a page that exists when the batch starts (section ops \
may send expected_section_version instead); optional on append and frontmatter (omitted, they never \
conflict); ignored for a path created earlier in the batch.

Zones: wiki/** any op; raw/** create only (never rewritten); index.md, log.md, schema.md: create and \
edit, never delete or rename. Limits: {max_edits} edits, {max_content} of content, {max_file} per file, \
{max_output} written a batch: split bigger work up front, index and log in the last batch.

Returns {{job_id, status, commit, applied}}; applied has one entry per edit, plus one per moved file and \
per page rewritten (rewrite_links, replace_across, with count). Still queued after 60 s, or wait=false: \
get_job. After a lost answer, retry with the same idempotency_key.

""" + BATCH_ERRORS.replace("{", "{{").replace("}", "}}")

CHECK_BATCH = """\
Dry-run a batch: every check write_batch makes, on the wiki as it is now, and what the batch would \
change; nothing is committed.

Use it before write_batch for any refactor (moves with rewrite_links, section edits, replace_across, \
several pages), show the user the diff and warnings, then call write_batch with the same edits. Check \
again after changing the edits. It reserves nothing: a page changed before write_batch makes that fail \
VERSION_MISMATCH.

Takes the same edits as write_batch (same schema, versions, zones and limits: {max_edits} edits, \
{max_content} of content).

Returns {{job_id, status, applied, diff, warnings}}: applied as write_batch would answer it; diff is one \
unified diff per changed file ({{path, old_path for a move, diff, truncated when cut}}; 60 000 \
characters in all here, get_job with the job_id answers the whole diff); warnings ({{code, path, line, \
link, message}}) are LINK_BROKEN (a link the batch leaves resolving to nothing: fix its target or add \
the page), NOT_IN_INDEX (a created page index.md does not link to: add it to index.md), NOT_REWRITTEN \
(links or matches in a raw/ page no op may change). An empty warnings list means the refactor is clean.

""" + BATCH_ERRORS.replace("{", "{{").replace("}", "}}")


def build_server(backend_for: BackendFor, limits: Limits, lifespan: Lifespan | None = None) -> MCPServer:
    """An MCP server whose tools call the backend ``backend_for`` gives for each call; ``limits`` are
    the server's batch limits (stated in the descriptions and the edits schema)."""
    server: MCPServer = WikiqServer(
        "wikiq",
        instructions=INSTRUCTIONS,
        version=importlib.metadata.version("wikiq"),
        log_level="WARNING",
        lifespan=lifespan,
    )
    sizes: dict[str, str] = {
        "max_edits": str(limits.max_edits),
        "max_content": _size(limits.max_content_bytes),
        "max_file": _size(limits.max_file_bytes),
        "max_output": _size(limits.max_output_bytes),
    }
    edits_field = Field(
        min_length=1,
        max_length=limits.max_edits,
        description=f"1 to {limits.max_edits} edits, applied in order; each is one {{op, ...}} of the "
        "schema below.",
        json_schema_extra={"examples": [EXAMPLE_EDITS]},
    )
    Edits = Annotated[list[Edit], edits_field]

    def register(**options: Any) -> Callable[[Callable[..., Any]], Any]:
        """``server.tool(**options)``, the docstring dedented and the limits written into it."""

        def add(fn: Callable[..., Any]) -> Any:
            doc = inspect.cleandoc(fn.__doc__ or "").replace("{max_file}", sizes["max_file"])
            fn.__doc__ = doc.replace("{max_paths}", str(MAX_PAGES_READ))
            return server.tool(**options)(fn)

        return add

    @register(title="List wikis", annotations=READ_ONLY)
    async def list_wikis(ctx: Context) -> Annotated[CallToolResult, WikiList]:
        """List the wikis you may read, each with its head commit: {wikis: [{id, head}]}.

        Read-only. Call it first to learn the wiki ids every other tool takes; head is the commit id of
        main (null for an empty wiki). A wiki missing here does not exist or is not visible to your token
        (the two look the same). Errors: UNAUTHORIZED (the connection has no valid token: tell the user),
        RATE_LIMITED (wait a few seconds, call again), INTERNAL (retry once, then tell the user).
        """
        return await _answered(backend_for(ctx).list_wikis())

    @register(title="List pages", annotations=READ_ONLY)
    async def list_pages(
        wiki: WikiId,
        ctx: Context,
        prefix: Annotated[
            str, Field(max_length=4096, description="Only paths starting with this text, e.g. wiki/redis/.")
        ] = "",
        limit: Annotated[
            int, Field(ge=1, le=10_000, description="At most this many entries (1-10000).")
        ] = 200,
        cursor: Annotated[
            str | None, Field(max_length=8192, description="Optional: next_cursor of the previous call.")
        ] = None,
    ) -> Annotated[CallToolResult, PageList]:
        """List the files at a wiki's head, sorted by path: {pages: [{path, version, size}], next_cursor}.

        Read-only. Use it to see what exists before planning edits; to find pages by their text use
        search_wiki, by their links find_backlinks. version is what an edit's expected_version needs (the
        same read_page gives); size is in bytes. prefix is a plain string prefix, not a glob. When
        next_cursor is not null there are more files: call again with cursor=next_cursor. Errors:
        WIKI_NOT_FOUND (see list_wikis), INVALID_BATCH (a cursor this tool did not give), RATE_LIMITED
        (wait, retry), INTERNAL (retry once).
        """
        return await _answered(backend_for(ctx).list_pages(wiki, prefix, limit, cursor))

    @register(title="Read page", annotations=READ_ONLY)
    async def read_page(
        wiki: WikiId,
        path: PagePath,
        ctx: Context,
        raw: Annotated[
            bool, Field(description="Text is exactly the file's content: copy a replace's `old` from it.")
        ] = False,
        sections: Annotated[
            bool, Field(description="Also answer the heading tree (as page_outline does).")
        ] = False,
    ) -> Annotated[CallToolResult, Page]:
        """Read one file at a wiki's head: {path, version, content, encoding, size, commit, sections?}.

        Read-only. Read a page before you change it: its version is the expected_version of the edit (and
        goes stale when anyone commits a change to the page). The text shows a header line and the content
        with line numbers, for reading: never copy the numbers into an edit. raw=true gives exactly the
        file's bytes as text, what a replace's `old` must match. sections=true adds each heading's address
        and version, for section ops. The structured result always holds the exact content; a file that
        is not UTF-8 comes base64 (encoding="base64"). For several pages at once use read_pages. Errors:
        NOT_FOUND (find the path with list_pages or search_wiki), INVALID_PATH, BATCH_TOO_LARGE (over
        {max_file}: clone the repository instead), WIKI_NOT_FOUND, RATE_LIMITED (wait, retry), INTERNAL
        (retry once).
        """
        try:
            page = await backend_for(ctx).read_page(wiki, path, sections)
        except Refused as exc:
            return _refusal(exc.error)
        return _answer(page, page.content if raw else _numbered(page))

    @register(title="Read pages", annotations=READ_ONLY)
    async def read_pages(
        wiki: WikiId,
        paths: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=4096)]],
            Field(
                min_length=1,
                max_length=MAX_PAGES_READ,
                description=f"1 to {MAX_PAGES_READ} file paths, answered in this order.",
            ),
        ],
        ctx: Context,
        sections: Annotated[bool, Field(description="Also answer each page's heading tree.")] = False,
    ) -> Annotated[CallToolResult, PageSet]:
        """Read many files at one commit of a wiki's head: {commit, pages: [page...], errors: [{path,
        code, message}]}.

        Read-only. Use it instead of many read_page calls when planning a refactor (e.g. every page
        find_backlinks named). Each page is what read_page answers (version, exact content, sections with
        sections=true); a path that is missing (NOT_FOUND), invalid (INVALID_PATH) or past {max_file} of
        content in all (BATCH_TOO_LARGE: read it in another call) is an entry of errors, not a failure.
        The text shows each page numbered, like read_page. Errors of the call: INVALID_BATCH (no paths or
        over {max_paths}), WIKI_NOT_FOUND, RATE_LIMITED (wait, retry), INTERNAL (retry once).
        """
        try:
            found = await backend_for(ctx).read_pages(wiki, paths, sections)
        except Refused as exc:
            return _refusal(exc.error)
        text = "\n\n".join(_numbered(page) for page in found.pages)
        if found.errors:
            text += "\n\nnot read: " + "; ".join(f"{e.path}: {e.code}" for e in found.errors)
        return _answer(found, text)

    @register(title="Page outline", annotations=READ_ONLY)
    async def page_outline(wiki: WikiId, path: PagePath, ctx: Context) -> Annotated[CallToolResult, Outline]:
        """Read a page's heading tree: {path, version, commit, sections: [{level, heading, path, address,
        line, end_line, version}]}.

        Read-only, cheaper to read than the whole page. Use it before a section op (replace_section,
        append_section, insert_section_after, remove_section, rename_section): send a section's address as
        the op's heading (the heading text, or 'Parent > Child' when the text is not unique) and its
        version as expected_section_version, so that edits of other sections by others do not conflict;
        the page's version works too, as expected_version. Headings inside code are not headings. Lines
        are 1-based, end_line inclusive. Errors: NOT_FOUND (see list_pages), INVALID_PATH, WIKI_NOT_FOUND,
        RATE_LIMITED (wait, retry), INTERNAL (retry once).
        """
        try:
            page = await backend_for(ctx).read_page(wiki, path, True)
        except Refused as exc:
            return _refusal(exc.error)
        outline = Outline(
            path=page.path, version=page.version, commit=page.commit, sections=page.sections or []
        )
        return _answer(
            outline,
            f"{page.path} version={page.version}" + (_outline_text(outline.sections) or "\n(no headings)"),
        )

    @register(title="Search wiki", annotations=READ_ONLY)
    async def search_wiki(
        wiki: WikiId,
        query: Annotated[
            str, Field(min_length=1, max_length=1000, description="Text (or an RE2 pattern), one line.")
        ],
        ctx: Context,
        regex: Annotated[
            bool, Field(description="query is an RE2 pattern; ^ and $ match at line ends.")
        ] = False,
        case_sensitive: Annotated[
            bool, Field(description="Match letter case exactly (default: ignore).")
        ] = False,
        prefix: Annotated[
            str, Field(max_length=4096, description="Only files whose path starts with this, e.g. wiki/db/.")
        ] = "",
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many matches (1-1000).")] = 50,
        cursor: Annotated[
            str | None, Field(max_length=8192, description="Optional: next_cursor of the previous call.")
        ] = None,
    ) -> Annotated[CallToolResult, MatchList]:
        """Find lines at a wiki's head: {matches: [{path, line, text, version}], next_cursor}.

        Read-only. Literal substring by default, ASCII case ignored; regex=true takes an RE2 pattern over
        each page (linear time; no look-around or backreferences), reported at the line where a match
        starts. Matches come by path, then line (1-based); version is the page's, ready for an edit's
        expected_version; a very long line is cut around the match. Use it to find pages to read, and to
        check the text or pattern of a replace_across (its count of matching lines is a lower bound of the
        matches). To find the links to a page use find_backlinks, which resolves links properly. When
        next_cursor is not null there are more: call again with cursor=next_cursor. Errors:
        PATTERN_INVALID (fix the pattern), INVALID_BATCH (a multi-line query or a foreign cursor),
        WIKI_NOT_FOUND, RATE_LIMITED (wait, retry), INTERNAL (retry once).
        """
        call = backend_for(ctx).search(wiki, query, limit, regex, case_sensitive, prefix, cursor)
        return await _answered(call)

    @register(title="Find backlinks", annotations=READ_ONLY)
    async def find_backlinks(
        wiki: WikiId,
        path: PagePath,
        ctx: Context,
        limit: Annotated[
            int, Field(ge=1, le=10_000, description="At most this many links (1-10000).")
        ] = 1000,
    ) -> Annotated[CallToolResult, BacklinkList]:
        """List every link to a page at a wiki's head: {path, version, backlinks: [{path, line, text,
        version}], truncated}.

        Read-only. Every wikilink ([[name]], [[folder/name#heading|label]], ![[embed]]) and relative
        markdown link ([label](../page.md)) in any page, outside code, that resolves to this page, by
        linking page then line, with the link as written and the linking page's version. Use it before
        renaming, moving, splitting or deleting a page: a rename with rewrite_links fixes these links
        itself; for a split or a delete, edit them in the same batch. truncated=true: more links than
        limit. Errors: NOT_FOUND (the page does not exist: see list_pages), WIKI_NOT_FOUND, RATE_LIMITED
        (wait, retry), INTERNAL (retry once).
        """
        return await _answered(backend_for(ctx).backlinks(wiki, path, limit))

    async def run_batch(
        ctx: Context, wiki: str, batch: Batch, wait: float, idempotency_key: str | None
    ) -> Job | CallToolResult:
        try:
            job = await backend_for(ctx).submit(wiki, batch, wait, idempotency_key)
        except Refused as exc:
            return _refusal(exc.error)
        if job.status == "failed" and job.error is not None:
            return _refusal(job.error, job_id=job.job_id, status=job.status)
        return job

    def batch_of(message: str, edits: list[Edit], dry_run: bool) -> Batch | CallToolResult:
        try:
            return Batch(message=message, edits=edits, dry_run=dry_run)
        except ValidationError as exc:
            return invalid_arguments(exc)

    @register(
        title="Check batch (dry run, commits nothing)",
        annotations=READ_ONLY,
        description=CHECK_BATCH.format(**sizes),
    )
    async def check_batch(
        wiki: WikiId,
        edits: Edits,
        ctx: Context,
        message: Annotated[
            str, Field(min_length=1, max_length=10_000, description="Optional: the commit message to check.")
        ] = "check",
    ) -> Annotated[CallToolResult, CheckOutcome]:
        batch = batch_of(message, edits, True)
        if isinstance(batch, CallToolResult):
            return batch
        job = await run_batch(ctx, wiki, batch, MAX_WAIT, None)
        if isinstance(job, CallToolResult):
            return job
        result = job.result
        outcome = CheckOutcome(job_id=job.job_id, status=job.status)
        if result is not None:
            outcome.applied, outcome.diff, outcome.warnings = (
                result.applied,
                trimmed(result.diff),
                result.warnings,
            )
        return _answer(outcome)

    @register(
        title="Write batch (commits changes)",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        ),
        description=WRITE_BATCH.format(**sizes),
    )
    async def write_batch(
        wiki: WikiId,
        message: Message,
        edits: Edits,
        ctx: Context,
        dry_run: Annotated[
            bool, Field(description="Check only, commit nothing (check_batch does the same, read-only).")
        ] = False,
        wait: Annotated[
            bool, Field(description="Wait up to 60 s for the outcome (false: answer the job id at once).")
        ] = True,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, WriteOutcome]:
        batch = batch_of(message, edits, dry_run)
        if isinstance(batch, CallToolResult):
            return batch
        job = await run_batch(ctx, wiki, batch, MAX_WAIT if wait else 0.0, idempotency_key)
        if isinstance(job, CallToolResult):
            return job
        result = job.result
        outcome = WriteOutcome(
            job_id=job.job_id,
            status=job.status,
            dry_run=job.dry_run,
            commit=result.commit if result else None,
            applied=result.applied if result else None,
        )
        if result is not None and result.diff is not None:
            outcome.diff, outcome.warnings = trimmed(result.diff), result.warnings
        return _answer(outcome)

    @register(title="Get job", annotations=READ_ONLY)
    async def get_job(
        job_id: JobId,
        ctx: Context,
        wait_seconds: Annotated[
            float,
            Field(
                ge=0, le=MAX_WAIT, description="Hold the answer until the job finishes, up to this many s."
            ),
        ] = 0,
    ) -> Annotated[CallToolResult, Job]:
        """Get a batch job: {job_id, wiki, status, dry_run, result: {commit, applied, diff?, warnings?},
        error: {code, message, index}}.

        Read-only. Use it when write_batch returned a job still queued or running (or was called with
        wait=false), or to see a check again. status is queued, running, succeeded, failed or cancelled.
        A failed job wrote nothing; its error names the failing edit's index (write_batch's description
        says what to do per code). wait_seconds (up to 60) answers as soon as the job finishes: prefer it
        to calling in a loop. Errors: JOB_NOT_FOUND (unknown or expired id),
        FORBIDDEN (another caller's job), RATE_LIMITED (wait, retry), INTERNAL (retry once).
        """
        return await _answered(backend_for(ctx).job(job_id, wait_seconds))

    @register(
        title="Cancel job",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def cancel_job(job_id: JobId, ctx: Context) -> Annotated[CallToolResult, Job]:
        """Cancel a batch job that has not started, so its edits are never applied; returns the job.

        Only a queued job can be cancelled, and a cancel cannot be undone (submit the batch again to redo
        it). Cancelling a job already cancelled succeeds again. Use it when the user changes their mind
        while a batch waits in the queue. Errors: NOT_CANCELLABLE (it is running or finished: its batch is
        or will be applied; see get_job), JOB_NOT_FOUND, FORBIDDEN (only its submitter or an admin may),
        RATE_LIMITED (wait, retry), INTERNAL (retry once).
        """
        return await _answered(backend_for(ctx).cancel(job_id))

    return server
