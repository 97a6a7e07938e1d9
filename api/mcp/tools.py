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
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import BaseModel, Field, ValidationError

from api.mcp.listing import EDIT_AS_WRITE_BATCH, OUTPUTS, input_schema
from worker.errors import MAX_EDIT_ERRORS
from worker.schema.answers import (
    Applied,
    BacklinkList,
    BatchWarning,
    Checks,
    EditError,
    ErrorInfo,
    FileCheck,
    FileDiff,
    Job,
    JobResult,
    JobStatus,
    LinkCheck,
    MatchList,
    Page,
    PageInfo,
    PageList,
    PageSet,
    Proposal,
    SectionInfo,
    WikiList,
)
from worker.schema.edits import OPS, Batch, Edit, Limits, PlanSubmission

MAX_WAIT = 60.0  # seconds write_batch, check_batch and get_job wait for a job at most
DIFF_CHARS = 60_000  # characters of diff an answer holds at most, for the paths asked
LISTED = 20  # changed files listed one by one up to this many; past it a folder's are summed (GROUPED on)
GROUPED = 4  # files of one folder summed into one line, once there are more than LISTED
FILE_LINES = 60  # lines of files at most: past it, the rest summed into one
WARNINGS_SHOWN = 50  # warnings an answer lists; past it one TRUNCATED says how many more of each code
PLAN_PREFIX = "plan-"  # a plan token names its dry run: plan-<job id> (worker.service.plans)
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

    async def read_pages(
        self, wiki: str, paths: list[str], sections: bool, cursor: str | None
    ) -> PageSet: ...

    async def backlinks(self, wiki: str, path: str, limit: int, cursor: str | None) -> BacklinkList: ...

    async def search(
        self,
        wiki: str,
        query: str,
        limit: int,
        regex: bool,
        case_sensitive: bool,
        prefix: str,
        cursor: str | None,
        *,
        outside_code: bool = False,
        multiline: bool = False,
        count: bool = False,
    ) -> MatchList: ...

    async def submit(
        self, wiki: str, batch: Batch | PlanSubmission, wait: float, idempotency_key: str | None
    ) -> Job: ...

    async def job(self, job_id: str, wait: float) -> Job: ...

    async def cancel(self, job_id: str) -> Job: ...

    async def proposal(self, proposal_id: str) -> Proposal: ...


BackendFor = Callable[[Context], Backend]
Lifespan = Callable[[MCPServer[Any]], AbstractAsyncContextManager[Any]]

INSTRUCTIONS = """\
wikiq keeps markdown wikis in git and changes them only in batches: one commit with every edit, or nothing. \
Find pages with list_wikis, list_pages, search_wiki and find_backlinks; read them with read_page, read_pages \
or page_outline (each gives the version an edit's expected_version needs). For a refactor (split, move, \
rename, fix links, update index and log) draft ONE batch, run check_batch and show the user its edit and \
file lines and warnings, then write_batch its plan. Zones: wiki/** any edit; raw/** create only; \
index.md, log.md and schema.md are never deleted or renamed."""

