"""Proposals in process: a proposer's batch lands nothing until another principal approves it; approving
lands exactly the reviewed plan as one commit authored by the proposer; a page changed meanwhile makes it
stale (nothing lands) and a re-check makes a new revision; reject and expiry land nothing; who may decide.

Principals (tokens are the dict's values): ``root`` admin everywhere; ``pat`` propose on ``pw``; ``rita``
write on ``pw``; ``tess`` write on ``pw`` only under ``wiki/team/``; ``rob`` read on ``pw``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest_asyncio

from tests.gitutil import git_text
from tests.principals import tokens_toml
from tests.service.harness import Deployment, create, expect_error

TOKENS = {"root": "tok-root", "pat": "tok-pat", "rita": "tok-rita", "tess": "tok-tess", "rob": "tok-rob"}
ENTRIES = {
    "root": ("Root Admin", '{ "*" = "admin" }', ""),
    "pat": ("Pat Proposer", '{ "pw" = "propose" }', ""),
    "rita": ("Rita Reviewer", '{ "pw" = "write" }', ""),
    "tess": ("Tess Team", '{ "pw" = "write" }', 'prefixes = { "pw" = ["wiki/team/"] }'),
    "rob": ("Rob Reader", '{ "pw" = "read" }', ""),
}


def SETTINGS(root: Path) -> dict[str, Any]:  # the module attribute conftest.py reads
    """A tokens file naming the module's principals."""
    tokens = root / "tokens.toml"
    tokens.write_text(tokens_toml(TOKENS, ENTRIES))
    return {"tokens_file": tokens}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def who(dep: Deployment) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A client per principal; the wiki ``pw`` made by root."""
    clients = {name: dep.as_(token) for name, token in TOKENS.items()}
    dep.client = clients["root"]
    assert (await clients["root"].post("/v1/wikis", json={"id": "pw"})).status_code == 201
    yield clients


async def propose(dep: Deployment, client: httpx.AsyncClient, edits: list[dict[str, Any]]) -> dict[str, Any]:
    """Submit ``edits`` as ``client``, expect a proposal, wait for its check: the proposal."""
    answer = await client.post("/v1/wikis/pw/batches", json={"message": "Proposed change", "edits": edits})
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["proposal"]["state"] == "checking"
    job = await dep.wait(body["job_id"], client)
    assert job["dry_run"] is True and job["proposal"] == body["proposal"]["proposal_id"]
    return (await client.get(body["proposal"]["url"])).json()


async def test_a_proposal_lands_only_when_approved_exactly_as_reviewed(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    head = await dep.head("pw")
    proposal = await propose(dep, who["pat"], [create("wiki/p1.md", "# P1\n")])
    assert proposal["state"] == "open", proposal
    assert proposal["author"] == {"name": "Pat Proposer", "email": "pat@example.org"}
    [revision] = proposal["revisions"]
    assert revision["status"] == "succeeded" and revision["result"]["diff"][0]["path"] == "wiki/p1.md"
    assert await dep.head("pw") == head  # nothing landed
    expect_error(await who["pat"].post(f"{proposal['url']}/approve"), 403, "FORBIDDEN")
    expect_error(await who["rob"].post(f"{proposal['url']}/approve"), 403, "FORBIDDEN")
    approved = await who["rita"].post(f"{proposal['url']}/approve", json={"comment": "looks right"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["state"] == "approved"
    landing = await dep.wait(approved.json()["job_id"])
    assert landing["status"] == "succeeded", landing
    final = (await who["rob"].get(proposal["url"])).json()
    assert final["state"] == "landed" and final["commit"] == landing["result"]["commit"]
    commit = final["commit"]
    repo = dep.repo("pw")
    assert git_text(repo, "rev-parse", f"{commit}^").strip() == head
    assert (
        git_text(repo, "log", "-1", "--format=%an <%ae>", commit).strip() == "Pat Proposer <pat@example.org>"
    )
    trailers = git_text(repo, "log", "-1", "--format=%(trailers:key=Approved-by,valueonly)", commit)
    assert trailers.strip() == "Rita Reviewer <rita@example.org>"
    assert git_text(repo, "show", f"{commit}:wiki/p1.md") == "# P1\n"
    expect_error(await who["rita"].post(f"{proposal['url']}/approve"), 409, "PROPOSAL_NOT_OPEN")


async def test_a_page_changed_meanwhile_makes_it_stale_and_a_recheck_a_new_revision(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    versions = await dep.seed("pw", {"wiki/s.md": "# S\n\nold text\n"})
    edit = {
        "op": "replace",
        "path": "wiki/s.md",
        "old": "old text",
        "new": "proposed text",
        "expected_version": versions["wiki/s.md"],
    }
    proposal = await propose(dep, who["pat"], [edit])
    assert proposal["state"] == "open"
    other = await dep.apply(
        "pw",
        {"message": "meanwhile", "edits": [{"op": "append", "path": "wiki/s.md", "content": "\nmore\n"}]},
    )
    assert other["status"] == "succeeded", other
    head = await dep.head("pw")
    approved = (await who["rita"].post(f"{proposal['url']}/approve")).json()
    landing = await dep.wait(approved["job_id"])
    assert landing["status"] == "failed"
    stale = (await who["pat"].get(proposal["url"])).json()
    assert stale["state"] == "stale" and stale["stale_paths"] == ["wiki/s.md"], stale
    assert await dep.head("pw") == head  # nothing landed
    expect_error(await who["rita"].post(f"{proposal['url']}/approve"), 409, "PROPOSAL_NOT_OPEN")
    expect_error(await who["rita"].post(f"{proposal['url']}/recheck"), 403, "FORBIDDEN")
    fresh = (await dep.page("pw", "wiki/s.md"))["version"]
    amend = {"0": {**edit, "expected_version": fresh}}
    answer = await who["pat"].post(f"{proposal['url']}/recheck", json={"amend": amend})
    assert answer.status_code == 202, answer.text
    assert answer.json()["proposal"]["proposal_id"] == proposal["proposal_id"]
    await dep.wait(answer.json()["job_id"], who["pat"])
    again = (await who["pat"].get(proposal["url"])).json()
    assert again["state"] == "open" and "decision" not in again, again
    assert [r["revision"] for r in again["revisions"]] == [1, 2]
    assert again["revisions"][0]["result"]["diff"]  # the old diff is kept
    approved = (await who["rita"].post(f"{proposal['url']}/approve")).json()
    assert (await dep.wait(approved["job_id"]))["status"] == "succeeded"
    assert (await dep.page("pw", "wiki/s.md"))["content"] == "# S\n\nproposed text\n\nmore\n"


async def test_rejected_and_expired_proposals_land_nothing(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    head = await dep.head("pw")
    rejected = await propose(dep, who["pat"], [create("wiki/r.md")])
    answer = await who["rita"].post(f"{rejected['url']}/reject", json={"comment": "not this"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "rejected"
    assert answer.json()["decision"]["comment"] == "not this"
    assert answer.json()["decision"]["by"]["name"] == "Rita Reviewer"
    expect_error(await who["rita"].post(f"{rejected['url']}/approve"), 409, "PROPOSAL_NOT_OPEN")
    expired = await propose(dep, who["pat"], [create("wiki/e.md")])
    key = f"wikiq:proposal:{expired['proposal_id']}"
    stored = json.loads(await dep.redis.get(key))
    stored["expires_ms"] = int(time.time() * 1000) - 1  # its week has passed
    await dep.redis.set(key, json.dumps(stored), keepttl=True)
    assert (await who["rita"].get(expired["url"])).json()["state"] == "expired"
    expect_error(await who["rita"].post(f"{expired['url']}/approve"), 409, "PROPOSAL_NOT_OPEN")
    assert await dep.head("pw") == head
    listed = (await who["rob"].get("/v1/wikis/pw/proposals")).json()["proposals"]
    states = {p["proposal_id"]: p["state"] for p in listed}
    assert states[rejected["proposal_id"]] == "rejected" and states[expired["proposal_id"]] == "expired"
    opened = (await who["rob"].get("/v1/wikis/pw/proposals", params={"state": "rejected"})).json()
    assert {p["state"] for p in opened["proposals"]} == {"rejected"}


async def test_who_may_propose_check_and_decide(dep: Deployment, who: dict[str, httpx.AsyncClient]) -> None:
    expect_error(
        await who["rob"].post("/v1/wikis/pw/batches", json={"message": "m", "edits": [create("wiki/x.md")]}),
        403,
        "FORBIDDEN",
    )
    dry = await who["pat"].post(
        "/v1/wikis/pw/batches", json={"message": "m", "edits": [create("wiki/d.md")], "dry_run": True}
    )
    assert dry.status_code == 202 and "proposal" not in dry.json()  # a proposer may check, as a dry run
    checked = await dep.wait(dry.json()["job_id"], who["pat"])
    assert checked["status"] == "succeeded" and "proposal" not in checked
    committed = await who["pat"].post("/v1/wikis/pw/batches", json={"plan": checked["result"]["plan"]})
    assert committed.status_code == 202 and committed.json()["proposal"]["state"] == "checking"
    outside = await propose(dep, who["pat"], [create("wiki/elsewhere.md")])
    expect_error(await who["tess"].post(f"{outside['url']}/approve"), 403, "FORBIDDEN")
    inside = await propose(dep, who["pat"], [create("wiki/team/t.md")])
    approved = await who["tess"].post(f"{inside['url']}/approve")
    assert approved.status_code == 200, approved.text
    # a writer proposes when it says so, and may not approve its own proposal
    own = await who["rita"].post(
        "/v1/wikis/pw/batches", json={"message": "m", "edits": [create("wiki/own.md")], "propose": True}
    )
    assert own.status_code == 202 and "proposal" in own.json()
    await dep.wait(own.json()["job_id"], who["rita"])
    expect_error(await who["rita"].post(f"{own.json()['proposal']['url']}/approve"), 403, "FORBIDDEN")
    expect_error(await who["root"].get("/v1/proposals/prop-unknown"), 404, "PROPOSAL_NOT_FOUND")
    withdrawn = await who["rita"].post(f"{own.json()['proposal']['url']}/reject")
    assert withdrawn.status_code == 200 and withdrawn.json()["state"] == "rejected"


async def test_a_replayed_proposal_answers_the_same_job(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    batch = {"message": "m", "edits": [create("wiki/i.md")]}
    headers = {"Idempotency-Key": "proposal-1"}
    first = await who["pat"].post("/v1/wikis/pw/batches", json=batch, headers=headers)
    again = await who["pat"].post("/v1/wikis/pw/batches", json=batch, headers=headers)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["job_id"] == first.json()["job_id"]
    assert again.json()["proposal"] == first.json()["proposal"]["proposal_id"]
    listed = (await who["rob"].get("/v1/wikis/pw/proposals")).json()["proposals"]
    assert [p["proposal_id"] for p in listed].count(first.json()["proposal"]["proposal_id"]) == 1
    assert len({p["proposal_id"] for p in listed}) == len(listed)


async def test_a_stale_proposal_may_still_be_rejected(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    versions = await dep.seed("pw", {"wiki/gone-stale.md": "# G\n"})
    edit = {
        "op": "overwrite",
        "path": "wiki/gone-stale.md",
        "content": "# G2\n",
        "expected_version": versions["wiki/gone-stale.md"],
    }
    proposal = await propose(dep, who["pat"], [edit])
    await dep.apply(
        "pw",
        {
            "message": "meanwhile",
            "edits": [{"op": "append", "path": "wiki/gone-stale.md", "content": "more\n"}],
        },
    )
    approved = (await who["rita"].post(f"{proposal['url']}/approve")).json()
    assert (await dep.wait(approved["job_id"]))["status"] == "failed"
    assert (await who["rita"].get(proposal["url"])).json()["state"] == "stale"
    withdrawn = await who["pat"].post(f"{proposal['url']}/reject", json={"comment": "outdated"})
    assert withdrawn.status_code == 200, withdrawn.text
    body = withdrawn.json()
    assert body["state"] == "rejected" and body["decision"]["by"]["name"] == "Pat Proposer"
    assert body["job_id"] == approved["job_id"]  # it still names the landing that found it stale
    expect_error(await who["rita"].post(f"{proposal['url']}/reject"), 409, "PROPOSAL_NOT_OPEN")


async def test_a_proposed_selection_lands_the_pages_reviewed(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """An each without expected_count (allowed in a check) is proposed, and its approval lands exactly the
    pages the check picked: the plan guards them, no count needed."""
    await dep.seed("pw", {f"wiki/sel/p{i}.md": f"# P{i}\n" for i in range(3)})
    each = {"op": "each", "select": {"prefix": "wiki/sel/"}, "do": "frontmatter", "set": {"tag": "x"}}
    proposal = await propose(dep, who["pat"], [each])
    assert proposal["state"] == "open", proposal
    picked = [e["path"] for e in proposal["revisions"][0]["result"]["applied"]]
    assert picked == [f"wiki/sel/p{i}.md" for i in range(3)]
    approved = (await who["rita"].post(f"{proposal['url']}/approve")).json()
    assert (await dep.wait(approved["job_id"]))["status"] == "succeeded"
    for path in picked:
        assert (await dep.page("pw", path))["content"].startswith("---\ntag: x\n---\n")
