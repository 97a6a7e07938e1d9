"""A job's record as wikiq keeps it: ``JobRecord`` and the bounded summaries it keeps of a batch
(``BatchSummary``) and of a webhook (``WebhookDelivery``); ``JobRecord.public`` is the contract's job object.

Its status changes only as ``worker.jobs.lifecycle`` says (queued, running, then succeeded, failed or
cancelled); ``worker.jobs.store`` keeps it in Redis.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field

from worker.jobs.clock import iso, now_ms
from worker.schema.answers import Attempt, Author, ErrorInfo, Job, JobResult, WebhookState, WebhookStatus
from worker.schema.edits import Batch, Rename

Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class EditSummary(BaseModel):
    """What the status page and logs keep of an edit once its body is dropped: op and paths, no content."""

    op: str
    path: str
    new_path: str | None = None


SUMMARY_MESSAGE_CHARS = 1000  # the first characters of a batch's message a record keeps
SUMMARY_PATH_BYTES = 4096  # bytes of paths a record's summary lists (always at least the first edit)


class BatchSummary(BaseModel):
    """A batch without its content, bounded: the message's first ``SUMMARY_MESSAGE_CHARS`` characters,
    the dry-run flag, and the ops and paths of the first edits up to ``SUMMARY_PATH_BYTES`` of paths
    (at least the first edit), ``more`` counting the edits not listed."""

    message: str = ""
    dry_run: bool = False
    edits: list[EditSummary] = Field(default_factory=list)
    more: int = 0

    @property
    def count(self) -> int:
        """How many edits the batch had, listed or not."""
        return len(self.edits) + self.more

    @classmethod
    def of(cls, batch: Batch) -> BatchSummary:
        """The summary of ``batch``."""
        edits: list[EditSummary] = []
        size = 0
        for edit in batch.edits:
            new_path = edit.new_path if isinstance(edit, Rename) else None
            size += len(edit.path.encode()) + len((new_path or "").encode())
            if edits and size > SUMMARY_PATH_BYTES:
                break
            edits.append(EditSummary(op=edit.op, path=edit.path, new_path=new_path))
        return cls(
            message=batch.message[:SUMMARY_MESSAGE_CHARS],
            dry_run=batch.dry_run,
            edits=edits,
            more=len(batch.edits) - len(edits),
        )


class WebhookDelivery(BaseModel):
    """A job's webhook: where, its state, every attempt, and the round (one per redelivery)."""

    url: str
    state: WebhookStatus = "pending"
    attempts: list[Attempt] = Field(default_factory=list)
    round: int = 0


def redact_url(url: str) -> str:
    """``url`` reduced to its origin (``scheme://host[:port]/``): its path, ``;params``, query, fragment and
    userinfo may carry capabilities (Slack- and Discord-style URLs keep their secret in the path)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, "/", "", ""))


class JobRecord(BaseModel):
    """Everything wikiq keeps about one job; ``public()`` is the contract's job object.

    ``batch`` is the body as submitted, kept only while the job may still run: it is dropped when the job
    finishes or is cancelled, leaving ``summary`` (ops and paths, no content, bounded). Each moment is
    stored once, in milliseconds since the epoch; the ISO strings of the contract are rendered from them.
    """

    job_id: str
    wiki: str
    status: Status = "queued"
    submitted_ms: int
    started_ms: int | None = None
    finished_ms: int | None = None
    batch: Batch | None = None
    summary: BatchSummary = Field(default_factory=BatchSummary)
    result: JobResult | None = None
    error: ErrorInfo | None = None
    webhook: WebhookDelivery | None = None
    author: Author
    submitter: str = ""
    # the Redis key of the idempotency key bound to this job ('' none): marked when the record is dropped
    idempotency_guard: str = ""
    base: str | None = None
    partition: int = 0
    runs: int = 0
    queued_bytes: int = 0
    # the proposal this job checks (a dry run) or lands ('' none: a plain batch)
    proposal: str = ""
    # how long a finished dry run is kept (0: the store's dry-run retention); a proposal's: its life
    kept_seconds: int = 0
    # a proposal's check: its decision ("approved", "rejected"), when, and the webhook round announcing it
    decided: str = ""
    decided_ms: int = 0
    decided_round: int = 0

    def announce(self, decision: str) -> JobRecord | None:
        """This proposal check's record with ``decision`` noted (None when it is already) and, with a
        webhook, the round that announces it (``proposal.approved``/``proposal.rejected``): the next one,
        begun now, or, while a round is still being delivered, once that one ends (``begin_decision``),
        so the event it sends is not cut short."""
        if self.decided == decision:
            return None
        self.decided, self.decided_ms = decision, now_ms()
        hook = self.webhook
        if hook is not None and self.status in ("succeeded", "failed"):
            self.decided_round = hook.round + 1
            if hook.state != "pending":
                hook.round, hook.state = self.decided_round, "pending"
        return self

    @property
    def deciding(self) -> bool:
        """True while this record's webhook round is the one announcing its decision."""
        return bool(self.decided) and self.webhook is not None and self.webhook.round >= self.decided_round

    def begin_decision(self) -> JobRecord | None:
        """The record with the round announcing its decision begun, once the round before it ended (None
        when there is none waiting)."""
        hook = self.webhook
        waiting = bool(self.decided) and hook is not None and hook.round + 1 == self.decided_round
        if hook is None or not waiting or hook.state == "pending":
            return None
        hook.round, hook.state = self.decided_round, "pending"
        return self

    def begin_run(self) -> None:
        """Count a new run of the job (``runs``)."""
        self.runs += 1

    @property
    def dry_run(self) -> bool:
        """True for a dry run."""
        return self.summary.dry_run

    def public(self, reveal: bool = True) -> Job:
        """The job as clients see it (contract 3.2); without ``reveal`` the webhook URL is redacted."""
        hook = self.webhook
        return Job(
            job_id=self.job_id,
            wiki=self.wiki,
            status=self.status,
            dry_run=self.dry_run,
            submitted_at=iso(self.submitted_ms),
            started_at=iso(self.started_ms),
            finished_at=iso(self.finished_ms),
            result=self.result,
            error=self.error,
            webhook=None
            if hook is None
            else WebhookState(
                url=hook.url if reveal else redact_url(hook.url), state=hook.state, attempts=hook.attempts
            ),
            proposal=self.proposal or None,
        )
