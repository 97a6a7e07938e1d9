"""A proposal's revisions in git: written when its check succeeds, swept once the proposal is decided.

Writing (``keep``, after a round landed: ``worker.jobs.run``). Each dry run of a proposal (a record with
``proposal`` set) whose check succeeded becomes a commit on ``refs/proposals/<proposal id>`` of the wiki's
repository, or of the worker's cache of a remote-backed wiki (``worker.git.revisions``: its parent the head
it was checked on, never on ``main``), then, for a remote-backed wiki, is pushed to the remote's branch
``WIKIQ_PROPOSAL_BRANCH_PREFIX<proposal id>`` (``push_branch``: a compare-and-swap from the commit last
pushed there, so nobody else's push to that branch is overwritten). The dry run's result names it
(``JobResult.revision``: commit, ref, branch and the forge's compare URL). None of it may fail the check:
a revision not written, or a branch not pushed (the remote away, or refusing), is logged at warning level
and the check succeeds as checked; a push not made is tried again by the sweep while the proposal is open.

What was written is noted in Redis, per partition (``keys.proposal_refs``: ``<wiki>/<proposal>`` ->
``"<check job id> <commit> <pushed> <branch>"``, ``-`` for none), by ``NOTE``, which never lets an earlier
check replace a later one's note (job ids sort in acceptance order). ``pushed`` is the commit the remote
branch was last set to by wikiq, ``-`` none, or ``!``: someone else pushed to the branch (or the remote
refuses it), so wikiq leaves it alone from then on.

Sweeping (``sweep``, by the partition's consumer between jobs: ``worker.jobs.consumer``, every
``WIKIQ_PROPOSAL_SWEEP_SECONDS``, and at once after a proposal's landing job): for each note of the
partition whose proposal is decided (approved or rejected), expired or unknown, the ref is deleted from
the local repository and the branch from the remote (only while it still holds the commit wikiq pushed),
then the note (only while unchanged: a re-check noted meanwhile stays). A remote that cannot be reached
keeps the note for the next sweep. A proposal approved and then found stale is re-checked by its author,
which clears the decision: its new revision is written and noted again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from worker import keys
from worker.engine import Plan
from worker.errors import Fenced, WikiqError
from worker.git import Identity, WikiRepo
from worker.git.remote import (
    Accepted,
    Moved,
    PushResult,
    Remote,
    RemoteNotFound,
    compare_url,
    push_branch,
)
from worker.git.revisions import delete_revision, revision_ref, set_revision, write_revision
from worker.jobs.clock import now_ms
from worker.jobs.leases import Lease
from worker.jobs.record import JobRecord
from worker.jobs.resources import Resources
from worker.jobs.scripts import Call, Script, arg, key
from worker.schema.answers import RevisionCommit

log = logging.getLogger("wikiq.worker")
BRANCH_TIMEOUT = 30.0  # seconds a push (or deletion) of a proposal's branch may take
SWEEP_REMOTE_OPS = 16  # pushes and deletions one sweep of a partition makes at most
NONE, FOREIGN = "-", "!"


@dataclass(frozen=True)
class Checked:
    """A proposal's check that succeeded: its plan and the head it was checked on (its revision's parent)."""

    plan: Plan
    base: str | None


@dataclass
class NoteCall(Call):
    """Note check ``job``'s revision ``commit`` of ``field`` (pushed to ``branch``, ``-`` none), keeping the
    commit last pushed, unless a later check is noted: ``{1, pushed}`` noted, ``{0, the note}`` not."""

    notes: str = key()
    field: str = arg()
    job: str = arg()
    commit: str = arg()
    branch: str = arg()


NOTE = Script(
    NoteCall,
    body="""
local old = redis.call('HGET', K.notes, A.field)
local pushed = '-'
if old then
  local job, _, was = string.match(old, '^(%S+) (%S+) (%S+)')
  if job and job > A.job then return {0, old} end
  if was then pushed = was end
end
redis.call('HSET', K.notes, A.field, A.job .. ' ' .. A.commit .. ' ' .. pushed .. ' ' .. A.branch)
return {1, pushed}
""",
)


@dataclass
class SwapNote(Call):
    """Replace ``field``'s note by ``value`` ('' deletes it) only while it is ``expected``: 1, else 0."""

    notes: str = key()
    field: str = arg()
    expected: str = arg()
    value: str = arg()


SWAP_NOTE = Script(
    SwapNote,
    body="""
if redis.call('HGET', K.notes, A.field) ~= A.expected then return 0 end
if A.value == '' then
  redis.call('HDEL', K.notes, A.field)
else
  redis.call('HSET', K.notes, A.field, A.value)
end
return 1
""",
)