HINTS = {
    "VERSION_MISMATCH": "The page changed since you read it; error.details.current_version is its version "
    "now (current_section_version for a section op). If your edit does not depend on what changed (a "
    "section of its own, a delete), send the batch again with that version; else read the page again and "
    "redo the edit.",
    "VERSION_REQUIRED": "Add expected_version: the version read_page or list_pages gave, which holds for "
    "the whole batch, also after earlier edits changed the page (a section op may give "
    "expected_section_version from page_outline instead).",
    "OLD_NOT_FOUND": "Copy `old` exactly from read_page's text after its '---' line (never from "
    "line_numbers=true); replace_across is case-sensitive and reads a pattern over the whole page.",
    "OLD_NOT_UNIQUE": "Make `old` longer with surrounding text so it occurs once, or set replace_all=true "
    "(with expected_count to guard the number).",
    "COUNT_MISMATCH": "error.details.actual_count is the real count (for each, details.pages the first "
    "pages picked): correct expected_count, or the text or selector (for replace_across, check_batch's "
    "count per page is what it will replace).",
    "COUNT_REQUIRED": "An each that write_batch commits from edits needs expected_count: check_batch the "
    "batch without it (its answer counts the pages picked), then write_batch its plan; or give the count.",
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
    "PLAN_NOT_FOUND": "The plan is unknown, expired (10 minutes), already committed or not yours, or a "
    "failed check's sent without amend: run check_batch again (to fix a failed check: plan and amend).",
    "QUERY_TOO_COSTLY": "The read would cost more work than one request may buy (the message says which): "
    "narrow it (a prefix, fewer pages, a literal query instead of a pattern).",
    "BATCH_EMPTY": "Give at least one edit.",
    "INVALID_BATCH": "Fix the argument or field the message names and call again.",
    "WIKI_NOT_FOUND": "Call list_wikis for the ids you may use.",
    "JOB_NOT_FOUND": "Unknown or expired job id; use the job_id write_batch or check_batch returned.",
    "IDEMPOTENCY_CONFLICT": "That idempotency_key was used for another batch: use a new key.",
    "NOT_CANCELLABLE": "The job has started or finished: see its outcome with get_job.",
    "PROPOSAL_NOT_FOUND": "Unknown or expired proposal: use the id write_batch answered.",
    "PROPOSAL_NOT_OPEN": "The proposal was decided, is stale or expired: see its state with get_job.",
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

PROPOSAL_HINTS = {
    "checking": "Proposed, being checked: get_job with wait_seconds=60.",
    "open": "Proposed: it lands once a person approves it at review_url. Tell the user; get_job shows "
    "its state later.",
    "failed": "The proposal failed (error): fix the edits and write_batch them again.",
    "stale": "The wiki changed before it landed: read the pages again and write_batch a new proposal.",
}

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
# check_batch changes no page, yet each call makes a new job and plan: read-only, not idempotent
CHECKS = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

WikiId = Annotated[str, Field(pattern=WIKI_PATTERN, description="A list_wikis id.")]
PagePath = Annotated[str, Field(min_length=1, max_length=4096, description="File path, e.g. wiki/redis.md.")]
JobId = Annotated[
    str, Field(min_length=1, max_length=64, description="A job_id write_batch or check_batch gave.")
]
Message = Annotated[
    str, Field(min_length=1, max_length=10_000, description="Commit message: what the batch does and why.")
]
IdempotencyKey = Annotated[
    str | None,
    Field(
        max_length=256,
        description="Send one: a retry with it and the same batch answers the same job, no second commit.",
    ),
]


UNFINISHED = "The job is still {status}: call get_job with this job_id and wait_seconds=60 until it finishes."
DiffPaths = Annotated[
    list[str] | None,
    Field(max_length=100, description="Paths or prefixes whose diffs to add ('' all)."),
]


class Invariants(BaseModel):
    """A dry run's checks as an agent reads them: ``Checks`` without its file list (``files`` lines say
    each file)."""

    links: LinkCheck | None = Field(
        description="links resolving to no file in the pages the batch may affect, before and after it; "
        "null when not counted"
    )
    code_changed: int | None = Field(
        description="code blocks and inline code spans changed pages gained or lost; null when not counted"
    )
    unnamed: int = Field(description="changed files no edit named (their links were rewritten)")
    unchecked: list[str] | None = Field(
        default=None, exclude_if=lambda v: not v, description="the parts not computed, and why"
    )

    @classmethod
    def of(cls, checks: Checks) -> "Invariants":
        """``checks`` without its files."""
        return cls(
            links=checks.links,
            code_changed=checks.code_changed,
            unnamed=checks.unnamed,
            unchecked=checks.unchecked,
        )


def _edit_lines() -> Any:
    """The field of an answer's ``edit_lines``."""
    return Field(default=None, description="a line per edit: index, what it matched and changed")


def _file_lines() -> Any:
    """The field of an answer's ``file_lines``."""
    return Field(
        default=None,
        description="a line per changed file: +added -removed lines, links rewritten, code changed, "
        "unnamed (no edit named it); past 20 files, a folder's files that changed alike in one",
    )


class ProposalOutcome(BaseModel):
    """A proposal: a batch checked and kept until a reviewer approves it (then it lands) or not."""

    id: str = Field(description="its id")
    state: str = Field(description="checking, open, failed, approved, landed, stale, rejected, expired")
    review_url: str = Field(description="its review page, for a person")


class WriteOutcome(BaseModel):
    """Answer of write_batch: the job and, once it succeeded, its commit and summary (with a plan, the
    files and checks its dry run found: a plan commits exactly what was checked)."""

    job_id: str = Field(description="the job; get_job follows it")
    status: JobStatus = Field(description="queued, running, succeeded, failed or cancelled")
    commit: str | None = Field(default=None, description="the new commit; null for an unfinished job")
    edits: list[str] | None = _edit_lines()
    files: list[str] | None = _file_lines()
    checks: Invariants | None = Field(default=None, description="a plan's checks, as its dry run found them")
    proposal: ProposalOutcome | None = Field(
        default=None,
        description="a propose-only token's batch: a proposal, landing once a person approves it",
    )
    hint: str | None = Field(default=None, description="what to do while the job is queued or running")


class CheckOutcome(BaseModel):
    """Answer of check_batch: what the batch would do (a line per edit and per changed file), its
    checks, warnings, the diffs asked for, and the plan write_batch commits."""

    job_id: str = Field(description="the dry-run job; get_job shows it again")
    status: JobStatus = Field(description="succeeded when every check passed (else the result is an error)")
    edits: list[str] | None = _edit_lines()
    files: list[str] | None = _file_lines()
    checks: Invariants | None = Field(default=None, description="what to verify instead of reading diffs")
    warnings: list[BatchWarning] | None = Field(
        default=None,
        description="LINK_BROKEN, NOT_IN_INDEX, NOT_REWRITTEN, OVERWRITES_BATCH_EDIT; empty when clean",
    )
    diff: list[FileDiff] | None = Field(
        default=None, description="the unified diffs asked for, in path order"
    )
    plan: str | None = Field(default=None, description="write_batch(plan=...) commits exactly this")
    hint: str | None = Field(default=None, description="what to do while the job is queued or running")


class JobOutcome(BaseModel):
    """Answer of get_job: a job's state and, once it finished, check_batch's summary of it (a dry run's
    checks and warnings too), or its error."""

    job_id: str = Field(description="the job")
    wiki: str | None = Field(default=None, description="the wiki")
    status: JobStatus = Field(description="queued, running, succeeded, failed or cancelled")
    dry_run: bool = Field(default=False, description="true for check_batch's jobs")
    commit: str | None = Field(default=None, description="the commit made; null for a dry run")
    edits: list[str] | None = _edit_lines()
    files: list[str] | None = _file_lines()
    checks: Invariants | None = Field(default=None, description="a dry run's checks")
    warnings: list[BatchWarning] | None = Field(default=None, description="a dry run's warnings")
    diff: list[FileDiff] | None = Field(default=None, description="a dry run's diffs asked for")
    plan: str | None = Field(default=None, description="a dry run's plan, to its submitter")
    error: ErrorInfo | None = Field(default=None, description="a failed job's error: it wrote nothing")
    proposal: ProposalOutcome | None = Field(default=None, description="its proposal")
    hint: str | None = Field(default=None, description="what to do while the job is queued or running")


class Outline(BaseModel):
    """Answer of page_outline: a page's version and its heading tree."""

    path: str = Field(description="the page")
    version: str = Field(description="the page's version (expected_version)")
    commit: str | None = Field(default=None, description="the commit it was read at")
    sections: list[SectionInfo] = Field(
        description="each heading: level, heading, path, address (a section op's heading), line, end_line, "
        "version (a section op's expected_section_version)"
    )


class Listing(BaseModel):
    """Answer of list_pages: the files' names by folder, or with versions=true each file's version and size;
    next_cursor null when nothing is left."""

    folders: dict[str, list[str]] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="each folder ('' for the top) with the names of its files, in path order",
    )
    pages: list[PageInfo] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="versions=true: {path, version, size}"
    )
    next_cursor: str | None = Field(description="not null: call again with cursor=next_cursor for more")


