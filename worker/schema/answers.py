"""The JSON answers of the HTTP API (contract section 3) as pydantic models: the server's ``response_model``,
the job record's result and error, the MCP tools' output schemas and the Python client's return types.

The request side (a batch and its edits) lives in ``worker.schema.edits``. Models keep fields they do not
know (``extra="allow"``), so a newer server's additions survive a round trip through an older client and
``model_dump`` gives back what the server said.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

AppliedOp = Literal[
    "create",
    "overwrite",
    "replace",
    "delete",
    "rename",
    "append",
    "frontmatter",
    "replace_section",
    "append_section",
    "insert_section_after",
    "remove_section",
    "rename_section",
    "extract_section",
    "replace_across",
    "rewrite_links",
    "merge_pages",
]


def omitted(description: str) -> Any:
    """A field absent from the JSON while None (``exclude_if``), described by ``description``."""
    return Field(default=None, exclude_if=lambda v: v is None, description=description)


Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


def _always_sent(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """In the answer schemas every field is required (the server always sends it, null or not) except those
    left out when empty (``exclude_if``): generated clients then need no "unset" values."""
    optional = {
        field.alias or name for name, field in model.model_fields.items() if field.exclude_if is not None
    }
    required = [name for name in schema.get("required", []) if name not in optional]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)


class Answer(BaseModel):
    """Base of every answer model: unknown fields are kept."""

    model_config = ConfigDict(
        extra="allow", json_schema_serialization_defaults_required=True, json_schema_extra=_always_sent
    )


class EditError(Answer):
    """One failing edit of a refused batch: its index, code and message (and details, as ``ErrorInfo``)."""

    index: int | None = Field(default=None, description="the failing edit's index")
    code: str = Field(description="the stable error code (contract 3.3)")
    message: str = Field(description="what went wrong and what to do")
    details: dict[str, Any] | None = omitted("facts to act on, as the error's")


class ErrorInfo(Answer):
    """The contract's error object: a stable code, a message, the failing edit's index (or None); for a
    batch refused by its checks, every failing edit too (``errors``)."""

    code: str = Field(description="the stable error code (contract 3.3)")
    message: str = Field(description="what went wrong and what to do")
    index: int | None = Field(default=None, description="the failing edit's index, or null")
    details: dict[str, Any] | None = omitted(
        "facts to act on, e.g. a VERSION_MISMATCH's path, current_version and, for a section "
        "op, current_section_version"
    )
    errors: list[EditError] | None = omitted(
        "a batch refused by its checks: every failing edit in order, the first (this error) "
        "included, at most 50; each edit after a failing one is checked as if that one were left out"
    )
    unchecked: int | None = omitted(
        "the first edit not checked, when checking stopped early (50 failing edits, or the "
        "batch's budget spent): the edits from there on may fail too"
    )
    plan: str | None = omitted(
        'a failed dry run, to its submitter: submit {"plan": this, "amend": {"<index>": edit}} '
        "to send only the corrected edits (while the dry run is kept)"
    )


class WikiInfo(Answer):
    """A wiki and its head commit; for a wiki kept in a git remote, the remote's name, when wikiq last
    published to it, and problems found in its tree when it was attached."""

    id: str = Field(description="the wiki's id")
    head: str | None = Field(default=None, description="the commit main points at; null for an empty wiki")
    remote: str | None = omitted("the remote's name")
    published_at: Timestamp | None = omitted("when wikiq last pushed to the remote")
    problems: list[str] | None = Field(
        default=None, exclude_if=lambda v: not v, description="paths in the remote's tree wikiq would refuse"
    )


class PageInfo(Answer):
    """A file at the head: path, version (git blob id) and size in bytes."""

    path: str = Field(description="the file's path")
    version: str = Field(description="its version: the git blob id of its bytes (an edit's expected_version)")
    size: int = Field(description="its size in bytes")


class PageList(Answer):
    """One page of a listing; pass ``next_cursor`` back for the next."""

    pages: list[PageInfo] = Field(description="the files, sorted by path")
    next_cursor: str | None = Field(
        default=None, description="pass it back as cursor for more; null on the last page"
    )


class SectionInfo(Answer):
    """One section of a page's heading tree: its heading's level and text, the path of ancestor headings
    (``"Parent > Child"``), an ``address`` that finds exactly this section in a section op's ``heading``,
    its lines (1-based, ``end_line`` inclusive) and its ``version`` (the blob id of the section's text,
    a section op's ``expected_section_version``)."""

    level: int = Field(description="the heading's level, 1 to 6")
    heading: str = Field(description="the heading's text")
    path: str = Field(description="the heading texts from the top section down to this one, joined by ' > '")
    address: str = Field(description="what a section op's heading takes to find exactly this section")
    line: int = Field(description="the heading's line, 1-based")
    end_line: int = Field(description="the section's last line (subsections included), 1-based, inclusive")
    version: str = Field(
        description="the blob id of the section's text: a section op's expected_section_version"
    )


class Page(Answer):
    """A file's content at the head, with its version and the commit it was read at; ``sections`` (the
    heading tree) when asked for, and only for UTF-8 text."""

    path: str = Field(description="the file's path")
    version: str = Field(description="its version: the git blob id of its bytes (an edit's expected_version)")
    content: str = Field(description="the exact content: the text itself (utf-8) or base64 of the bytes")
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="utf-8, or base64 for bytes that are not UTF-8"
    )
    size: int = Field(description="its size in bytes")
    commit: str | None = Field(default=None, description="the commit it was read at")
    sections: list[SectionInfo] | None = omitted("the heading tree, when sections=true")

    def data(self) -> bytes:
        """The file's exact bytes."""
        return base64.b64decode(self.content) if self.encoding == "base64" else self.content.encode("utf-8")


