"""The one error family of wikiq.

Every refusal carries a stable ``code`` from the contract (section 3.3), a message a person can act on,
and, where one edit is to blame, that edit's ``index``; some carry ``details`` a program can act on (a
``VERSION_MISMATCH`` the page's current version, and a section's). Only ``api/`` maps codes to HTTP statuses.

    WikiqError                 code, message, index
    ├── BatchRejected          a batch refused: statically at submission or by preflight in the worker
    ├── WikiNotFound           WIKI_NOT_FOUND
    ├── WikiExists             WIKI_EXISTS
    ├── JobNotFound            JOB_NOT_FOUND
    ├── NotCancellable         NOT_CANCELLABLE
    ├── ProposalNotFound       PROPOSAL_NOT_FOUND
    ├── ProposalNotOpen        PROPOSAL_NOT_OPEN: decided, checking, stale or expired
    ├── IdempotencyConflict    IDEMPOTENCY_CONFLICT
    ├── AccessDenied           UNAUTHORIZED / FORBIDDEN (never names a path)
    ├── WebhookRefused         WEBHOOK_REFUSED
    ├── InvalidWebhook         INVALID_WEBHOOK: a webhook URL that cannot be sent as given
    ├── RateLimited            RATE_LIMITED, with ``retry_after`` seconds
    ├── QueryTooCostly         QUERY_TOO_COSTLY: a read would cost more than its budget
    └── StorageUnavailable     STORAGE_UNAVAILABLE: Redis or the data directory cannot keep what it must

``RefMoved`` is internal: a compare-and-swap of ``refs/heads/main`` lost to another writer. It never
reaches a client; the worker re-checks the batch on the new head.
"""

from __future__ import annotations

from collections.abc import Sequence

CODES = frozenset(
    {
        "INVALID_BATCH",
        "BATCH_EMPTY",
        "TOO_MANY_EDITS",
        "BATCH_TOO_LARGE",
        "BATCH_TOO_COSTLY",
        "QUERY_TOO_COSTLY",
        "PLAN_STALE",
        "PLAN_NOT_FOUND",
        "INVALID_PATH",
        "ZONE_FORBIDDEN",
        "PROTECTED_PATH",
        "PATH_EXISTS",
        "NOT_FOUND",
        "PATH_CONFLICT",
        "VERSION_REQUIRED",
        "VERSION_MISMATCH",
        "OLD_NOT_FOUND",
        "OLD_NOT_UNIQUE",
        "COUNT_MISMATCH",
        "COUNT_REQUIRED",
        "INVALID_ENCODING",
        "WIKI_NOT_FOUND",
        "WIKI_EXISTS",
        "JOB_NOT_FOUND",
        "UNAUTHORIZED",
        "FORBIDDEN",
        "IDEMPOTENCY_CONFLICT",
        "NOT_CANCELLABLE",
        "PROPOSAL_NOT_FOUND",
        "PROPOSAL_NOT_OPEN",
        "WEBHOOK_REFUSED",
        "RATE_LIMITED",
        "REMOTE_NOT_FOUND",
        "REMOTE_UNAVAILABLE",
        "REMOTE_REJECTED",
        "SECTION_NOT_FOUND",
        "SECTION_AMBIGUOUS",
        "FRONTMATTER_INVALID",
        "PATTERN_INVALID",
        "STORAGE_UNAVAILABLE",
        "INTERNAL",
        "INVALID_WEBHOOK",
        "MISDIRECTED_HOST",
    }
)


# failures that say nothing of the batch itself: wikiq, its storage or a remote failed (a proposal whose
# landing fails so is failed, not stale)
OUTAGES = frozenset(
    {"INTERNAL", "STORAGE_UNAVAILABLE", "REMOTE_UNAVAILABLE", "REMOTE_REJECTED", "REMOTE_NOT_FOUND"}
)

MAX_EDIT_ERRORS = 50  # failing edits one refusal lists at most: checking stops there
MAX_EDIT_ERROR_BYTES = 8 * 1024  # ... and bytes of their messages (the first is always listed)


class WikiqError(Exception):
    """A refusal with a stable contract code, a human message and the failing edit's index (or None)."""

    code = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        index: int | None = None,
        details: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        assert self.code in CODES, self.code
        self.message = message
        self.index = index
        self.details = details

    def to_dict(self) -> dict[str, object]:
        """The contract's error object body: ``{"code", "message", "index"}``, ``details`` when the
        refusal has some (a ``BatchRejected`` adds its ``errors`` and ``unchecked``)."""
        body: dict[str, object] = {"code": self.code, "message": self.message, "index": self.index}
        if self.details is not None:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r}, index={self.index})"


