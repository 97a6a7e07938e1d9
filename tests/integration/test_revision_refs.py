"""A proposal's revisions in git and their notes in Redis (``worker.git.revisions``, ``jobs.revisions``),
with real git and a real Redis: the same check on the same head writes the same commit; the ref never goes
back to an earlier check's revision and never touches ``main``; deleting it is a compare-and-swap and lets a
prune drop the revision's objects; a note never goes back to an earlier check either, and is removed only
while unchanged.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gitutil import fsck, git_env, git_text
from worker import keys
from worker.engine import Plan, preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.maintenance import prune
from worker.git.refs import read_ref
from worker.git.revisions import check_of, delete_revision, revision_ref, set_revision, write_revision
from worker.jobs.connection import connect
from worker.jobs.revisions import NOTE, SWAP_NOTE, NoteCall, SwapNote
from worker.redis_server import RedisServer
from worker.schema.edits import Create

PAT = Identity("Pat Proposer", "pat@example.org")
PROPOSAL = "prop-01TEST"
EARLY, LATE = "01J000000000000000000000AA", "01J000000000000000000000BB"  # job ids: later sorts after


def has(repo: Path, oid: str) -> bool:
    """True when ``repo`` holds object ``oid`` (plain git)."""
    command = ["git", "--git-dir", str(repo), "cat-file", "-e", oid]
    found = subprocess.run(command, env=git_env(), capture_output=True, check=False)
    return found.returncode == 0


@pytest.fixture
def repo(data_dir: Path) -> Iterator[WikiRepo]:
    store = GitStore(data_dir)
    store.create("w")
    yield store.open("w")
    store.close()


def plan(repo: WikiRepo, path: str, text: str) -> Plan:
    return preflight(repo.snapshot(repo.head()), [Create(op="create", path=path, content=text)])


def revision(repo: WikiRepo, check: str, text: str = "proposed\n", when: int = 1_700_000_000) -> str:
    return write_revision(
        repo, plan(repo, "wiki/p.md", text), repo.head(), "Proposed", PAT, PROPOSAL, check, when
    )


def test_a_check_run_again_on_the_same_head_writes_the_same_commit(repo: WikiRepo) -> None:
    main = repo.head()
    first = revision(repo, EARLY)
    assert revision(repo, EARLY) == first
    assert set_revision(repo, PROPOSAL, first, EARLY) and set_revision(repo, PROPOSAL, first, EARLY)
    assert read_ref(repo.path, revision_ref(PROPOSAL)) == first
    assert repo.head() == main and read_ref(repo.path) == main  # main is never moved
    assert git_text(repo.path, "rev-parse", f"{first}^").strip() == main
    assert (
        git_text(repo.path, "log", "-1", "--format=%an <%ae>", first).strip()
        == "Pat Proposer <pat@example.org>"
    )
    message = git_text(repo.path, "log", "-1", "--format=%B", first)
    assert message == f"Proposed\n\nWikiq-Proposal: {PROPOSAL}\nWikiq-Check: {EARLY}\n\n"
    assert check_of(repo, first) == EARLY
    fsck(repo.path)


def test_the_ref_never_goes_back_to_an_earlier_check(repo: WikiRepo) -> None:
    early, late = revision(repo, EARLY, "early\n"), revision(repo, LATE, "late\n")
    assert set_revision(repo, PROPOSAL, late, LATE)
    assert not set_revision(repo, PROPOSAL, early, EARLY)  # a paused run of the earlier check comes late
    assert read_ref(repo.path, revision_ref(PROPOSAL)) == late
    assert set_revision(repo, PROPOSAL, revision(repo, LATE, "late, on a newer head\n"), LATE)
    newer = revision(repo, "01J000000000000000000000CC", "newer\n")
    assert set_revision(repo, PROPOSAL, newer, "01J000000000000000000000CC")
    assert read_ref(repo.path, revision_ref(PROPOSAL)) == newer


def test_deleting_the_ref_is_a_compare_and_swap_and_frees_its_objects(repo: WikiRepo) -> None:
    commit = revision(repo, EARLY, "to be pruned\n")
    blob = git_text(repo.path, "rev-parse", f"{commit}:wiki/p.md").strip()
    assert set_revision(repo, PROPOSAL, commit, EARLY)
    git_text(repo.path, "pack-refs", "--all")  # a packed ref is deleted too
    assert read_ref(repo.path, revision_ref(PROPOSAL)) == commit
    assert prune(repo.path, grace_seconds=0)
    assert has(repo.path, commit) and has(repo.path, blob)  # the ref keeps them
    assert not delete_revision(repo.path, PROPOSAL, expected=repo.head())
    assert read_ref(repo.path, revision_ref(PROPOSAL)) == commit
    assert delete_revision(repo.path, PROPOSAL, expected=commit)
    assert read_ref(repo.path, revision_ref(PROPOSAL)) is None
    assert delete_revision(repo.path, PROPOSAL)  # gone already: done
    assert git_text(repo.path, "for-each-ref", "refs/proposals/").strip() == ""
    assert prune(repo.path, grace_seconds=0)
    assert not has(repo.path, commit) and not has(repo.path, blob)
    fsck(repo.path)


async def test_a_note_never_goes_back_to_an_earlier_check_and_goes_only_unchanged(
    redis_server: RedisServer,
) -> None:
    redis = await connect(redis_server.url)
    try:
        notes, field = keys.proposal_refs(0) + ":" + uuid.uuid4().hex, f"w/{PROPOSAL}"
        noted = await NOTE.run(redis, NoteCall(notes, field, LATE, "c" * 40, "wikiq/proposals/x"))
        assert [int(noted[0]), noted[1].decode()] == [1, "-"]
        value = (await redis.hget(notes, field)).decode()
        assert value == f"{LATE} {'c' * 40} - wikiq/proposals/x"
        refused = await NOTE.run(redis, NoteCall(notes, field, EARLY, "e" * 40, "wikiq/proposals/x"))
        assert int(refused[0]) == 0 and refused[1].decode() == value
        pushed = f"{LATE} {'c' * 40} {'c' * 40} wikiq/proposals/x"
        assert await SWAP_NOTE.run(redis, SwapNote(notes, field, value, pushed)) == 1
        later = await NOTE.run(redis, NoteCall(notes, field, LATE + "Z", "d" * 40, "wikiq/proposals/x"))
        assert [int(later[0]), later[1].decode()] == [1, "c" * 40]  # the commit last pushed is kept
        assert await SWAP_NOTE.run(redis, SwapNote(notes, field, pushed, "")) == 0  # changed meanwhile
        assert await redis.hexists(notes, field)
        current = (await redis.hget(notes, field)).decode()
        assert await SWAP_NOTE.run(redis, SwapNote(notes, field, current, "")) == 1
        assert not await redis.hexists(notes, field)
    finally:
        await redis.aclose()