class Match(Answer):
    """A search hit: path, 1-based line number, the line's text and the page's version."""

    path: str = Field(description="the matching file")
    line: int = Field(description="the line's number, 1-based")
    text: str = Field(description="the line, without its line feed (cut around the match when very long)")
    version: str | None = Field(
        default=None, description="the matching page's version (its expected_version)"
    )


class PageError(Answer):
    """A path of a many-pages read that has no answer: the error code and message it would have had."""

    path: str = Field(description="the path asked for")
    code: str = Field(description="why it was not read: NOT_FOUND, INVALID_PATH, BATCH_TOO_LARGE")
    message: str = Field(description="what to do")


class PageSet(Answer):
    """``POST /v1/wikis/{wiki}/pages:read``: the pages found, in the order asked, and an error per path
    that could not be read (missing, invalid, over the size budget); ``next_cursor`` when the size budget
    left paths unread."""

    commit: str | None = Field(default=None, description="the commit every page was read at")
    pages: list[Page] = Field(description="the pages read, in the order asked")
    errors: list[PageError] = Field(default_factory=list, description="one entry per path not read")
    next_cursor: str | None = omitted(
        "present when the size budget left paths unread: send the same paths with it as cursor"
    )


class Backlink(Answer):
    """A link to a page: the linking page, the link's 1-based line, its source text, the page's version."""

    path: str = Field(description="the linking page")
    line: int = Field(description="the link's line, 1-based")
    text: str = Field(description="the link as written")
    version: str = Field(description="the linking page's version")


class BacklinkList(Answer):
    """``GET /v1/wikis/{wiki}/backlinks?path=``: every link (outside code) that resolves to ``path``, by
    linking page then line; ``truncated`` when cut at ``limit``, and then ``next_cursor`` for the rest."""

    path: str = Field(description="the page linked to")
    version: str = Field(description="its version")
    commit: str | None = Field(default=None, description="the commit the links were read at")
    backlinks: list[Backlink] = Field(description="every link to the page, by linking page then line")
    truncated: bool = Field(default=False, description="true when there were more links than the limit")
    next_cursor: str | None = omitted("present when there are more links")


class Author(Answer):
    """A commit's author."""

    name: str = Field(description="the author's name")
    email: str = Field(description="the author's email")


class CommitInfo(Answer):
    """A commit of ``main``, with the job that made it (None for commits wikiq did not make)."""

    commit: str = Field(description="the commit id")
    message: str = Field(description="the commit message")
    author: Author = Field(description="who made it")
    time: Timestamp = Field(description="when, ISO 8601 UTC")
    job_id: str | None = Field(
        default=None, description="the job that made it; null for commits wikiq did not make"
    )


class Applied(Answer):
    """One applied change: the edit's index, the op, the path (and ``new_path`` on a rename), the path's
    version after it, and ``count`` (links rewritten, occurrences replaced) on rewrite_links and
    replace_across entries. A folder rename has one entry per moved file, a rename with rewrite_links one
    more per rewritten page, a replace_across one per changed page."""

    index: int = Field(description="the edit's index in the batch")
    op: AppliedOp = Field(description="the op, or rewrite_links for a page a rename rewrote")
    path: str = Field(description="the path it changed")
    new_path: str | None = omitted("renames only")
    version: str | None = Field(description="the path's version after the edit; null once deleted")
    count: int | None = omitted("rewrite_links and replace_across only")


