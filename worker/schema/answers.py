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
    """A wiki and its head commit; for a wiki kept in a git remote, the remote's name, when wikiq last
    published to it, and problems found in its tree when it was attached."""

    id: str
    head: str | None = None
    remote: str | None = Field(default=None, exclude_if=lambda v: v is None, description="the remote's name")
    published_at: str | None = Field(
        default=None, exclude_if=lambda v: v is None, description="when wikiq last pushed to the remote"
    )
    problems: list[str] | None = Field(
        default=None, exclude_if=lambda v: not v, description="paths in the remote's tree wikiq would refuse"
    )


class PageInfo(Answer):
    """A file at the head: path, version (git blob id) and size in bytes."""

    path: str
    version: str
    size: int


class PageList(Answer):
    """One page of a listing; pass ``next_cursor`` back for the next."""

    pages: list[PageInfo]
    next_cursor: str | None = None


class Page(Answer):
    """A file's content at the head, with its version and the commit it was read at."""

    path: str
    version: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    size: int
    commit: str | None = None

    def data(self) -> bytes:
        """The file's exact bytes."""
        return base64.b64decode(self.content) if self.encoding == "base64" else self.content.encode("utf-8")


class Match(Answer):
    """A search hit: path, 1-based line number and the line's text."""

    path: str
    line: int
    text: str


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
    """One applied edit: its index, op, path (and ``new_path`` on a rename), the version after it."""

    index: int
    op: str
    path: str
    new_path: str | None = Field(default=None, exclude_if=lambda v: v is None, description="renames only")
    version: str | None = Field(description="the path's version after the edit; null once deleted")


class JobResult(Answer):
    """A succeeded job's result: the commit (None for a dry run) and one entry per edit."""

    commit: str | None = None
    applied: list[Applied]


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
    """``GET /v1/wikis/{wiki}/search``: matching lines at the head."""

    matches: list[Match]


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