def _text(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _answer(model: BaseModel, text: str | None = None) -> CallToolResult:
    data = model.model_dump(mode="json", exclude_unset=True)
    return CallToolResult(
        content=[TextContent(text=_text(data) if text is None else text)], structured_content=data
    )


def _refusal(error: ErrorInfo, **extra: Any) -> CallToolResult:
    data = {"error": error.model_dump(mode="json"), **extra, "hint": _hint(error)}
    return CallToolResult(content=[TextContent(text=_text(data))], structured_content=data, is_error=True)


def _hint(error: ErrorInfo) -> str:
    """What to do about ``error``: its code's hint; for a batch with several failing edits (or edits left
    unchecked), how to retry once, then the hint of each code met. A failed check's (``error.plan``) says
    to resend only the fixed edits, amending it."""
    codes = list(dict.fromkeys([error.code, *(each.code for each in error.errors or ())]))
    resend = "send the batch again"
    if error.plan is not None:
        resend = 'check_batch again with plan=error.plan and amend={"<index>": fixed edit} for those only'
    if len(error.errors or ()) <= 1 and error.unchecked is None:
        own = HINTS.get(error.code, "")
        return own if error.plan is None else f"{own} Then {resend}.".lstrip()
    advice = (
        f"Fix every edit error.errors lists, then {resend}: each was checked as if the failing "
        "edits before it were left out, and one whose message says it may follow from an earlier failure "
        "may pass once that one is fixed."
    )
    if error.unchecked is not None:
        advice += f" The edits from {error.unchecked} on were not checked: they may fail too."
    return " ".join([advice, *(f"{code}: {HINTS[code]}" for code in codes if code in HINTS)])


def invalid_arguments(exc: ValidationError) -> CallToolResult:
    """The refusal for arguments that do not fit a tool's schema: INVALID_BATCH naming the field (and the
    failing edit's index for an edit); BATCH_EMPTY or TOO_MANY_EDITS for a list of edits of the wrong
    length. When edits fail, ``errors`` lists the first error and then each other failing edit's first."""
    found: dict[int | None, EditError] = {}
    for error in [dict(each) for each in exc.errors()] or [{}]:
        refused = _argument_error(error)
        if refused.index not in found and len(found) < MAX_EDIT_ERRORS:
            found[refused.index] = refused
    first = next(iter(found.values()))
    listed = list(found.values()) if any(index is not None for index in found) else None
    return _refusal(ErrorInfo(code=first.code, message=first.message, index=first.index, errors=listed))


def _argument_error(error: dict[str, Any]) -> EditError:
    """One validation error as the refusal words it: the field, and the edit's index for an edit."""
    loc = [str(part) for part in error.get("loc", ())]
    index = None
    if len(loc) >= 2 and loc[0] in ("edits", "amend") and loc[1].isdigit():  # amend's keys are indexes
        index = int(loc[1])
        if len(loc) > 2 and loc[2] in OPS:  # the discriminated union names the op: drop it
            loc = loc[:2] + loc[3:]
    where = ".".join(loc) or "arguments"
    kind = str(error.get("type", ""))
    message = "unknown field" if kind == "extra_forbidden" else str(error.get("msg", "invalid"))
    code = "INVALID_BATCH"
    if loc == ["edits"] and kind in ("too_short", "too_long"):
        code = "BATCH_EMPTY" if kind == "too_short" else "TOO_MANY_EDITS"
    return EditError(code=code, message=f"{where}: {message}", index=index)


UNKNOWN_ARGUMENTS = {
    ("write_batch", "dry_run"): "write_batch always commits: check a batch with check_batch instead",
}


class WikiqServer(MCPServer):
    """The SDK's server, listing lean schemas (``api.mcp.listing``) and answering arguments that fail the
    tool's signature like every other refusal."""

    async def list_tools(self) -> list[MCPTool]:
        """The tools, each with its lean argument schema and its short answer schema."""
        listed = await super().list_tools()
        return [
            tool.model_copy(
                update={
                    "input_schema": input_schema(
                        tool.input_schema, EDIT_AS_WRITE_BATCH if tool.name == "check_batch" else None
                    ),
                    "output_schema": OUTPUTS[tool.name],
                }
            )
            for tool in listed
        ]

    _arguments: dict[str, set[str]] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """The tool's answer; INVALID_BATCH for an argument the tool does not take (an unknown argument is
        never ignored: ``dry_run`` given to write_batch must not commit)."""
        if self._arguments is None:
            self._arguments = {
                tool.name: set(tool.input_schema["properties"]) for tool in await self.list_tools()
            }
        unknown = sorted(set(arguments) - self._arguments.get(name, set(arguments)))
        if unknown:
            advice = UNKNOWN_ARGUMENTS.get((name, unknown[0]), "see the tool's input schema")
            return _refusal(
                ErrorInfo(code="INVALID_BATCH", message=f"{unknown[0]}: unknown argument; {advice}")
            )
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


def wanted(diff: list[FileDiff] | None, prefixes: Sequence[str]) -> list[FileDiff]:
    """The entries of ``diff`` whose path or old path starts with one of ``prefixes`` (a path names its
    file, a folder its files, ``""`` all), ``trimmed`` to ``DIFF_CHARS``."""
    chosen = [
        entry
        for entry in diff or []
        if any(entry.path.startswith(p) or (entry.old_path or "\0").startswith(p) for p in prefixes)
    ]
    return trimmed(chosen) or []


def summary(
    result: JobResult, edits: Sequence[Edit] | None = None, diff: Sequence[str] | None = None
) -> dict[str, Any]:
    """The summary fields of an answer about ``result``: ``edits`` (``edit_lines``) and, for a dry run,
    ``files`` (``file_lines``), ``checks``, ``warnings`` (``shown_warnings``) and ``plan``; ``diff`` only
    when ``diff`` names paths or prefixes (``wanted``)."""
    out: dict[str, Any] = {"edits": edit_lines(result.applied, edits)}
    if result.checks is not None:
        out["files"] = file_lines(result.checks.files)
        out["checks"] = Invariants.of(result.checks)
    if result.warnings is not None:
        out["warnings"] = shown_warnings(result.warnings)
    if diff is not None:
        out["diff"] = wanted(result.diff, diff)
    if result.plan is not None:
        out["plan"] = result.plan
    return out


def _fill(outcome: BaseModel, fields: dict[str, Any]) -> None:
    """Set each of ``fields`` the answer model has (set fields are the ones answered)."""
    for name, value in fields.items():
        if name in type(outcome).model_fields:
            setattr(outcome, name, value)


def edit_lines(applied: list[Applied], edits: Sequence[Edit] | None = None) -> list[str]:
    """A line per edit (every edit of ``edits`` when given, else those ``applied`` names), from its applied
    entries: ``"<index> <op> <path>[ -> <new path>]"``, several paths of one op counted under their common
    folder, a replace_across's occurrences, ``links N in M pages`` for its rewrite_links entries; with
    ``edits``, the heading a section op names and the front matter keys an edit sets or removes. An edit
    that changed nothing says so."""
    entries: dict[int, list[Applied]] = {}
    for entry in applied:
        entries.setdefault(entry.index, []).append(entry)
    indexes = range(len(edits)) if edits is not None else sorted(entries)
    lines = []
    for index in indexes:
        edit = edits[index] if edits is not None and index < len(edits) else None
        parts = _edit_parts(entries.get(index, []))
        detail = _detail(edit) if edit is not None else ""
        if not parts:
            parts = [f"{edit.op if edit is not None else ''}{detail}: no change".lstrip()]
        else:
            parts[0] += detail
        lines.append(f"{index} " + ", ".join(parts))
    return lines


def _edit_parts(entries: list[Applied]) -> list[str]:
    """What one edit's applied entries say, an op at a time in the order they first appear."""
    made = {e.new_path for e in entries if e.op != "rename" and e.new_path is not None}  # extract's page
    by_op: dict[str, list[Applied]] = {}
    for entry in entries:
        if not (entry.op == "create" and entry.path in made):  # its create entry names it again
            by_op.setdefault(entry.op, []).append(entry)
    parts = []
    for op, group in by_op.items():
        count = sum(e.count or 0 for e in group)
        if op == "rewrite_links":
            parts.append(f"links {count} in {len(group)} pages")
            continue
        text = f"{op} {_paths(group)}"
        if op == "replace_across":
            text += f" ({count} replaced)"
        parts.append(text)
    return parts


def _paths(group: list[Applied]) -> str:
    """The paths of one op's entries: each of up to three (``-> new path`` for a move, then its count when
    it has one), else how many under their common folder (and the one they moved to)."""
    if len(group) <= 3:
        return ", ".join(
            e.path + (f" -> {e.new_path}" if e.new_path else "") + (f" {e.count}" if e.count else "")
            for e in group
        )
    text = f"{len(group)} files"
    old = _common_folder([e.path for e in group])
    if old:
        text += f" in {old}"
    news = [e.new_path for e in group if e.new_path]
    if len(news) == len(group):
        text += f" -> {_common_folder(news) or '(several folders)'}"
    return text


def _common_folder(paths: list[str]) -> str:
    """The deepest folder (``a/b/``) holding every one of ``paths``, or ``""``."""
    parts = [path.split("/")[:-1] for path in paths]
    common: list[str] = []
    for names in zip(*parts, strict=False):
        if len(set(names)) > 1:
            break
        common.append(names[0])
    return "".join(f"{name}/" for name in common)


def _detail(edit: Edit) -> str:
    """What an edit names beyond its paths: a section op's heading (``-> new heading``), the front matter
    keys it sets and removes."""
    text = ""
    heading = getattr(edit, "heading", None)
    if isinstance(heading, str):
        text += f" {heading!r}"
        new_heading = getattr(edit, "new_heading", None)
        if isinstance(new_heading, str):
            text += f" -> {new_heading!r}"
    keys = getattr(edit, "set", None)
    if keys:
        text += " set " + ", ".join(keys)
    gone = getattr(edit, "unset", None)
    if gone:
        text += " unset " + ", ".join(gone)
    return text


def file_lines(files: list[FileCheck]) -> list[str]:
    """A line per changed file (``_file_line``); past ``LISTED`` files, the files of one folder that
    changed alike (created, modified, moved or deleted, named by an edit or not, no code changed) are one
    line (``_folder_line``) once there are ``GROUPED`` of them, and past ``FILE_LINES`` lines the rest
    are one."""
    if len(files) <= LISTED:
        return [_file_line(file) for file in files]
    alike: dict[tuple[str, str, bool], list[FileCheck]] = {}
    for file in files:
        if not (file.code_added or file.code_removed):
            alike.setdefault((file.path.rpartition("/")[0], file.change, file.named), []).append(file)
    summed = {id(file): key for key, group in alike.items() if len(group) >= GROUPED for file in group}
    lines: list[tuple[str, list[FileCheck]]] = []
    for file in files:
        key = summed.get(id(file))
        if key is None:
            lines.append((_file_line(file), [file]))
        elif alike[key][0] is file:  # the group's line, in the place of its first file
            folder = key[0]
            lines.append((_folder_line(f"{folder}/*" if folder else "*", alike[key]), alike[key]))
    if len(lines) <= FILE_LINES:
        return [line for line, _ in lines]
    rest = [file for _, group in lines[FILE_LINES - 1 :] for file in group]
    return [line for line, _ in lines[: FILE_LINES - 1]] + [_folder_line("and more:", rest)]


def _file_line(file: FileCheck) -> str:
    """``<path>[ <- <old path>][ created|deleted] +<added> -<removed>[, links N][, code +A -R][,
    unnamed]``."""
    text = file.path + (f" <- {file.old_path}" if file.old_path else "")
    if file.change in ("created", "deleted"):
        text += f" {file.change}"
    if file.added is not None:
        text += f" +{file.added} -{file.removed}"
    if file.links:
        text += f", links {file.links}"
    if file.code_added or file.code_removed:
        text += f", code +{file.code_added} -{file.code_removed}"
    return text + ("" if file.named else ", unnamed")


def _folder_line(label: str, files: list[FileCheck]) -> str:
    """``<label> N files[ (K moved, ...)] +<added> -<removed>[, links N][, U unnamed]``; files whose lines
    were not counted say how many."""
    changes = Counter(file.change for file in files if file.change != "modified")
    text = f"{label} {len(files)} files"
    if changes:
        text += " (" + ", ".join(f"{n} {change}" for change, n in changes.items()) + ")"
    counted = [file for file in files if file.added is not None]
    text += f" +{sum(f.added or 0 for f in counted)} -{sum(f.removed or 0 for f in counted)}"
    if len(counted) < len(files):
        text += f" ({len(files) - len(counted)} not diffed)"
    links = sum(file.links or 0 for file in files)
    if links:
        text += f", links {links}"
    unnamed = sum(not file.named for file in files)
    return text + (f", {unnamed} unnamed" if unnamed else "")


def shown_warnings(warnings: list[BatchWarning]) -> list[BatchWarning]:
    """``warnings`` up to ``WARNINGS_SHOWN``, then one ``TRUNCATED`` counting the rest by code."""
    if len(warnings) <= WARNINGS_SHOWN:
        return warnings
    rest = Counter(warning.code for warning in warnings[WARNINGS_SHOWN:])
    more = ", ".join(f"{n} {code}" for code, n in rest.items())
    message = f"{more} more: fix these and check again"
    return [*warnings[:WARNINGS_SHOWN], BatchWarning(code="TRUNCATED", path="", message=message)]


async def plan_checks(backend: Backend, plan: str) -> Checks | None:
    """The checks of the dry run the plan token ``plan`` names (what its commit changes: a plan commits
    exactly what was checked), or None when that dry run is no longer kept."""
    if not plan.startswith(PLAN_PREFIX):
        return None
    try:
        checked = await backend.job(plan.removeprefix(PLAN_PREFIX), 0)
    except Refused:
        return None
    return checked.result.checks if checked.result is not None else None


async def _answered(call: Awaitable[BaseModel]) -> CallToolResult:
    """The tool result of a backend call: its answer, or the refusal with a hint."""
    try:
        return _answer(await call)
    except Refused as exc:
        return _refusal(exc.error)


def _read(model: BaseModel, text: str | None = None, drop: str = "") -> CallToolResult:
    """A read's tool result: the answer with ``next_cursor`` always there (null: nothing more, the one way
    a read says it was cut), the field ``drop`` left out."""
    data = model.model_dump(mode="json", exclude_unset=True)
    data.pop(drop, None)
    data["next_cursor"] = getattr(model, "next_cursor", None)
    return CallToolResult(
        content=[TextContent(text=_text(data) if text is None else text)], structured_content=data
    )


def _head(page: Page) -> str:
    return f"{page.path} version={page.version} size={page.size} commit={page.commit}"


def _exact(page: Page) -> str:
    """A page as text to copy from: a header line (and the outline, when asked), a line ``---``, then
    the content exactly."""
    if page.encoding != "utf-8":
        return f"{_head(page)}\n(not UTF-8 text: {page.size} bytes, base64 in the structured content)"
    return _head(page) + _outline_text(page.sections) + "\n---\n" + page.content


def _numbered(page: Page) -> str:
    """A page as text to read: a header line, the lines numbered, the outline when asked."""
    head = _head(page)
    if page.encoding != "utf-8":
        return f"{head}\n(not UTF-8 text: {page.size} bytes, base64 in the structured content)"
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
Errors (nothing written; error.errors: each failing edit {index (0-based), code, message}; \
hint: what to do): VERSION_MISMATCH (details.current_version), COUNT_MISMATCH \
(details.actual_count), else the failed check's code (OLD_NOT_FOUND...); \
TOO_MANY_EDITS, BATCH_TOO_LARGE, BATCH_TOO_COSTLY: split; PLAN_STALE, PLAN_NOT_FOUND: check again; \
FORBIDDEN: ask the user; RATE_LIMITED, INTERNAL: retry with the same idempotency_key."""

LINK_RULE = """\
Links (for rewrite_links, find_backlinks, LINK_BROKEN; never in code): a markdown link \
[t](../b/c.md) is relative to the linking page's folder (/x.md: from the root); .md is added when the path \
alone is no file. A wikilink [[T]] (also [[T#heading|label]], ![[T]]) tries T.md, then T: [[/T]] is \
exactly that path from the root; [[dir/name]] is that path from the root, else under wiki/, else any file \
whose path ends with /dir/name; a bare [[name]] is any file name.md in any folder. Two matches: \
ambiguous (broken); case is ignored only when the exact case finds nothing. With \
wiki/a/redis.md and wiki/b/redis.md: {examples}."""


WRITE_BATCH = (
    """\
Apply typed edits to a wiki as ONE git commit on main: every edit or none.

Call it only after the user agreed (many-page edits: check_batch, then commit its plan). Limits: \
{max_edits} edits, {max_content} sent, {max_file} a file, {max_output} written (rewrites included).

Edits apply in order, each on what earlier ones left:
- create {{path, content, encoding?}}: a new file (encoding base64: bytes).
- overwrite {{path, content, encoding?, expected_version}}: the whole new content.
- replace {{path, old, new, expected_version, replace_all?, expected_count?}}: old matches byte for byte, \
once unless replace_all.
- delete {{path, expected_version, redirect_links_to?}}: redirect_links_to=a page takes its links.
- rename {{path, new_path, expected_version, rewrite_links?}}: a file, or a folder (no version) and all \
in it; rewrite_links=true: links to it follow, its own relative links are fixed.
- append {{path, content, expected_version?}}: text at the end.
- frontmatter {{path, set?, unset?, expected_version?}}: merge keys into the YAML front matter (added if \
none).
- section ops {{path, heading, ...}}: replace_section, append_section {{content}}; insert_section_after \
{{new_heading, level, content?}}; remove_section; rename_section {{new_heading, rewrite_links? (its links \
follow, same-page too)}}. heading is page_outline's address (its text if unique); new_heading is text, \
no #; a section includes its subsections; content has no heading line. Guard (one of): expected_version or \
expected_section_version (page_outline's sections[].version).
- merge_pages {{path, pages, title?, headings?}}: the pages' text, front matter dropped, appended to \
path in order, headings one level deeper unless headings=keep; a new path starts # title (default the \
first page's); pages deleted, links follow.
- extract_section {{path, heading, new_path, title?, leave_link?}}: the section becomes new page \
new_path (# title); links follow; leave_link=true leaves a [[link]] to it; guard as section ops.
- retarget_links {{from, to}}: each a page or page#Heading (wiki/a.md#Old): links to from \
([[a#Old]], [x](a.md#old)) point to to.
- replace_across {{prefix, old or pattern, new, expected_count?, outside_code?, select?}}: every page \
under prefix ('' for all; never raw/) passing select (each's tests but prefix). old is exact, \
case-sensitive; outside_code=true (old only): prose only, never code, HTML blocks, front matter or link \
targets (labels are prose). pattern is RE2 over the whole page ((?m) for ^ and $ per line), new may use \\1. \
expected_count: the total replaced (search_wiki count=true).
- each {{select {{prefix, glob?, frontmatter?, contains?, outside_code?}}, expected_count?, do, \
do's fields, flat}}: do on every .md page under prefix (subfolders too) passing each test: frontmatter \
{{set?, unset?}}, append {{content}}, delete {{redirect_links_to?}} or rename {{new_path, rewrite_links?}} \
(into folder new_path, subfolders flattened: same names PATH_EXISTS). glob: whole path, * in a folder, \
** across; frontmatter: equal values, {{"status": "archived"}}. expected_count: pages selected, the \
guard; unknown: check_batch without it, commit its plan (edits alone: COUNT_REQUIRED).

expected_version: the version you read (read_page, list_pages); it holds for the whole batch, also after \
earlier edits changed the page. Required where listed without ? if the file exists at the start; \
ignored for a path the batch created; other ops and link rewrites take none.

Zones: wiki/** any op; raw/** create only; index.md, log.md, schema.md: never delete or rename.

"""
    + LINK_RULE.replace("{", "{{").replace("}", "}}").replace("{{examples}}", "{examples}")
    + """

Returns {{job_id, status, commit, edits}}: a line per edit (with a plan, also its files and checks); \
queued or running (after 60 s, or wait=false): get_job.

"""
    + BATCH_ERRORS.replace("{", "{{").replace("}", "}}")
)

CHECK_BATCH = """\
Dry-run a batch: every check write_batch makes, on the head now, and what it would change; \
commits nothing.

Run it before write_batch for many-page edits (each, replace_across, merge_pages, moves, link \
rewrites); show the user its edits, files and warnings. write_batch {{plan}} then commits exactly \
that, or fails PLAN_STALE if a page it touches changed since (PLAN_NOT_FOUND once expired: 10 minutes \
by default). An each without expected_count takes every page it selects now (its edit line counts them, \
a diff names each); the plan guards that set. To fix a failed check, send only the fixed edits: \
plan=error.plan and amend; a new plan comes back. Edits, versions, zones, limits: as write_batch.

Returns {{job_id, status, edits, files, checks, warnings, plan, diff?}}; queued or running (after 60 s): \
get_job. A line per edit and per changed file (+/- lines, links rewritten, code changed, unnamed: no edit \
named it); checks {{links {{broken_before, broken_after, ambiguous_after}}, code_changed, unnamed}}: verify \
with these, not diffs. warnings {{code, path, line?, link?, message}}, never blocking: LINK_BROKEN (a link \
to no file: fix it or add the page; #headings are not checked), NOT_IN_INDEX, NOT_REWRITTEN (raw/), \
OVERWRITES_BATCH_EDIT (an overwrite drops an earlier edit's change). A failed check is an error result \
{{error {{code, message, errors, plan}}, hint}}, as write_batch's."""


# The link rule's examples: wikilinks in LINK_PAGE among LINK_FILES, each with the file it resolves to or
# why it is broken. tests/unit/test_mcp_tools.py checks every one against the engine. A wikilink resolves
# alike from any page, so the description does not name LINK_PAGE.
LINK_FILES = ("wiki/a/redis.md", "wiki/b/redis.md", "wiki/a/x.md")
LINK_PAGE = "wiki/a/x.md"
LINK_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("[[redis]]", "ambiguous"),
    ("[[a/redis]]", "wiki/a/redis.md"),
)


