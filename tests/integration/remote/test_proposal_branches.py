"""``push_branch`` (a proposal's branch beside the wiki's) against real servers, for every transport: a new
branch, a forced update from the commit last pushed (a re-check's revision does not descend from the
previous one), someone else's push left alone, a retried push whose answer was lost, deletion from the
commit pushed, and the wiki's own branch refused outright.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.remote.conftest import Site
from tests.integration.remote.repos import branch_head, commit, git
from worker.git.remote import Accepted, Moved, Remote, clone_or_init_cache, push_branch, push_cas

BRANCH = "wikiq/proposals/prop-01TEST"
REF = f"refs/heads/{BRANCH}"


def wiki(site: Site, cache: Path) -> tuple[Path, Remote, str]:
    """A served repository whose ``main`` holds one commit, its remote and that commit."""
    repo, remote = site.new_repo()
    assert clone_or_init_cache(cache, remote) is None
    first = commit(cache, None, "first")
    assert push_cas(cache, remote, first, None) == Accepted(first)
    return repo, remote, first


def test_a_proposal_branch_is_created_updated_and_deleted_by_compare_and_swap(
    site: Site, cache: Path
) -> None:
    repo, remote, main = wiki(site, cache)
    first = commit(cache, main, "revision 1")
    assert push_branch(cache, remote, REF, first, None) == Accepted(first)
    assert branch_head(repo, BRANCH) == first
    again = push_branch(cache, remote, REF, first, None)  # the first answer was lost: it is there already
    assert again == Accepted(first, already=True)
    newer_main = commit(cache, main, "someone's page")
    second = commit(cache, newer_main, "revision 2, on a newer head")  # not a descendant of revision 1
    assert push_branch(cache, remote, REF, second, first) == Accepted(second)
    assert branch_head(repo, BRANCH) == second
    assert isinstance(push_branch(cache, remote, REF, None, first), Moved)  # not at what we pushed
    assert branch_head(repo, BRANCH) == second
    assert push_branch(cache, remote, REF, None, second) == Accepted("")
    assert branch_head(repo, BRANCH) is None
    assert push_branch(cache, remote, REF, None, second) == Accepted("", already=True)  # gone already
    assert branch_head(repo) == main  # the wiki's branch never moved


def test_someone_elses_push_to_the_branch_is_never_overwritten(
    site: Site, cache: Path, tmp_path: Path
) -> None:
    repo, remote, main = wiki(site, cache)
    ours = commit(cache, main, "revision 1")
    assert push_branch(cache, remote, REF, ours, None) == Accepted(ours)
    theirs = commit(repo, ours, "a reviewer's fix on top")
    git(repo, "update-ref", REF, theirs, ours)
    newer = commit(cache, main, "revision 2")
    assert isinstance(push_branch(cache, remote, REF, newer, ours), Moved)
    assert isinstance(push_branch(cache, remote, REF, None, ours), Moved)
    assert branch_head(repo, BRANCH) == theirs


def test_the_wikis_own_branch_is_not_a_proposal_branch(site: Site, cache: Path) -> None:
    _, remote, main = wiki(site, cache)
    with pytest.raises(ValueError):
        push_branch(cache, remote, remote.ref, main, main)
    with pytest.raises(ValueError):
        push_branch(cache, remote, "refs/tags/x", main, None)
