"""A proposal's state, its stale pages and its webhook events, from its document and its jobs' records."""

from __future__ import annotations

from typing import Any

import pytest

from worker.git.repo import _ends_with_trailers
from worker.jobs.proposals import DecisionDoc, ProposalDoc
from worker.jobs.record import BatchSummary, JobRecord
from worker.schema.answers import Author, EditError, ErrorInfo, JobResult
from worker.schema.edits import Batch
from worker.service.proposals import stale_paths, state_of
from worker.webhooks.deliver import event_type

NOW = 1_000_000
PAT = Author(name="Pat", email="pat@example.org")
BATCH = Batch.model_validate(
    {
        "message": "m",
        "edits": [
            {"op": "create", "path": "wiki/a.md", "content": "a"},
            {"op": "append", "path": "wiki/b.md", "content": "b"},
        ],
    }
)


def doc(**fields: Any) -> ProposalDoc:
    base: dict[str, Any] = {
        "id": "prop-1",
        "wiki": "w",
        "author": PAT,
        "author_id": "pat",
        "message": "m",
        "edits": 2,
        "created_ms": 0,
        "expires_ms": NOW + 1,
        "revisions": ["check"],
    }
    return ProposalDoc(**{**base, **fields})


def record(status: str, dry_run: bool = True, error: ErrorInfo | None = None) -> JobRecord:
    return JobRecord(
        job_id="check" if dry_run else "landing",
        wiki="w",
        status=status,  # type: ignore[arg-type]
        submitted_ms=0,
        batch=BATCH,
        summary=BatchSummary(dry_run=dry_run),
        author=PAT,
        proposal="prop-1",
        error=error,
        result=JobResult(commit=None if dry_run else "c" * 40, applied=[]) if status == "succeeded" else None,
    )


STALE = ErrorInfo(code="VERSION_MISMATCH", message="changed", index=1)
OUTAGE = ErrorInfo(code="STORAGE_UNAVAILABLE", message="disk full")
APPROVED = DecisionDoc(by=PAT, by_id="rita", at_ms=NOW - 1000, approved=True)


@pytest.mark.parametrize(
    ("fields", "check", "landing", "state"),
    [
        ({}, record("queued"), None, "checking"),
        ({}, record("running"), None, "checking"),
        ({}, record("succeeded"), None, "open"),
        ({}, record("failed", error=STALE), None, "failed"),
        ({}, None, None, "expired"),
        ({"expires_ms": NOW}, record("succeeded"), None, "expired"),
        (
            {"decision": APPROVED.model_copy(update={"approved": False})},
            record("succeeded"),
            None,
            "rejected",
        ),
        ({"decision": APPROVED, "landing": "landing"}, record("succeeded"), None, "approved"),
        (
            {"decision": APPROVED, "landing": "landing"},
            record("succeeded"),
            record("running", False),
            "approved",
        ),
        ({"decision": APPROVED, "landing": "landing"}, None, record("succeeded", False), "landed"),
        ({"decision": APPROVED, "landing": "landing"}, None, record("failed", False, STALE), "stale"),
        ({"decision": APPROVED, "landing": "landing"}, None, record("failed", False, OUTAGE), "failed"),
        ({"decision": APPROVED, "landing": "landing", "commit": "c"}, None, None, "landed"),
        ({"decision": APPROVED, "landing": "landing", "stale_paths": ["x"]}, None, None, "stale"),
        ({"decision": APPROVED, "landing": "landing", "expires_ms": 0}, None, None, "approved"),
        # its landing job has no record a minute after the approval: it was never queued
        (
            {"decision": APPROVED.model_copy(update={"at_ms": NOW - 60_001}), "landing": "landing"},
            None,
            None,
            "failed",
        ),
        ({"decision": APPROVED, "landing": "landing"}, None, record("cancelled", False), "failed"),
    ],
)
def test_state_follows_the_document_and_the_jobs(
    fields: dict[str, Any], check: JobRecord | None, landing: JobRecord | None, state: str
) -> None:
    assert state_of(doc(**fields), check, landing, NOW) == state


def test_stale_paths_name_the_changed_page_or_the_failing_edits() -> None:
    plan_stale = ErrorInfo(code="PLAN_STALE", message="m", index=0, details={"path": "wiki/c.md"})
    assert stale_paths(record("failed", False, plan_stale), record("succeeded")) == ["wiki/c.md"]
    both = ErrorInfo(
        code="VERSION_MISMATCH",
        message="m",
        index=1,
        errors=[
            EditError(code="VERSION_MISMATCH", message="m", index=1),
            EditError(code="NOT_FOUND", message="m", index=0),
        ],
    )
    assert stale_paths(record("failed", False, both), record("succeeded")) == ["wiki/b.md", "wiki/a.md"]
    assert stale_paths(record("failed", False, STALE), None) == []


def test_a_proposals_jobs_announce_proposal_events() -> None:
    assert event_type(record("succeeded")) == "proposal.proposed"
    assert event_type(record("failed", error=STALE)) == "proposal.failed"
    assert event_type(record("succeeded", False)) == "proposal.landed"
    assert event_type(record("failed", False, STALE)) == "proposal.stale"
    assert event_type(record("failed", False, OUTAGE)) == "proposal.failed"
    plain = record("succeeded", False).model_copy(update={"proposal": ""})
    assert event_type(plain) == "batch.succeeded"


def test_an_approved_by_trailer_joins_wikiqs_trailer_block() -> None:
    assert _ends_with_trailers("Add a page\n\nApproved-by: Rita <rita@example.org>\n")
    assert not _ends_with_trailers("Approved-by: Rita <rita@example.org>\n")  # the subject is no trailer
    assert not _ends_with_trailers("Add a page\n\nSee the notes: they explain\nwhy it is so\n")
    assert not _ends_with_trailers("Revert\n\nWikiq-Job: 01OTHER\n")  # never joins wikiq's own block
