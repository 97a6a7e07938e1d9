"""Only wikiq can write a commit that counts as a job's own: the ``Wikiq-Proof`` trailer (real git)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.remote.repos import commit as raw_commit
from tests.integration.remote.repos import git
from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.commits import job_proof
from worker.schema.edits import Create

ALICE = Identity("Alice", "alice@example.com")
KEY = b"k" * 32


@pytest.fixture
def repo(data_dir: Path) -> Iterator[WikiRepo]:
    store = GitStore(data_dir)
    store.create("w")
    yield store.open("w")
    store.close()


def _land(repo: WikiRepo, job_id: str, key: bytes | None) -> str:
    head = repo.head()
    plan = preflight(repo.snapshot(head), [Create(op="create", path=f"wiki/{job_id}.md", content="x\n")])
    return repo.commit_plan(plan, head, f"batch {job_id}", ALICE, job_id=job_id, proof_key=key)


def _push_by_hand(repo: WikiRepo, message: str) -> str:
    """A commit on main written with plain git, as a person pushing to the wiki would."""
    head = repo.head()
    forged = raw_commit(repo.path, head, message, {"wiki/other.md": "theirs\n"})
    git(repo.path, "update-ref", "refs/heads/main", forged, str(head))
    return forged


def test_wikiqs_commits_carry_a_proof_of_their_job_and_tree(repo: WikiRepo) -> None:
    mine = _land(repo, "job-1", KEY)
    info = repo.commit_info(mine)
    assert info.job_id == "job-1"
    assert info.proof == job_proof(KEY, "job-1", repo.tree_of(mine))
    assert repo.find_job_commit("job-1", None, key=KEY) == mine
    assert repo.find_job_commit("job-1", None, key=b"another key" * 3) is None


def test_a_hand_written_trailer_is_ignored_with_or_without_a_made_up_proof(repo: WikiRepo) -> None:
    _push_by_hand(repo, "theirs\n\nWikiq-Job: job-2")
    assert repo.find_job_commit("job-2", None, key=KEY) is None
    assert repo.find_job_commit("job-2", None) is not None  # what the trailer alone used to prove
    _push_by_hand(repo, f"theirs\n\nWikiq-Job: job-3\nWikiq-Proof: {'0' * 64}")
    assert repo.find_job_commit("job-3", None, key=KEY) is None  # a wrong proof: never
    replayed = repo.commit_info(_land(repo, "job-4", KEY)).proof
    _push_by_hand(repo, f"theirs\n\nWikiq-Job: job-5\nWikiq-Proof: {replayed}")  # another job's proof
    assert repo.find_job_commit("job-5", None, key=KEY) is None


def test_a_commit_without_proof_never_counts_under_a_key(repo: WikiRepo) -> None:
    """A trailer alone (what a person, or a version before proofs, could write) is no job's commit."""
    _push_by_hand(repo, "batch\n\nWikiq-Job: job-6")
    assert repo.find_job_commit("job-6", None, key=KEY) is None