class FileDiff(Answer):
    """A dry run's unified diff of one changed file (``old_path`` when it moved; ``truncated`` when the
    answer's diff budget cut it)."""

    path: str = Field(description="the changed file (its new path for a move)")
    old_path: str | None = omitted("the path it moved from")
    diff: str = Field(description="the unified diff (3 lines of context)")
    truncated: bool | None = omitted("true when the answer's diff budget cut it")


class BatchWarning(Answer):
    """What a dry run noticed without refusing: ``code`` (LINK_BROKEN: a link the batch leaves
    resolving to nothing; NOT_IN_INDEX: a created page index.md does not link to; NOT_REWRITTEN: links or
    matches in a page no op may change, e.g. raw/; OVERWRITES_BATCH_EDIT: an overwrite written against the
    head's version of a page an earlier edit of the batch changed), the page, and the line and link text
    when one link is meant."""

    code: str = Field(
        description="LINK_BROKEN, NOT_IN_INDEX, NOT_REWRITTEN, OVERWRITES_BATCH_EDIT or TRUNCATED"
    )
    path: str = Field(description="the page it is about")
    line: int | None = omitted("the link's line, 1-based")
    link: str | None = omitted("the link as written")
    message: str = Field(description="what is wrong and what to do")


class FileCheck(Answer):
    """One changed file of a dry run's checks: how it changed, the lines its diff adds and removes, the
    links rewritten in it, the code pieces it gained and lost, and whether an edit named it."""

    path: str = Field(description="the changed file (its new path for a move)")
    old_path: str | None = omitted("the path it moved from")
    change: Literal["created", "modified", "moved", "deleted"] = Field(description="how it changed")
    added: int | None = Field(
        description="lines its diff adds; null when not diffed line by line (not UTF-8, too large, or the "
        "batch's budget ran out)"
    )
    removed: int | None = Field(description="lines its diff removes; null as added")
    links: int | None = omitted("links rewrite_links rewrote in it")
    code_added: int = Field(
        default=0,
        exclude_if=lambda v: not v,
        description="code blocks and inline code spans it gained (not counting those moved from another "
        "changed page)",
    )
    code_removed: int = Field(
        default=0,
        exclude_if=lambda v: not v,
        description="code blocks and inline code spans it lost (not counting those moved to another "
        "changed page)",
    )
    named: bool = Field(
        description="false when no edit named it: it changed only because links in it were rewritten"
    )


class LinkCheck(Answer):
    """Page links that resolve to no file, in the pages a batch may affect (those it changes and those
    that mention a file it adds or removes), before and after it."""

    pages: int = Field(description="the pages looked at")
    broken_before: int = Field(description="links broken in them before the batch")
    broken_after: int = Field(description="links broken in them after it")
    ambiguous_after: int = Field(description="of those, the ambiguous ones")


class Checks(Answer):
    """A dry run's checks, computed on the head and the result: broken links before and after, code
    changed, files no edit named, and each changed file; a part the batch's budget ran out in is null and
    named in ``unchecked``."""

    links: LinkCheck | None = Field(description="broken links before and after; null when not counted")
    code_changed: int | None = Field(
        description="code blocks and inline code spans the changed pages gained or lost in all (a piece "
        "moved unchanged between them counts nowhere); null when not counted"
    )
    unnamed: int = Field(description="changed files no edit named (their links were rewritten)")
    files: list[FileCheck] = Field(description="every changed file, in path order")
    unchecked: list[str] | None = Field(
        default=None, exclude_if=lambda v: not v, description="the parts not computed, and why"
    )


class RevisionCommit(Answer):
    """A proposal's check as a git commit, beside ``main`` and never on it: on ``refs/proposals/<id>`` of
    the wiki's repository (its latest revision) and, for a wiki kept in a git remote, pushed to a branch of
    that remote until the proposal is decided."""

    commit: str = Field(
        description="the revision: its parent the head it was checked on, its tree what approving it lands"
    )
    ref: str = Field(description="refs/proposals/<proposal id>, where the proposal's latest revision is")
    branch: str | None = omitted(
        "a wiki kept in a git remote: the remote's branch it is pushed to (deleted once the "
        "proposal is decided)"
    )
    compare_url: str | None = omitted(
        "the forge's page comparing the wiki's branch with ``branch``, to open a pull request "
        "from (GitHub, GitLab, Gitea/Forgejo remotes)"
    )