@dataclass(frozen=True)
class Note:
    """One noted revision (see the module), of a wiki of ``partition``."""

    partition: int
    wiki: str
    proposal: str
    job: str
    commit: str
    pushed: str
    branch: str

    @property
    def field(self) -> str:
        return f"{self.wiki}/{self.proposal}"

    @property
    def value(self) -> str:
        return f"{self.job} {self.commit} {self.pushed} {self.branch}"

    @classmethod
    def parse(cls, partition: int, field: str, value: str) -> Note | None:
        wiki, _, proposal = field.partition("/")
        job, commit, pushed, branch, *rest = value.split(" ") + [""] * 4
        if not proposal or not branch or any(rest):
            return None
        return cls(partition, wiki, proposal, job, commit, pushed, branch)

    def pushing(self, pushed: str) -> Note:
        """This note with ``pushed`` as what the branch holds."""
        return replace(self, pushed=pushed)


class _Stored(BaseModel):
    """What the sweep reads of a stored proposal (``worker.jobs.proposals.ProposalDoc``, its JSON
    under ``keys.proposal``): its decision and expiry. Other fields are ignored."""

    decision: dict[str, Any] | None = None
    expires_ms: int = 0

    def settled(self, at_ms: int) -> bool:
        """True once nothing can be reviewed any more: decided, or expired undecided (final either way
        but for a re-check, which clears the decision and writes a new revision)."""
        return self.decision is not None or at_ms >= self.expires_ms


def branch_of(resources: Resources, proposal: str) -> str:
    """The remote branch a proposal's revisions are pushed to."""
    return resources.settings.proposal_branch_prefix + proposal


async def keep(
    resources: Resources,
    repo: WikiRepo,
    remote: Remote | None,
    records: Sequence[tuple[JobRecord, Checked]],
    lease: Lease | None,
) -> dict[str, RevisionCommit]:
    """Write the revisions of ``records`` (proposal checks that succeeded) in ``repo``, the wiki's
    repository or cache, and push them to ``remote`` when the wiki lives there (see the module); each
    revision by its check's job id. Never raises but ``Fenced`` (a run whose lease is known lost writes
    nothing more)."""
    kept: dict[str, RevisionCommit] = {}
    for record, checked in records:
        if lease is not None:
            lease.check()
        try:
            found = await _keep(resources, repo, remote, record, checked, lease)
        except Fenced:
            raise
        except Exception as exc:  # a revision is a view of the check: never the check's failure
            log.warning(
                "job %s: proposal %s's revision not written (%r)", record.job_id, record.proposal, exc
            )
            continue
        if found is not None:
            kept[record.job_id] = found
    return kept


async def _keep(
    resources: Resources,
    repo: WikiRepo,
    remote: Remote | None,
    record: JobRecord,
    checked: Checked,
    lease: Lease | None,
) -> RevisionCommit | None:
    assert record.batch is not None
    proposal, check = record.proposal, record.job_id
    if checked.base is not None and not repo.has_object(checked.base):
        # checked behind a commit of its group that did not land (a full disk): no revision of it
        log.warning("job %s: checked on %s, which did not land; no revision", check, checked.base[:12])
        return None
    author = Identity(record.author.name, record.author.email)
    when = record.submitted_ms // 1000  # the same check on the same head: the very same commit
    commit = await asyncio.to_thread(
        write_revision, repo, checked.plan, checked.base, record.batch.message, author, proposal, check, when
    )
    branch = None if remote is None else branch_of(resources, proposal)
    notes = keys.proposal_refs(record.partition)
    noted, pushed = await NOTE.run(
        resources.redis, NoteCall(notes, f"{record.wiki}/{proposal}", check, commit, branch or NONE)
    )
    pushed = pushed.decode() if isinstance(pushed, bytes) else str(pushed)
    revision = RevisionCommit(commit=commit, ref=revision_ref(proposal))
    if not int(noted):  # a later check of the proposal was written: it holds the ref and the branch
        return revision
    if not await asyncio.to_thread(set_revision, repo, proposal, commit, check):
        return revision
    if remote is None or branch is None:
        return revision
    note = Note(record.partition, record.wiki, proposal, check, commit, pushed, branch)
    if lease is not None:
        lease.check()
    if await _push(resources, repo.path, remote, note) is not False:  # pushed, or to push when reachable
        revision.branch = branch
        revision.compare_url = compare_url(remote.url, remote.branch, branch)
    return revision


async def _push(resources: Resources, cache: Path, remote: Remote, note: Note) -> bool | None:
    """Push ``note``'s revision to its branch, from the commit last pushed there, and note what the branch
    holds now: True pushed; False left alone (someone else pushed to it, or the remote refuses it); None
    when the remote could not be reached (the sweep tries again)."""
    if note.pushed == FOREIGN:
        return False
    expected = None if note.pushed == NONE else note.pushed
    result = await _set_branch(resources, cache, remote, note, note.commit, expected)
    if result is None:
        return None
    pushed = note.commit if isinstance(result, Accepted) else FOREIGN
    await _swap_note(resources, note, note.pushing(pushed).value)
    return pushed != FOREIGN


