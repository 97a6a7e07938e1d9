"""Proposals: a wiki's proposals, one proposal with its diffs, approve, reject, re-check."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.server.deps import Caller, Svc
from api.server.errors import ERROR_RESPONSES
from api.server.routes.wikis import WikiId
from worker.schema.answers import Proposal, ProposalList, ProposalState, Submitted
from worker.schema.edits import PlanSubmission, ProposalDecision, ProposalRecheck

router = APIRouter(prefix="/v1", tags=["proposals"], responses=ERROR_RESPONSES)
ProposalId = Annotated[str, Path(min_length=1, max_length=64, description="a proposal's id")]


@router.get("/wikis/{wiki}/proposals", operation_id="list_proposals", response_model=ProposalList)
async def list_proposals(
    wiki: WikiId,
    svc: Svc,
    caller: Caller,
    state: ProposalState | None = None,
    limit: Annotated[
        int, Query(ge=1, le=200, description="proposals looked at (those in state listed)")
    ] = 50,
    cursor: Annotated[
        str | None,
        Query(
            max_length=100,
            pattern=r"^[0-9]{1,16}\.prop-[0-9A-Z]{1,40}$",
            description="a listing's next_cursor",
        ),
    ] = None,
) -> ProposalList:
    """A wiki's proposals, most recently proposed or re-checked first (only those in ``state`` when given),
    each with its latest check, without diffs; ``next_cursor`` when there are more."""
    return await svc.proposals.list(caller, wiki, state, limit, cursor)


@router.get("/proposals/{proposal_id}", operation_id="get_proposal", response_model=Proposal)
async def get_proposal(
    proposal_id: ProposalId,
    svc: Svc,
    caller: Caller,
    diffs: Annotated[bool, Query(description="each revision's result: applied, diff, checks")] = True,
) -> Proposal:
    """The proposal: its state, author, revisions (each check's diff), decision and landing."""
    return await svc.proposals.view(caller, proposal_id, diffs)


@router.post("/proposals/{proposal_id}/approve", operation_id="approve_proposal", response_model=Proposal)
async def approve_proposal(
    proposal_id: ProposalId, svc: Svc, caller: Caller, body: ProposalDecision | None = None
) -> Proposal:
    """Approve an open proposal: its reviewed check is queued to land exactly as reviewed (state
    ``approved``, then ``landed`` or ``stale``). Needs ``write`` on every path it changes; not its
    author's."""
    comment = body.comment if body is not None else None
    return await svc.proposals.approve(caller, proposal_id, comment)


@router.post("/proposals/{proposal_id}/reject", operation_id="reject_proposal", response_model=Proposal)
async def reject_proposal(
    proposal_id: ProposalId, svc: Svc, caller: Caller, body: ProposalDecision | None = None
) -> Proposal:
    """Reject a proposal (or, by its author, withdraw it): nothing lands."""
    comment = body.comment if body is not None else None
    return await svc.proposals.reject(caller, proposal_id, comment)


@router.post(
    "/proposals/{proposal_id}/recheck",
    status_code=202,
    operation_id="recheck_proposal",
    response_model=Submitted,
)
async def recheck_proposal(
    proposal_id: ProposalId, svc: Svc, caller: Caller, body: ProposalRecheck | None = None
) -> Submitted:
    """Check a stale, failed or open proposal again on the head (with ``amend``'s edits): a new
    revision, the earlier ones kept. Its author only."""
    amend = body.amend if body is not None else None
    submission = None if amend is None else PlanSubmission(plan=proposal_id, amend=amend, dry_run=True)
    return await svc.proposals.recheck(caller, proposal_id, submission)