def link_examples() -> str:
    """``LINK_EXAMPLES`` in words, as the write_batch description shows them."""
    return ", ".join(f"{link} is {target}" for link, target in LINK_EXAMPLES)


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
        description=f"1 to {limits.max_edits} edits, in order; ops: write_batch's description.",
    )
    Edits = Annotated[list[Edit], edits_field]
    Amend = Annotated[
        dict[str, Edit] | None,
        Field(
            description='With plan: {"2": edit} replaces edit 2 (0-based, as error.errors[].index); '
            "a key equal to the edit count appends; no edit can be removed."
        ),
    ]

    def register(**options: Any) -> Callable[[Callable[..., Any]], Any]:
        """``server.tool(**options)``, the docstring dedented and the limits written into it."""

        def add(fn: Callable[..., Any]) -> Any:
            # paragraphs on one line each: a line break costs two characters of JSON, a blank one
            doc = re.sub(r"(?<=\S)\n(?=\S)", " ", inspect.cleandoc(fn.__doc__ or ""))
            doc = doc.replace("{max_file}", sizes["max_file"])
            fn.__doc__ = doc.replace("{max_paths}", str(MAX_PAGES_READ))
            return server.tool(**options)(fn)

        return add

    @register(title="List wikis", annotations=READ_ONLY)
    async def list_wikis(ctx: Context) -> Annotated[CallToolResult, WikiList]:
        """List the wikis you may read, each with its head commit: {wikis: [{id, head}]}.

        Call it first: every wiki argument is an id from here. head is main's commit (null for
        an empty wiki). A wiki missing here does not exist or is hidden from your token (WIKI_NOT_FOUND
        elsewhere); writing may still be FORBIDDEN. Errors: UNAUTHORIZED (tell the user). Any tool may
        answer RATE_LIMITED or INTERNAL: wait, retry.
        """
        return await _answered(backend_for(ctx).list_wikis())

    @register(title="List pages", annotations=READ_ONLY)
    async def list_pages(
        wiki: WikiId,
        ctx: Context,
        prefix: Annotated[
            str, Field(max_length=4096, description="Path prefix (no glob), e.g. wiki/db/.")
        ] = "",
        limit: Annotated[int, Field(ge=1, le=10_000, description="At most this many files.")] = 1000,
        cursor: Annotated[str | None, Field(max_length=8192, description="A next_cursor.")] = None,
        versions: Annotated[bool, Field(description="Add versions and sizes.")] = False,
    ) -> Annotated[CallToolResult, Listing]:
        """List a wiki's files under prefix (subfolders too) by folder: {folders: {"wiki/db/": ["redis.md"]},
        next_cursor}; versions=true: {pages: [{path, version, size}], next_cursor}.

        See what exists before planning edits (text: search_wiki; links: find_backlinks). next_cursor not
        null: repeat the call with cursor=next_cursor. Errors: INVALID_BATCH (a foreign cursor: drop it).
        """
        try:
            found = await backend_for(ctx).list_pages(wiki, prefix, limit, cursor)
        except Refused as exc:
            return _refusal(exc.error)
        if versions:
            return _answer(Listing(pages=found.pages, next_cursor=found.next_cursor))
        folders: dict[str, list[str]] = {}
        for page in found.pages:
            folder, _, name = page.path.rpartition("/")
            folders.setdefault(folder and folder + "/", []).append(name)
        return _answer(Listing(folders=folders, next_cursor=found.next_cursor))

    @register(title="Read page", annotations=READ_ONLY)
    async def read_page(
        wiki: WikiId,
        path: PagePath,
        ctx: Context,
        sections: Annotated[
            bool, Field(description="Also return the heading tree, as page_outline.")
        ] = False,
        line_numbers: Annotated[bool, Field(description="Numbered lines, for reading only.")] = False,
    ) -> Annotated[CallToolResult, Page]:
        """Read one file at a wiki's head: {path, version, content, encoding, size, commit, sections?}.

        Read a page before you change it: version is the edit's expected_version. The text answer is a header
        line (path, version, size, commit; the outline with sections=true), a line ---, then the content
        exactly as stored: copy a replace's old from it. line_numbers=true numbers the lines instead, for
        reading only. The structured content is always exact; a file not valid UTF-8
        comes as encoding base64. Several: read_pages; headings: page_outline. Errors: NOT_FOUND (see
        list_pages), INVALID_PATH, BATCH_TOO_LARGE (over {max_file}: suggest a clone).
        """
        try:
            page = await backend_for(ctx).read_page(wiki, path, sections)
        except Refused as exc:
            return _refusal(exc.error)
        return _answer(page, _numbered(page) if line_numbers else _exact(page))

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
        sections: Annotated[bool, Field(description="As read_page's.")] = False,
        line_numbers: Annotated[bool, Field(description="As read_page's.")] = False,
        cursor: Annotated[str | None, Field(max_length=8192, description="A next_cursor.")] = None,
    ) -> Annotated[CallToolResult, PageSet]:
        """Read many files at a wiki's head, at one commit: {commit, pages: [page...], errors: [{path, code,
        message}], next_cursor}.

        Each page as read_page answers it. A path missing
        (NOT_FOUND), invalid (INVALID_PATH) or over {max_file} (BATCH_TOO_LARGE) is an entry of errors. Past
        {max_file} in all, the rest is unread: next_cursor not null: repeat the call with cursor=next_cursor.
        Errors: INVALID_BATCH (over {max_paths} paths).
        """
        try:
            found = await backend_for(ctx).read_pages(wiki, paths, sections, cursor)
        except Refused as exc:
            return _refusal(exc.error)
        if not line_numbers:
            return _read(found)
        text = "\n\n".join(_numbered(page) for page in found.pages)
        if found.errors:
            text += "\n\nnot read: " + "; ".join(f"{e.path}: {e.code}" for e in found.errors)
        if found.next_cursor:
            text += f"\nnext_cursor: {found.next_cursor}"
        return _read(found, text)

    @register(title="Page outline", annotations=READ_ONLY)
    async def page_outline(wiki: WikiId, path: PagePath, ctx: Context) -> Annotated[CallToolResult, Outline]:
        """Read a page's heading tree: {path, version, commit, sections: [{level, heading, path (its
        heading trail 'A > B', not a file), address, line, end_line, version}]}.

        Use it before a section op: send a section's address (its shortest unique trail, e.g. 'Paging'
        or 'Ops > Paging') as the op's heading and its version as expected_section_version, so edits of
        other sections do not conflict (or the page's version as expected_version). Headings inside code
        are not headings; lines are 1-based, end_line inclusive. Errors: NOT_FOUND (see list_pages),
        INVALID_PATH.
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
        regex: Annotated[bool, Field(description="query is an RE2 pattern.")] = False,
        case_sensitive: Annotated[bool, Field(description="Match letter case (count=true: always).")] = False,
        prefix: Annotated[str, Field(max_length=4096, description="Path prefix, e.g. wiki/db/.")] = "",
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many lines (or pages).")] = 50,
        cursor: Annotated[str | None, Field(max_length=8192, description="A next_cursor.")] = None,
        outside_code: Annotated[bool, Field(description="Prose only, as replace_across's.")] = False,
        multiline: Annotated[bool, Field(description="A match may span lines.")] = False,
        count: Annotated[bool, Field(description="Count per page, no lines.")] = False,
    ) -> Annotated[CallToolResult, MatchList]:
        """Find lines at a wiki's head: {matches: [{path, line, text, version}], next_cursor}; count=true:
        {matches: [], pages: [{path, count}], total, next_cursor}.

        query is literal text (ASCII case ignored unless case_sensitive) or, with regex, an RE2 pattern (^
        and $ per line; a match stays within one line unless multiline). One match per line, by path then
        line; version is the page's; a very long line is cut around the match (truncated: true).

        count=true counts, per page, what replace_across with old=query (regex: pattern=query), the same
        prefix and outside_code would replace: every occurrence, always case-sensitive, a pattern over the
        whole page ((?m) for ^ $ per line), raw/ left out. total, over all pages, listed or not, is its
        expected_count.

        next_cursor not null: repeat the call with cursor=next_cursor. Errors: PATTERN_INVALID,
        INVALID_BATCH (a multi-line query, a foreign cursor, count with regex and outside_code).
        """
        try:
            found = await backend_for(ctx).search(
                wiki,
                query,
                limit,
                regex,
                case_sensitive,
                prefix,
                cursor,
                outside_code=outside_code,
                multiline=multiline,
                count=count,
            )
        except Refused as exc:
            return _refusal(exc.error)
        return _read(found)

    @register(title="Find backlinks", annotations=READ_ONLY)
    async def find_backlinks(
        wiki: WikiId,
        path: PagePath,
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=10_000, description="At most this many links.")] = 1000,
        cursor: Annotated[str | None, Field(max_length=8192, description="A next_cursor.")] = None,
    ) -> Annotated[CallToolResult, BacklinkList]:
        """List every link to a page at a wiki's head: {path, version, commit, backlinks: [{path, line, text,
        version}], next_cursor}.

        Every link outside code that resolves to the page (rule: write_batch's Links), with or without a
        #heading (not the page's own #links), by page and line, as written, with the linking page's version.
        Before a rename, split or delete: rewrite_links, redirect_links_to, extract_section, retarget_links
        fix them (never in raw/). next_cursor not null: repeat the call with cursor=next_cursor. Errors:
        NOT_FOUND (see list_pages; links to a missing page: search_wiki), INVALID_PATH, INVALID_BATCH (a
        foreign cursor: drop it).
        """
        try:
            found = await backend_for(ctx).backlinks(wiki, path, limit, cursor)
        except Refused as exc:
            return _refusal(exc.error)
        return _read(found, drop="truncated")

    async def run_batch(
        ctx: Context, wiki: str, batch: Batch | PlanSubmission, wait: float, idempotency_key: str | None
    ) -> Job | CallToolResult:
        try:
            job = await backend_for(ctx).submit(wiki, batch, wait, idempotency_key)
        except Refused as exc:
            return _refusal(exc.error)
        if job.status == "failed" and job.error is not None:
            return _refusal(job.error, job_id=job.job_id, status=job.status)
        return job

    async def proposal_of(ctx: Context, proposal_id: str) -> tuple[ProposalOutcome | None, str | None]:
        """The proposal a job checks or lands, and what to do about it (None when it cannot be read)."""
        try:
            found = await backend_for(ctx).proposal(proposal_id)
        except Refused:
            return None, None
        return ProposalOutcome(id=found.proposal_id, state=found.state, review_url=found.review_url), (
            PROPOSAL_HINTS.get(found.state)
        )

    def batch_of(
        message: str,
        edits: list[Edit] | None,
        plan: str | None,
        amend: dict[str, Edit] | None,
        dry_run: bool,
    ) -> Batch | PlanSubmission | CallToolResult:
        """What to submit: the edits, or a plan (check_batch only with amend), or INVALID_BATCH."""
        if (
            (edits is None) == (plan is None)
            or (amend is not None and plan is None)
            or (dry_run and amend is None and plan is not None)
        ):
            wanted = (
                "edits, or an earlier check's plan with amend" if dry_run else "edits, or check_batch's plan"
            )
            return _refusal(ErrorInfo(code="INVALID_BATCH", message=f"give {wanted}"))
        try:
            if plan is not None:
                return PlanSubmission(plan=plan, amend=amend, dry_run=dry_run, message=message)
            return Batch(message=message, edits=edits or [], dry_run=dry_run)
        except ValidationError as exc:
            return invalid_arguments(exc)

    @register(
        title="Check batch (dry run)",
        annotations=CHECKS,
        description=CHECK_BATCH.format(**sizes),
    )
    async def check_batch(
        wiki: WikiId,
        ctx: Context,
        edits: Edits | None = None,
        plan: Annotated[
            str | None, Field(max_length=100, description="With amend: a check's plan or error.plan.")
        ] = None,
        amend: Amend = None,
        message: Annotated[str | None, Field(max_length=10_000, description="Never committed.")] = None,
        diff: DiffPaths = None,
    ) -> Annotated[CallToolResult, CheckOutcome]:
        batch = batch_of(message or "check", edits, plan, amend, True)
        if isinstance(batch, CallToolResult):
            return batch
        job = await run_batch(ctx, wiki, batch, MAX_WAIT, None)
        if isinstance(job, CallToolResult):
            return job
        outcome = CheckOutcome(job_id=job.job_id, status=job.status)
        if not job.finished:
            outcome.hint = UNFINISHED.format(status=job.status)
        if job.result is not None:
            _fill(outcome, summary(job.result, edits, diff))
        return _answer(outcome)

    @register(
        title="Write batch (commits changes)",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        ),
        description=WRITE_BATCH.format(**sizes, examples=link_examples()),
    )
    async def write_batch(
        wiki: WikiId,
        message: Message,
        ctx: Context,
        edits: Edits | None = None,
        plan: Annotated[
            str | None, Field(max_length=100, description="check_batch's plan, instead of edits.")
        ] = None,
        amend: Annotated[
            dict[str, Edit] | None,
            Field(description="With plan: as check_batch's; checked in full."),
        ] = None,
        wait: Annotated[
            bool, Field(description="Wait up to 60 s for the outcome (false: answer at once).")
        ] = True,
        idempotency_key: IdempotencyKey = None,
    ) -> Annotated[CallToolResult, WriteOutcome]:
        batch = batch_of(message, edits, plan, amend, False)
        if isinstance(batch, CallToolResult):
            return batch
        job = await run_batch(ctx, wiki, batch, MAX_WAIT if wait else 0.0, idempotency_key)
        if isinstance(job, CallToolResult):
            return job
        result = job.result
        outcome = WriteOutcome(job_id=job.job_id, status=job.status, commit=None)
        if result is not None:
            outcome.commit, outcome.edits = result.commit, edit_lines(result.applied, edits)
            committed = plan if amend is None else None  # an amended batch is no plan's
            checked = await plan_checks(backend_for(ctx), committed) if committed is not None else None
            if checked is not None:
                outcome.files, outcome.checks = file_lines(checked.files), Invariants.of(checked)
        if not job.finished:
            outcome.hint = UNFINISHED.format(status=job.status)
        if job.proposal is not None:
            outcome.proposal, outcome.hint = await proposal_of(ctx, job.proposal)
        return _answer(outcome)

    @register(title="Get job", annotations=READ_ONLY)
    async def get_job(
        job_id: JobId,
        ctx: Context,
        wait_seconds: Annotated[
            float,
            Field(ge=0, le=MAX_WAIT, description="Wait up to this many s for it to finish."),
        ] = 0,
        diff: DiffPaths = None,
    ) -> Annotated[CallToolResult, JobOutcome]:
        """Get a job: {job_id, wiki, status, dry_run, commit, error?} and check_batch's fields.

        Use it when write_batch or check_batch answered a job still queued or running (wait_seconds=60
        answers once it finishes), or for a check's diffs. A failed or cancelled job wrote nothing (error: as
        write_batch's). Errors: JOB_NOT_FOUND (unknown or expired: re-read the pages to see if it
        committed), FORBIDDEN (another caller's job).
        """
        try:
            job = await backend_for(ctx).job(job_id, wait_seconds)
        except Refused as exc:
            return _refusal(exc.error)
        outcome = JobOutcome(job_id=job.job_id, wiki=job.wiki, status=job.status, dry_run=job.dry_run)
        if job.error is not None:
            outcome.error = job.error
        if job.result is not None:
            outcome.commit = job.result.commit
            _fill(outcome, summary(job.result, None, diff))
        if not job.finished:
            outcome.hint = UNFINISHED.format(status=job.status)
        if job.proposal is not None:
            outcome.proposal, outcome.hint = await proposal_of(ctx, job.proposal)
        return _answer(outcome)

    @register(
        title="Cancel job",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def cancel_job(job_id: JobId, ctx: Context) -> Annotated[CallToolResult, Job]:
        """Cancel a write_batch or check_batch job still queued, so it never applies; answers the job.

        When the user changes their mind. To redo a cancelled batch, submit it again with a new
        idempotency_key; cancelling twice answers the job again. Errors:
        NOT_CANCELLABLE (running or finished: see get_job; undo a commit with a new write_batch),
        JOB_NOT_FOUND, FORBIDDEN (only its submitter or an admin).
        """
        return await _answered(backend_for(ctx).cancel(job_id))

    return server
