"""A remote-backed wiki's proposals as branches of its remote (issue 40, "Git-native too"), end to end: a
git daemon serving the remote, the API and a worker as processes with separate data directories.

A proposal's check pushes its revision to ``wikiq/proposals/<id>`` (its parent the remote's head, its tree
what approving it lands); a re-check moves the branch to the new revision; the branch is deleted once the
proposal is decided, approved (and landed) or rejected; a remote refusing the branch does not fail the
check. Checked from the outside with plain git on the served repository.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.remotes import batch, create, deployment
from tests.e2e.service import Service
from tests.gitutil import git_text
from tests.integration.remote.conftest import Site, start_site
from tests.integration.remote.repos import branch_head

DEADLINE = 30.0  # seconds; a sweep runs within about two, only a failure waits this long


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """A git daemon site."""
    started = start_site("git", tmp_path, monkeypatch)
    yield started
    started.stop()


@pytest.fixture
def served(daemon: Site, tmp_path: Path) -> Iterator[tuple[Path, Service]]:
    """A remote repository served by ``daemon`` and a deployment with the wiki ``docs`` attached to it
    (single-user: its one principal proposes with ``"propose": true`` and decides its own proposals)."""
    repo, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote, WIKIQ_PROPOSAL_SWEEP_SECONDS="0.5")
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        yield repo, service
    finally:
        service.stop()


def propose(service: Service, *edits: dict[str, Any]) -> dict[str, Any]:
    """Propose ``edits`` on ``docs`` and wait for its check: the proposal."""
    answer = service.submit("docs", {**batch("Proposed change", *edits), "propose": True})
    assert answer.status_code == 202, answer.text
    job = service.wait(answer.json()["job_id"])
    assert job["status"] == "succeeded", job
    return dict(service.client.get(answer.json()["proposal"]["url"]).json())


def until_gone(repo: Path, branch: str) -> None:
    """Wait (polling, with a deadline) until ``branch`` is deleted from the served ``repo``."""
    deadline = time.monotonic() + DEADLINE
    while branch_head(repo, branch) is not None:
        assert time.monotonic() < deadline, f"branch {branch} is still on the remote"
        time.sleep(0.05)  # polling interval, not a synchronisation


def tree(repo: Path, commit: str) -> str:
    return git_text(repo, "rev-parse", f"{commit}^{{tree}}").strip()


def test_a_proposal_is_a_branch_until_approved_and_landed(served: tuple[Path, Service]) -> None:
    repo, service = served
    head = branch_head(repo)
    proposal = propose(service, create("wiki/proposed.md", "# Proposed\n"))
    pid = proposal["proposal_id"]
    branch = f"wikiq/proposals/{pid}"
    assert proposal["state"] == "open" and proposal["branch"] == branch
    assert "compare_url" not in proposal  # a git daemon on loopback is no known forge
    [revision] = proposal["revisions"]
    commit = branch_head(repo, branch)
    assert commit is not None and revision["commit"] == commit
    assert revision["result"]["revision"] == {
        "commit": commit,
        "ref": f"refs/proposals/{pid}",
        "branch": branch,
    }
    assert git_text(repo, "rev-parse", f"{commit}^").strip() == head
    assert git_text(repo, "show", f"{commit}:wiki/proposed.md") == "# Proposed\n"
    assert branch_head(repo) == head  # nothing landed on the wiki's branch
    approved = service.client.post(f"{proposal['url']}/approve")
    assert approved.status_code == 200, approved.text
    landing = service.wait(approved.json()["job_id"])
    assert landing["status"] == "succeeded", landing
    assert branch_head(repo) == landing["result"]["commit"]
    assert tree(repo, landing["result"]["commit"]) == tree(repo, commit)  # landed exactly as reviewed
    until_gone(repo, branch)
    landed = service.client.get(proposal["url"]).json()
    assert landed["state"] == "landed" and "branch" not in landed


def test_a_recheck_moves_the_branch_and_a_rejection_deletes_it(
    served: tuple[Path, Service],
) -> None:
    repo, service = served
    proposal = propose(service, create("wiki/r.md", "# R\n"))
    branch = proposal["branch"]
    first = branch_head(repo, branch)
    assert first is not None
    meanwhile = service.apply("docs", batch("meanwhile", create("wiki/other.md", "other\n")))
    assert meanwhile["status"] == "succeeded"
    again = service.client.post(f"{proposal['url']}/recheck")
    assert again.status_code == 202, again.text
    assert service.wait(again.json()["job_id"])["status"] == "succeeded"
    second = branch_head(repo, branch)
    assert second is not None and second != first
    assert git_text(repo, "rev-parse", f"{second}^").strip() == meanwhile["result"]["commit"]
    rechecked = service.client.get(proposal["url"]).json()
    assert [r["commit"] for r in rechecked["revisions"]] == [first, second]
    assert rechecked["branch"] == branch
    rejected = service.client.post(f"{proposal['url']}/reject")
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    assert "branch" not in rejected.json()
    until_gone(repo, branch)
    assert branch_head(repo) == meanwhile["result"]["commit"]  # the wiki's branch untouched


def test_a_remote_refusing_the_branch_does_not_fail_the_check(served: tuple[Path, Service]) -> None:
    repo, service = served
    hook = repo / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(  # proposal branches refused, the wiki's branch accepted
        "#!/bin/sh\nwhile read old new ref; do\n"
        '  case "$ref" in refs/heads/wikiq/*) echo "no proposal branches here" >&2; exit 1;; esac\n'
        "done\nexit 0\n"
    )
    hook.chmod(0o755)
    proposal = propose(service, create("wiki/refused.md"))
    assert proposal["state"] == "open" and "branch" not in proposal
    [revision] = proposal["revisions"]
    assert revision["result"]["revision"]["commit"] and "branch" not in revision["result"]["revision"]
    assert git_text(repo, "for-each-ref", "refs/heads/wikiq/").strip() == ""
    approved = service.client.post(f"{proposal['url']}/approve")
    assert service.wait(approved.json()["job_id"])["status"] == "succeeded"
    assert git_text(repo, "show", "main:wiki/refused.md") == "x\n"
