"""A proposal's revisions as git commits on ``refs/proposals/<id>`` of a local wiki (issue 40, "Git-native
too"), read with plain git: the ref holds the latest revision (its parent the head it was checked on, its
author the proposer, its tree exactly what approving it lands); a re-check makes a new revision on the same
ref; the ref is removed once the proposal is decided (landed or rejected), by the partition's sweep.

Single-user mode: the one principal proposes with ``"propose": true`` and may decide its own proposals.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.gitutil import git_text
from tests.service.harness import Deployment, create
from worker.jobs.ids import partition_of

SETTINGS = {"proposal_sweep_seconds": 0.2}  # the consumer sweeps at its next idle look (every 2 s at most)
DEADLINE = 30.0  # seconds; the sweep runs within a few, only a failure waits this long


async def propose(dep: Deployment, wiki: str, edits: list[dict[str, Any]]) -> dict[str, Any]:
    """Propose ``edits`` on ``wiki`` and wait for its check: the proposal."""
    answer = await dep.submit(wiki, {"message": "Proposed change", "edits": edits, "propose": True})
    assert answer.status_code == 202, answer.text
    body = answer.json()
    job = await dep.wait(body["job_id"])
    assert job["status"] == "succeeded", job
    return dict((await dep.client.get(body["proposal"]["url"])).json())


def ref(repo: Path, proposal: str) -> str | None:
    """What ``refs/proposals/<proposal>`` points at, read with plain git (None: no such ref)."""
    found = git_text(repo, "for-each-ref", "--format=%(objectname)", f"refs/proposals/{proposal}").strip()
    return found or None


async def gone(repo: Path, proposal: str) -> None:
    """Wait (polling, with a deadline) until ``refs/proposals/<proposal>`` is deleted."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while ref(repo, proposal) is not None:
        assert loop.time() < deadline, f"refs/proposals/{proposal} is still there"
        await asyncio.sleep(0.05)  # polling interval, not a synchronisation


def tree(repo: Path, commit: str) -> str:
    return git_text(repo, "rev-parse", f"{commit}^{{tree}}").strip()


async def test_the_ref_holds_the_revision_that_approval_lands_then_goes(dep: Deployment) -> None:
    wiki = await dep.new_wiki("refs")
    await dep.seed(wiki, {"wiki/a.md": "# A\n\nold\n"})
    head = await dep.head(wiki)
    version = (await dep.page(wiki, "wiki/a.md"))["version"]
    edits = [
        create("wiki/new.md", "# New\n"),
        {"op": "replace", "path": "wiki/a.md", "old": "old", "new": "new", "expected_version": version},
    ]
    proposal = await propose(dep, wiki, edits)
    pid, repo = proposal["proposal_id"], dep.repo(wiki)
    assert proposal["state"] == "open"
    [revision] = proposal["revisions"]
    commit = ref(repo, pid)
    assert commit is not None and revision["commit"] == commit
    assert revision["result"]["revision"] == {"commit": commit, "ref": f"refs/proposals/{pid}"}
    assert "branch" not in proposal and "compare_url" not in proposal  # a local wiki has no remote
    assert git_text(repo, "rev-parse", f"{commit}^").strip() == head
    assert git_text(repo, "log", "-1", "--format=%an <%ae>", commit).strip() == "wikiq user <user@localhost>"
    assert git_text(repo, "show", f"{commit}:wiki/a.md") == "# A\n\nnew\n"
    trailers = git_text(repo, "log", "-1", "--format=%(trailers:key=Wikiq-Proposal,valueonly)", commit)
    assert trailers.strip() == pid
    assert await dep.head(wiki) == head  # main never moved
    approved = await dep.client.post(f"{proposal['url']}/approve")
    assert approved.status_code == 200, approved.text
    landing = await dep.wait(approved.json()["job_id"])
    assert landing["status"] == "succeeded", landing
    landed = landing["result"]["commit"]
    assert tree(repo, landed) == tree(repo, commit)  # what landed is exactly the revision reviewed
    assert git_text(repo, "rev-parse", f"{landed}^").strip() == head
    await gone(repo, pid)
    notes = f"wikiq:proposal-refs:{partition_of(wiki, dep.settings.partitions)}"
    assert not await dep.redis.hexists(notes, f"{wiki}/{pid}")  # its note went with it
    git_text(repo, "fsck", "--strict", "--no-progress")


async def test_a_recheck_writes_a_new_revision_on_the_same_ref_and_a_rejection_removes_it(
    dep: Deployment,
) -> None:
    wiki = await dep.new_wiki("recheck")
    proposal = await propose(dep, wiki, [create("wiki/r.md", "# R\n")])
    pid, repo = proposal["proposal_id"], dep.repo(wiki)
    first = ref(repo, pid)
    assert first is not None
    changed = await dep.apply(wiki, {"message": "meanwhile", "edits": [create("wiki/other.md")]})
    assert changed["status"] == "succeeded"
    again = await dep.client.post(f"{proposal['url']}/recheck")
    assert again.status_code == 202, again.text
    assert (await dep.wait(again.json()["job_id"]))["status"] == "succeeded"
    rechecked = (await dep.client.get(proposal["url"])).json()
    second = ref(repo, pid)
    assert second is not None and second != first
    assert [r["commit"] for r in rechecked["revisions"]] == [first, second]
    assert git_text(repo, "rev-parse", f"{second}^").strip() == changed["result"]["commit"]
    assert git_text(repo, "show", f"{second}:wiki/other.md") == "x\n"  # built on the new head
    assert git_text(repo, "show", f"{second}:wiki/r.md") == "# R\n"
    rejected = await dep.client.post(f"{proposal['url']}/reject")
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    await gone(repo, pid)


async def test_a_failed_check_writes_no_revision(dep: Deployment) -> None:
    wiki = await dep.new_wiki("failed")
    answer = await dep.submit(
        wiki,
        {"message": "m", "edits": [{"op": "delete", "path": "wiki/none.md"}], "propose": True},
    )
    assert answer.status_code == 202, answer.text
    job = await dep.wait(answer.json()["job_id"])
    assert job["status"] == "failed", job
    assert ref(dep.repo(wiki), answer.json()["proposal"]["proposal_id"]) is None
    assert git_text(dep.repo(wiki), "for-each-ref", "refs/proposals/").strip() == ""