class JobResult(Answer):
    """A succeeded job's result: the commit (None for a dry run) and the applied changes; a dry run also
    answers ``diff`` (every changed file), ``checks`` and ``warnings``, and a proposal's check its
    ``revision``."""

    commit: str | None = Field(default=None, description="the commit made; null for a dry run")
    applied: list[Applied] = Field(description="the changes, in order")
    diff: list[FileDiff] | None = omitted("dry runs only")
    warnings: list[BatchWarning] | None = omitted("dry runs only")
    checks: Checks | None = omitted(
        "dry runs only: broken links before and after, code changed, each changed file"
    )
    plan: str | None = omitted(
        'a succeeded dry run, to its submitter: submit {"plan": this} to commit exactly what '
        'was checked (while the dry run is kept, once), or {"plan": this, "amend": {...}} to change edits'
    )
    revision: RevisionCommit | None = omitted(
        "a proposal's check: the revision as a git commit (refs/proposals/<id>, and a branch of "
        "a remote-backed wiki's remote)"
    )


class Attempt(Answer):
    """One webhook delivery attempt: when, the receiver's status (None without an answer), why it failed."""

    at: Timestamp = Field(description="when, ISO 8601 UTC")
    status: int | None = Field(default=None, description="the receiver's HTTP status; null without an answer")
    error: str | None = Field(default=None, description="why it failed")
    ms: int = Field(default=0, description="how long it took")


WebhookStatus = Literal["pending", "delivered", "failed"]


class WebhookState(Answer):
    """A job's webhook delivery: the URL (query and userinfo hidden from all but the submitter and admins),
    its state and every attempt."""

    url: str = Field(description="the webhook URL (query and credentials hidden from others)")
    state: WebhookStatus = Field(description="pending, delivered or failed")
    attempts: list[Attempt] = Field(default_factory=list, description="every delivery attempt")


class Job(Answer):
    """A batch's job (contract 3.2)."""

    job_id: str = Field(description="the job's id")
    wiki: str | None = Field(default=None, description="the wiki")
    status: JobStatus = Field(description="queued, running, succeeded, failed or cancelled")
    dry_run: bool = Field(default=False, description="true for a batch only checked")
    submitted_at: Timestamp | None = Field(default=None, description="when it was accepted, ISO 8601 UTC")
    started_at: Timestamp | None = Field(default=None, description="when a worker started it")
    finished_at: Timestamp | None = Field(default=None, description="when it finished")
    result: JobResult | None = Field(
        default=None,
        description="a succeeded job's commit and applied changes (and a dry run's diff, checks and "
        "warnings)",
    )
    error: ErrorInfo | None = Field(
        default=None, description="a failed job's error, with the failing edit's index"
    )
    webhook: WebhookState | None = Field(
        default=None, description="the webhook delivery, when the batch named one"
    )
    proposal: str | None = omitted(
        "the proposal this job checks (a revision's dry run) or lands (its approval)"
    )

    @property
    def finished(self) -> bool:
        """True once the job is succeeded, failed or cancelled."""
        return self.status in FINISHED


class WikiList(Answer):
    """``GET /v1/wikis``: the wikis the caller may read."""

    wikis: list[WikiInfo] = Field(description="the wikis the caller may read")


class PageCount(Answer):
    """How many matches one page holds, counted as ``replace_across`` counts them."""

    path: str = Field(description="the page")
    count: int = Field(description="its matches")


class MatchList(Answer):
    """``GET /v1/wikis/{wiki}/search``: matching lines at the head, by path then line; pass
    ``next_cursor`` back for more. With ``count=true``, no lines: the matches per page and in all."""

    matches: list[Match] = Field(description="the matching lines, by path then line")
    next_cursor: str | None = omitted("present when there are more matches (with count=true, more pages)")
    pages: list[PageCount] | None = omitted("count=true: each page with matches and how many, in path order")
    total: int | None = omitted(
        "count=true: the matches on every page, listed or not (replace_across's expected_count)"
    )


class CommitList(Answer):
    """``GET /v1/wikis/{wiki}/commits``: commits of ``main``, newest first."""

    commits: list[CommitInfo] = Field(description="the commits, newest first")


class JobList(Answer):
    """``GET /v1/wikis/{wiki}/jobs``: a wiki's recent jobs, newest first."""

    jobs: list[Job] = Field(description="the jobs, newest first")


