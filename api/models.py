"""The JSON answers of the HTTP API (contract section 3) as pydantic models, shared by every client.

The request side (a batch and its edits) lives in ``worker.ops``; this module is the answer side. Models keep
fields they do not know (``extra="allow"``), so a newer server's additions survive a round trip through an
older client and ``model_dump`` gives back what the server said.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

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
    new_path: str | None = None
    version: str | None = None


class JobResult(Answer):
    """A succeeded job's result: the commit (None for a dry run) and one entry per edit."""

    commit: str | None = None
    applied: list[Applied]


class WebhookState(Answer):
    """A job's webhook delivery: the URL, its state and every attempt."""

    url: str
    state: str
    attempts: list[dict[str, Any]] = Field(default_factory=list)


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
