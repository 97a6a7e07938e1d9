"""Where proposals are kept: one JSON document per proposal under ``keys.proposal`` and a per-wiki index.

A ``ProposalDoc`` holds what is decided about a proposal (its author, the dry runs that checked it, the
decision, the landing job and what it ended as); what the checks showed lives in those dry runs' job
records, kept as long as the proposal (``JobRecord.kept_seconds``). Every change is a compare-and-set
(``update``), so two reviewers deciding at once cannot both win.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field
from redis.asyncio import Redis
from redis.exceptions import WatchError

from worker import keys
from worker.jobs.clock import now_ms
from worker.schema.answers import Author, ErrorInfo
from worker.schema.edits import Webhook

MAX_REVISIONS = 20  # checks one proposal may have: each keeps a dry run's diff for the proposal's life


class DecisionDoc(BaseModel):
    """An approval or rejection: by whom (and the principal id), when, with what comment."""

    by: Author
    by_id: str
    at_ms: int
    approved: bool
    comment: str | None = None


class ProposalDoc(BaseModel):
    """One proposal as stored. ``revisions`` are the dry-run job ids that checked its batch, the latest
    last; ``landing`` the job an approval queued; ``commit``, ``stale_paths`` and ``error`` what that job
    ended as, noted once seen (the job's record may expire before the proposal)."""

    id: str
    wiki: str
    author: Author
    author_id: str
    message: str
    edits: int
    created_ms: int
    expires_ms: int
    webhook: Webhook | None = None
    revisions: list[str] = Field(default_factory=list)
    decision: DecisionDoc | None = None
    landing: str | None = None
    commit: str | None = None
    stale_paths: list[str] | None = None
    error: ErrorInfo | None = None


class ProposalStore:
    """Proposal documents in Redis: each lives ``keep_seconds`` after its last change, indexed by wiki."""

    def __init__(self, redis: Redis, keep_seconds: int) -> None:
        self.redis = redis
        self.keep_seconds = keep_seconds

    async def create(self, doc: ProposalDoc) -> None:
        """Store a new proposal and index it under its wiki (dropping index entries of expired ones)."""
        index = keys.wiki_proposals(doc.wiki)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.proposal(doc.id), doc.model_dump_json(exclude_defaults=True), ex=self.keep_seconds)
            pipe.zadd(index, {doc.id: doc.created_ms})
            pipe.zremrangebyscore(index, "-inf", now_ms() - self.keep_seconds * 1000)
            pipe.expire(index, self.keep_seconds)
            await pipe.execute()

    async def delete(self, doc: ProposalDoc) -> None:
        """Remove a proposal whose first check was never queued."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.proposal(doc.id))
            pipe.zrem(keys.wiki_proposals(doc.wiki), doc.id)
            await pipe.execute()

    async def get(self, proposal_id: str) -> ProposalDoc | None:
        """The proposal, or None when unknown or expired."""
        raw = await self.redis.get(keys.proposal(proposal_id))
        return None if raw is None else ProposalDoc.model_validate_json(raw)

    async def ids(self, wiki: str, limit: int) -> list[str]:
        """A wiki's proposal ids, newest first (at most ``limit``)."""
        found = await self.redis.zrevrange(keys.wiki_proposals(wiki), 0, limit - 1)
        return [item.decode() if isinstance(item, bytes) else str(item) for item in found]

    async def update(
        self, proposal_id: str, change: Callable[[ProposalDoc], ProposalDoc | None]
    ) -> ProposalDoc | None:
        """Apply ``change`` atomically (it returns None to leave the proposal as it is): the stored
        proposal after the call, None when it is unknown. ``change`` is called again when another writer
        changed the proposal between the read and the write."""
        key = keys.proposal(proposal_id)
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    if raw is None:
                        return None
                    changed = change(ProposalDoc.model_validate_json(raw))
                    if changed is None:
                        return ProposalDoc.model_validate_json(raw)
                    pipe.multi()
                    pipe.set(key, changed.model_dump_json(exclude_defaults=True), ex=self.keep_seconds)
                    await pipe.execute()
                    return changed
                except WatchError:
                    continue