async def _swap_note(resources: Resources, note: Note, value: str) -> bool:
    """Replace ``note`` by ``value`` ('' removes it) only while it is as read."""
    call = SwapNote(keys.proposal_refs(note.partition), note.field, note.value, value)
    return bool(await SWAP_NOTE.run(resources.redis, call))


async def sweep(resources: Resources, partition: int, busy: Callable[[], Awaitable[bool]]) -> int:
    """Remove the refs and branches of the partition's decided or expired proposals, and push again the
    branches of open ones whose push did not happen (see the module); stops early once ``busy()`` says
    jobs wait. How many notes it settled."""
    raw = await cast(Awaitable[dict[Any, Any]], resources.redis.hgetall(keys.proposal_refs(partition)))
    parsed = (Note.parse(partition, _text(field), _text(value)) for field, value in raw.items())
    notes = [note for note in parsed if note is not None]
    if not notes:
        return 0
    docs = await resources.redis.mget([keys.proposal(note.proposal) for note in notes])
    settled, remote_ops = 0, 0
    for note, doc in zip(notes, docs, strict=True):
        try:
            decided = doc is None or _Stored.model_validate_json(doc).settled(now_ms())
        except ValueError:  # not a proposal as stored: nothing to review any more
            decided = True
        if decided:  # its branch to delete, if wikiq's push put one there
            remote_work = note.branch != NONE and note.pushed not in (NONE, FOREIGN)
        else:  # open: its branch to push, if that did not happen
            remote_work = note.branch != NONE and note.pushed not in (FOREIGN, note.commit)
            if not remote_work:
                continue
        if remote_work:
            if remote_ops >= SWEEP_REMOTE_OPS or await busy():
                break
            remote_ops += 1
        try:
            if decided:
                settled += await _retire(resources, note)
            else:
                await _retry(resources, note)
        except Exception as exc:  # the next sweep tries again
            log.warning("proposal %s: sweep of wiki %s failed (%r)", note.proposal, note.wiki, exc)
    return settled


async def _retire(resources: Resources, note: Note) -> int:
    """Delete a decided proposal's ref here (whatever revision it holds: the proposal is settled, and a
    re-check cannot run on this partition meanwhile, the sweep running between its jobs), its branch on
    the remote, then its note: 1 once done."""
    path = resources.store.path(note.wiki)
    if (path / "HEAD").exists():
        await asyncio.to_thread(delete_revision, path, note.proposal)
    if note.branch != NONE and note.pushed not in (NONE, FOREIGN):
        reached = await _delete_branch(resources, note)
        if not reached:
            return 0
    return int(await _swap_note(resources, note, ""))


async def _delete_branch(resources: Resources, note: Note) -> bool:
    """Delete ``note``'s branch while it holds the commit wikiq pushed; False when the remote could not
    be reached (try again later)."""
    entry = await resources.wikis.entry(note.wiki)
    if entry is None:
        return True  # the wiki is gone: nothing to delete from
    try:
        remote = resources.wikis.remote(entry)
    except RemoteNotFound:
        log.warning(
            "proposal %s: remote %s is no longer declared; its branch is left", note.proposal, entry.remote
        )
        return True
    repo = await resources.wikis.cache(note.wiki, entry)
    return await _set_branch(resources, repo.path, remote, note, None, note.pushed) is not None


async def _set_branch(
    resources: Resources, cache: Path, remote: Remote, note: Note, commit: str | None, expected: str | None
) -> PushResult | None:
    """Push ``commit`` to ``note``'s branch (None: delete it) while the branch holds ``expected`` (None:
    absent), noted as the remote's last push (``Resources.last_push``): the remote's answer, logged at
    warning level unless ``Accepted``; None, logged, when the remote could not be reached."""
    pushing = commit is not None
    try:
        result = await asyncio.to_thread(
            push_branch, cache, remote, f"refs/heads/{note.branch}", commit, expected, timeout=BRANCH_TIMEOUT
        )
    except WikiqError as exc:
        doing = "pushed to" if pushing else "deleted from"
        log.warning(
            "proposal %s: branch %s not %s remote %s (%s)",
            note.proposal,
            note.branch,
            doing,
            remote.name,
            exc.message,
        )
        return None
    resources.last_push[remote.name] = time.monotonic()
    if not isinstance(result, Accepted):
        why = "someone else pushed to it" if isinstance(result, Moved) else f"refused: {result.reason}"
        left = "left alone" if pushing else "left"
        log.warning(
            "proposal %s: branch %s of remote %s %s (%s)", note.proposal, note.branch, remote.name, left, why
        )
    return result


async def _retry(resources: Resources, note: Note) -> None:
    """Push an open proposal's revision again (its first push did not happen), from this worker's cache
    when it holds the commit."""
    entry = await resources.wikis.entry(note.wiki)
    if entry is None:
        return
    remote = resources.wikis.remote(entry)
    repo = await resources.wikis.cache(note.wiki, entry)
    if repo.has_object(note.commit):
        await _push(resources, repo.path, remote, note)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
