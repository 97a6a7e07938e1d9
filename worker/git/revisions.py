"""A proposal's revision as a git commit on ``refs/proposals/<proposal id>``, beside ``main`` and never on it.

Each successful check of a proposal (a dry run, ``worker.service.proposals``) is written as one commit: its
tree the checked plan applied to the head it was checked on, that head its parent, the proposer its author,
the batch's message with two trailers, ``Wikiq-Proposal: <proposal id>`` and ``Wikiq-Check: <dry-run job
id>``. Its date is the check's submission time, so a check run again on the same head writes the very same
commit. The objects are written like any commit's (one pack, durable before visible:
``WikiRepo.write_commit``); the ref is then moved by git's own compare-and-swap (``git update-ref`` with the
old value), never ``main`` and never backwards: a ref holding a later check's commit (a larger job id: job
ids sort in acceptance order) is left as it is, so a run of an earlier check that was paused past a newer
one cannot put the older revision back. ``delete_revision`` removes the ref, again only from the value
read. Objects of a deleted ref are pruned with the rest (``worker.git.maintenance.prune``).
"""

from __future__ import annotations

import re
from pathlib import Path

from worker.engine import Plan
from worker.git.commits import Identity
from worker.git.refs import read_ref
from worker.git.remote.gitcommand import run_local
from worker.git.repo import WikiRepo

PREFIX = "refs/proposals/"
PROPOSAL_TRAILER = "Wikiq-Proposal"
CHECK_TRAILER = "Wikiq-Check"
_CHECK = re.compile(rf"^{CHECK_TRAILER}: (\S+)\s*$", re.MULTILINE)
_SWAP_TRIES = 5


def revision_ref(proposal: str) -> str:
    """The ref holding proposal ``proposal``'s latest revision."""
    return PREFIX + proposal


def revision_message(message: str, proposal: str, check: str) -> str:
    """The commit message of a revision: the batch's message and the two trailers (see the module)."""
    text = message.replace("\x00", "").rstrip("\n")
    return f"{text}\n\n{PROPOSAL_TRAILER}: {proposal}\n{CHECK_TRAILER}: {check}\n"


def check_of(repo: WikiRepo, commit: str) -> str | None:
    """The ``Wikiq-Check`` job id of revision commit ``commit`` (its last one), None when it has none or
    the object cannot be read."""
    try:
        found = _CHECK.findall(repo.commit_info(commit).message)
    except Exception:  # a ref to an object this repository lacks: not a revision we can order
        return None
    return found[-1] if found else None


def write_revision(
    repo: WikiRepo,
    plan: Plan,
    base: str | None,
    message: str,
    author: Identity,
    proposal: str,
    check: str,
    when: int,
) -> str:
    """Write the revision of check ``check`` of ``proposal`` (``plan`` on ``base``) as one durable commit,
    moving no ref; its id."""
    return repo.write_commit(plan, base, revision_message(message, proposal, check), author, when=when)


def set_revision(repo: WikiRepo, proposal: str, commit: str, check: str) -> bool:
    """Point ``refs/proposals/<proposal>`` at ``commit``, the revision of check ``check``, unless it holds
    a later check's revision (see the module). True when the ref is at ``commit`` on return."""
    ref = revision_ref(proposal)
    for _ in range(_SWAP_TRIES):
        current = read_ref(repo.path, ref)
        if current == commit:
            return True
        if current is not None:
            other = check_of(repo, current)
            if other is not None and other > check:
                return False
        if _update_ref(repo.path, ref, commit, current or "0" * len(commit)):
            return True
    return False


def delete_revision(path: Path, proposal: str, expected: str | None = None) -> bool:
    """Delete ``refs/proposals/<proposal>`` of the repository at ``path`` if it is at ``expected`` (None:
    whatever it is at now). True when it is gone on return (or never was)."""
    ref = revision_ref(proposal)
    current = read_ref(path, ref)
    if current is None:
        return True
    if expected is not None and current != expected:
        return False
    return _update_ref(path, ref, None, current)


def _update_ref(path: Path, ref: str, new: str | None, old: str) -> bool:
    """``git update-ref`` of ``ref`` from ``old`` to ``new`` (None: delete); False when it was not at
    ``old`` (or git failed)."""
    args = ["update-ref", "--no-deref"]
    args += ["-d", ref, old] if new is None else [ref, new, old]
    return run_local(path, args).returncode == 0