class BatchRejected(WikiqError):
    """A batch refused as a whole; ``index`` names the failing edit when there is one.

    A refusal of a batch checked edit by edit (``check_static``, ``preflight``) is its first failure and
    carries them all: ``errors``, every failing edit's own ``BatchRejected`` in order (this one first), and
    ``unchecked``, the first edit not checked when checking stopped early (None: every edit was). Any
    other refusal has no ``errors``."""

    def __init__(
        self, code: str, message: str, index: int | None = None, details: dict[str, object] | None = None
    ) -> None:
        super().__init__(message, code=code, index=index, details=details)
        self.errors: tuple[BatchRejected, ...] = ()
        self.unchecked: int | None = None

    @classmethod
    def of_edits(cls, errors: Sequence[BatchRejected], unchecked: int | None = None) -> BatchRejected:
        """The refusal of a batch whose edits failed with ``errors`` (at least one, in order): the first,
        carrying them all."""
        first = errors[0]
        refusal = cls(first.code, first.message, first.index, first.details)
        refusal.errors = tuple(errors)
        refusal.unchecked = unchecked
        return refusal

    def to_dict(self) -> dict[str, object]:
        body = super().to_dict()
        if self.errors:
            body["errors"] = [error.to_dict() for error in self.errors]
        if self.unchecked is not None:
            body["unchecked"] = self.unchecked
        return body


class WikiNotFound(WikiqError):
    code = "WIKI_NOT_FOUND"


class WikiExists(WikiqError):
    code = "WIKI_EXISTS"


class JobNotFound(WikiqError):
    code = "JOB_NOT_FOUND"


class NotCancellable(WikiqError):
    code = "NOT_CANCELLABLE"


class ProposalNotFound(WikiqError):
    code = "PROPOSAL_NOT_FOUND"


class ProposalNotOpen(WikiqError):
    """A proposal not in a state that allows what was asked (approving one that is not open, ...)."""

    code = "PROPOSAL_NOT_OPEN"


class IdempotencyConflict(WikiqError):
    code = "IDEMPOTENCY_CONFLICT"


class AccessDenied(WikiqError):
    """UNAUTHORIZED (no or unknown credentials) or FORBIDDEN; the message never names a path."""

    code = "FORBIDDEN"


class WebhookRefused(WikiqError):
    code = "WEBHOOK_REFUSED"


class InvalidWebhook(WikiqError):
    """A webhook URL that could never be sent: a host name IDNA cannot encode, a label too long or empty,
    a URL too long once encoded."""

    code = "INVALID_WEBHOOK"


class RateLimited(WikiqError):
    """Too many requests (or too many bytes waiting); ``retry_after`` says when to try again."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueryTooCostly(WikiqError):
    """A read would cost more than its budget (``worker.engine.budget``); the message says how to ask
    for less. A batch over its budget is ``BatchRejected("BATCH_TOO_COSTLY", ...)`` instead."""

    code = "QUERY_TOO_COSTLY"


class StorageUnavailable(WikiqError):
    """Storage cannot keep what it must: Redis did not confirm a job durable, or the data directory is full
    or read-only. ``retry_after`` (seconds) when trying again soon may help; ``job_id`` names a job that
    was queued but not confirmed durable (it is kept, and may still run)."""

    code = "STORAGE_UNAVAILABLE"

    def __init__(self, message: str, retry_after: int | None = None, job_id: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.job_id = job_id


class RefMoved(Exception):
    """``refs/heads/main`` was not at the expected commit when we tried to move it (a lost swap)."""

    def __init__(self, expected: str | None, actual: str | None) -> None:
        super().__init__(f"main moved: expected {expected}, found {actual}")
        self.expected = expected
        self.actual = actual


class RefLocked(RefMoved):
    """Another writer holds ``refs/heads/main.lock`` right now; try again shortly."""

    def __init__(self, expected: str | None) -> None:
        super().__init__(expected, None)


class Fenced(Exception):
    """A write refused because it came from a run of an older lease epoch than its partition's current one
    (the worker was paused past its lease and another took over), or from a run whose lease was lost.
    Internal, like ``RefMoved``: the stale run records nothing and takes nothing off the queue."""


class LockLost(RefMoved):
    """``refs/heads/main.lock`` is no longer the lock this writer took (a newer lease holder broke it):
    nothing of this writer was put on ``main``."""

    def __init__(self, expected: str | None) -> None:
        super().__init__(expected, None)
