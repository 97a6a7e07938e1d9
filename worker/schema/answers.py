"""The JSON answers of the HTTP API (contract section 3) as pydantic models: the server's ``response_model``,
the job record's result and error, the MCP tools' output schemas and the Python client's return types.

The request side (a batch and its edits) lives in ``worker.schema.edits``. Models keep fields they do not
know (``extra="allow"``), so a newer server's additions survive a round trip through an older client and
``model_dump`` gives back what the server said.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class Answer(BaseModel):
    """Base of every answer model: unknown fields are kept."""

    model_config = ConfigDict(extra="allow")


class ErrorInfo(Answer):
    """The contract's error object: a stable code, a message, the failing edit's index (or None)."""

    code: str
    message: str
    index: int | None = None


class WikiInfo(Answer):
    """A wiki and its head commit."""

    id: str
    head: str | None = None


class PageInfo(Answer):
    """A file at the head: path, version (git blob id) and size in bytes."""

    path: str
    version: str
    size: int


class PageList(Answer):
    """One page of a listing; pass ``next_cursor`` back for the next."""

    pages: list[PageInfo]
    next_cursor: str | None = None


class SectionInfo(Answer):
    """One section of a page's heading tree: its heading's level and text, the path of ancestor headings
    (``"Parent > Child"``), an ``address`` that finds exactly this section in a section op's ``heading``,
    its lines (1-based, ``end_line`` inclusive) and its ``version`` (the blob id of the section's text,
    a section op's ``expected_section_version``)."""

    level: int
    heading: str
    path: str
    address: str
    line: int
    end_line: int
    version: str


class Page(Answer):
    """A file's content at the head, with its version and the commit it was read at; ``sections`` (the
    heading tree) when asked for, and only for UTF-8 text."""

    path: str
    version: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    size: int
    commit: str | None = None
    sections: list[SectionInfo] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="the heading tree, when sections=true"
    )

    def data(self) -> bytes:
        """The file's exact bytes."""
        return base64.b64decode(self.content) if self.encoding == "base64" else self.content.encode("utf-8")


class Match(Answer):
    """A search hit: path, 1-based line number, the line's text and the page's version."""

    path: str
    line: int
    text: str
    version: str | None = Field(None, description="the matching page's version (its expected_version)")


class PageError(Answer):
    """A path of a many-pages read that has no answer: the error code and message it would have had."""

    path: str
    code: str
    message: str


class PageSet(Answer):
    """``POST /v1/wikis/{wiki}/pages:read``: the pages found, in the order asked, and an error per path
    that could not be read (missing, invalid, over the size budget)."""

    commit: str | None = None
    pages: list[Page]
    errors: list[PageError] = Field(default_factory=list)


class Backlink(Answer):
    """A link to a page: the linking page, the link's 1-based line, its source text, the page's version."""

    path: str
    line: int
    text: str
    version: str


class BacklinkList(Answer):
    """``GET /v1/wikis/{wiki}/backlinks?path=``: every link (outside code) that resolves to ``path``, by
    linking page then line; ``truncated`` when cut at ``limit``."""

    path: str
    version: str
    commit: str | None = None
    backlinks: list[Backlink]
    truncated: bool = False


class Author(Answer):
    """A commit's author."""

    name: str
    email: str


class CommitInfo(Answer):
    """A commit of ``main``, with the job that made it (None for commits wikiq did not make)."""

    commit: str
    message: str
    author: Author
    time: str
    job_id: str | None = None


class Applied(Answer):
    """One applied change: the edit's index, the op, the path (and ``new_path`` on a rename), the path's
    version after it, and ``count`` (links rewritten, occurrences replaced) on rewrite_links and
    replace_across entries. A folder rename has one entry per moved file, a rename with rewrite_links one
    more per rewritten page, a replace_across one per changed page."""

    index: int
    op: str
    path: str
    new_path: str | None = Field(default=None, exclude_if=lambda v: v is None, description="renames only")
    version: str | None = Field(description="the path's version after the edit; null once deleted")
    count: int | None = Field(
        default=None, exclude_if=lambda v: v is None, description="rewrite_links and replace_across only"
    )


class FileDiff(Answer):
    """A dry run's unified diff of one changed file (``old_path`` when it moved; ``truncated`` when the
    answer's diff budget cut it)."""

    path: str
    old_path: str | None = Field(default=None, exclude_if=lambda v: v is None)
    diff: str
    truncated: bool | None = Field(default=None, exclude_if=lambda v: v is None)


class BatchWarning(Answer):
    """What a dry run noticed without refusing: ``code`` (LINK_BROKEN: a link the batch leaves
    resolving to nothing; NOT_IN_INDEX: a created page index.md does not link to; NOT_REWRITTEN: links or
    matches in a page no op may change, e.g. raw/), the page, and the line and link text when one link is
    meant."""

    code: str
    path: str
    line: int | None = Field(default=None, exclude_if=lambda v: v is None)
    link: str | None = Field(default=None, exclude_if=lambda v: v is None)
    message: str


class JobResult(Answer):
    """A succeeded job's result: the commit (None for a dry run) and the applied changes; a dry run also
    answers ``diff`` (every changed file) and ``warnings``."""

    commit: str | None = None
    applied: list[Applied]
    diff: list[FileDiff] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="dry runs only"
    )
    warnings: list[BatchWarning] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="dry runs only"
    )


class Attempt(Answer):
    """One webhook delivery attempt: when, the receiver's status (None without an answer), why it failed."""

    at: str
    status: int | None = None
    error: str | None = None
    ms: int = 0


WebhookStatus = Literal["pending", "delivered", "failed"]


class WebhookState(Answer):
    """A job's webhook delivery: the URL (query and userinfo hidden from all but the submitter and admins),
    its state and every attempt."""

    url: str
    state: WebhookStatus
    attempts: list[Attempt] = Field(default_factory=list)


class Job(Answer):
    """A batch's job (contract 3.2)."""

    job_id: str
    wiki: str | None = None
    status: JobStatus
    dry_run: bool = False
    submitted_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    result: JobResult | None = None
    error: ErrorInfo | None = None
    webhook: WebhookState | None = None

    @property
    def finished(self) -> bool:
        """True once the job is succeeded, failed or cancelled."""
        return self.status in FINISHED


class WikiList(Answer):
    """``GET /v1/wikis``: the wikis the caller may read."""

    wikis: list[WikiInfo]


class MatchList(Answer):
    """``GET /v1/wikis/{wiki}/search``: matching lines at the head, by path then line; pass
    ``next_cursor`` back for more."""

    matches: list[Match]
    next_cursor: str | None = Field(
        default=None, exclude_if=lambda v: v is None, description="present when there are more matches"
    )


class CommitList(Answer):
    """``GET /v1/wikis/{wiki}/commits``: commits of ``main``, newest first."""

    commits: list[CommitInfo]


class JobList(Answer):
    """``GET /v1/wikis/{wiki}/jobs``: a wiki's recent jobs, newest first."""

    jobs: list[Job]


class Submitted(Answer):
    """``202`` to a submission: the new job's id, its status and where to poll it."""

    job_id: str
    status: JobStatus = "queued"
    status_url: str


class Health(Answer):
    """``GET /healthz``."""

    status: Literal["ok"] = "ok"


class Readiness(Answer):
    """``GET /readyz``: ``ok`` when every check passes, else ``unavailable`` and what failed."""

    status: Literal["ok", "unavailable"]
    redis: str
    data_dir: str