class Submitted(Answer):
    """``202`` to a submission: the new job's id, its status and where to poll it (and, for a proposal,
    the proposal it checks)."""

    job_id: str = Field(description="the new job's id")
    status: JobStatus = Field(default="queued", description="queued")
    status_url: str = Field(description="where to poll the job")
    proposal: ProposalRef | None = omitted(
        "a proposer's batch: the proposal it became (it lands only once approved)"
    )


ProposalState = Literal["checking", "open", "failed", "approved", "landed", "stale", "rejected", "expired"]


class ProposalRef(Answer):
    """Where a proposal is followed: its id, state and review links."""

    proposal_id: str = Field(description="the proposal's id")
    state: ProposalState = Field(description="checking until its dry run finishes, then open (or failed)")
    url: str = Field(description="the proposal (GET), for its state, diff and decision")
    review_url: str = Field(description="its review page in /ui, for a person to approve or reject")


class ProposalRevision(Answer):
    """One check of a proposal's batch: the dry run that checked it and what it showed. The diff, checks
    and warnings are kept while the proposal is open (``result``); a revision whose check expired has
    neither ``result`` nor ``error``."""

    revision: int = Field(description="1 for the first check, then one more per re-check")
    job_id: str = Field(description="the dry run that checked it (GET /v1/jobs/{id})")
    status: JobStatus | Literal["expired"] = Field(description="the dry run's status")
    checked_at: Timestamp | None = Field(default=None, description="when its check finished")
    commit: str | None = omitted(
        "the revision as a commit on refs/proposals/<id> (its parent the head it was checked on)"
    )
    result: JobResult | None = omitted("what the check showed: applied, diff")
    error: ErrorInfo | None = omitted("why the check failed")


class Decision(Answer):
    """Who decided a proposal, when, and why."""

    by: Author = Field(description="who approved or rejected it")
    at: Timestamp = Field(description="when, ISO 8601 UTC")
    approved: bool = Field(description="true: approved (it lands through the queue); false: rejected")
    comment: str | None = omitted("the comment")


class Proposal(ProposalRef):
    """A batch proposed by a principal holding ``propose``: checked like a dry run, kept as its plan until
    someone with ``write`` approves it (it then lands exactly as reviewed) or rejects it, or it expires."""

    wiki: str = Field(description="the wiki")
    author: Author = Field(description="who proposed it (the author of the commit it lands as)")
    message: str = Field(description="the commit message it lands with (an Approved-by trailer added)")
    created_at: Timestamp = Field(description="when it was proposed")
    expires_at: Timestamp = Field(description="an undecided proposal expires then and never lands")
    edits: int = Field(description="how many edits its batch has")
    revisions: list[ProposalRevision] = Field(description="every check, the latest last")
    decision: Decision | None = omitted("the approval or rejection")
    job_id: str | None = omitted("an approved proposal's landing job")
    commit: str | None = omitted("a landed proposal's commit on main")
    branch: str | None = omitted(
        "an open proposal of a wiki kept in a git remote: the remote's branch holding its "
        "latest revision (deleted once the proposal is decided)"
    )
    compare_url: str | None = omitted(
        "with ``branch`` on GitHub, GitLab or Gitea/Forgejo: the page comparing the wiki's "
        "branch with it, one click from a pull request"
    )
    stale_paths: list[str] | None = omitted(
        "a stale proposal: the pages that changed since it was checked (re-check it)"
    )
    error: ErrorInfo | None = omitted("why it is stale or failed: the check's (or the landing job's) error")


class ProposalList(Answer):
    """``GET /v1/wikis/{wiki}/proposals``: a wiki's proposals, most recently proposed or re-checked first,
    each with its latest check only, without diffs; pass ``next_cursor`` back for more."""

    proposals: list[Proposal] = Field(description="most recent first; each with its latest check, no result")
    next_cursor: str | None = omitted("present when there are more proposals")


class Health(Answer):
    """``GET /healthz``."""

    status: Literal["ok"] = "ok"


class Readiness(Answer):
    """``GET /readyz``: ``ok`` when every check passes, else ``unavailable`` and what failed."""

    status: Literal["ok", "unavailable"]
    redis: str
    data_dir: str


class ReplayedJob(Job):
    """``200`` to a submission whose ``Idempotency-Key`` was used before with the same batch: that job."""

    status_url: str = Field(description="where to poll the job")
