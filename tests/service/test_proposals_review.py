"""Proposals under a hostile review (reviewed writes): races, outages, replays, lost rights, sizes and
webhooks, each test a defect a review found and the behaviour the contract promises instead.

Principals (tokens are the dict's values): ``root`` admin everywhere; ``pat`` propose everywhere; ``rita``
write everywhere; ``rob`` read everywhere. The module's ``dep`` serves most tests, each on a wiki of its
own; a test needing other settings (or a Redis of its own) builds its own deployment.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from redis.asyncio import Redis

from tests.e2e.receiver import running_receiver
from tests.principals import tokens_toml
from tests.service.harness import TEST_SECRET, Deployment, create, deployment, expect_error
from worker import keys
from worker.redis_server import RedisServer
from worker.webhooks.deliver import deliver_webhook, signer_for
from worker.webhooks.http import WebhookSender

TOKENS = {"root": "tok-root", "pat": "tok-pat", "rita": "tok-rita", "rob": "tok-rob"}
ENTRIES = {
    "root": ("Root Admin", '{ "*" = "admin" }'),
    "pat": ("Pat Proposer", '{ "*" = "propose" }'),
    "rita": ("Rita Reviewer", '{ "*" = "write" }'),
    "rob": ("Rob Reader", '{ "*" = "read" }'),
}
WEEK = 7 * 24 * 3600
DRY_RUN_RETENTION = 600  # WIKIQ_DRY_RUN_RETENTION_SECONDS' default
_serial = itertools.count()


def write_tokens(root: Path, entries: dict[str, tuple[str, ...]] = ENTRIES) -> Path:
    tokens = root / "tokens.toml"
    tokens.write_text(tokens_toml(TOKENS, entries))
    return tokens


def SETTINGS(root: Path) -> dict[str, Any]:  # the module attribute conftest.py reads
    """A tokens file naming the module's principals."""
    return {"tokens_file": write_tokens(root)}


def clients_of(dep: Deployment) -> dict[str, httpx.AsyncClient]:
    clients = {name: dep.as_(token) for name, token in TOKENS.items()}
    dep.client = clients["root"]
    return clients


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def who(dep: Deployment) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A client per principal (root's is the deployment's own)."""
    yield clients_of(dep)


async def new_wiki(dep: Deployment, stem: str) -> str:
    wiki = f"{stem}-{next(_serial)}"
    answer = await dep.client.post("/v1/wikis", json={"id": wiki})
    assert answer.status_code == 201, answer.text
    return wiki


async def propose(
    dep: Deployment,
    client: httpx.AsyncClient,
    wiki: str,
    edits: list[dict[str, Any]],
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Submit ``edits`` as ``client`` (a proposer), wait for its check: the ``202`` answer's body."""
    batch = {"message": "Proposed change", "edits": edits, **extra}
    answer = await client.post(f"/v1/wikis/{wiki}/batches", json=batch, headers=headers)
    assert answer.status_code == 202, answer.text
    body: dict[str, Any] = answer.json()
    assert "proposal" in body, body
    checked = await dep.wait(body["job_id"], client)
    assert checked["status"] == "succeeded", checked
    return body


# -- exactly once ---------------------------------------------------------------------------------------


async def test_an_approval_answered_503_still_lands_and_the_proposal_says_so(tmp_path: Path) -> None:
    """Redis cannot confirm the landing job durable (a stalled disk) when a proposal is approved: the
    contract keeps such a job ("the job's record and queue entry are kept, not withdrawn ... the job may
    still run") and the approval's answer is 503 naming it. Expected: the proposal keeps naming that job,
    so once it lands the proposal is ``landed`` with its commit and a second approval is
    ``409 PROPOSAL_NOT_OPEN``."""
    server = RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always").start()
    admin = Redis.from_url(server.url)
    try:
        settings = {"tokens_file": write_tokens(tmp_path), "accept_timeout_seconds": 0.5}
        async with deployment(server, tmp_path, **settings) as d:
            who = clients_of(d)
            wiki = await new_wiki(d, "undurable")
            submitted = await propose(d, who["pat"], wiki, [create("wiki/a.md", "# A\n")])
            url = submitted["proposal"]["url"]
            await admin.config_set("appendfsync", "no")  # the disk stalls: nothing is fsynced any more
            try:
                error = expect_error(await who["rita"].post(f"{url}/approve"), 503, "STORAGE_UNAVAILABLE")
            finally:
                await admin.config_set("appendfsync", "always")
            landing_id = error["message"].split()[1]
            landing = await d.wait(landing_id)
            assert landing["status"] == "succeeded", landing  # the kept job did land the proposal
            proposal = (await who["rob"].get(url)).json()
            again = await who["rita"].post(f"{url}/approve")
            if again.status_code == 200:
                await d.wait(again.json()["job_id"])
            assert proposal["state"] == "landed", proposal
            assert proposal.get("commit") == landing["result"]["commit"], proposal
            expect_error(again, 409, "PROPOSAL_NOT_OPEN")
    finally:
        await admin.aclose()
        server.stop()


async def test_a_recheck_racing_an_approval_does_not_erase_it(
    dep: Deployment, who: dict[str, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The author re-checks an open proposal while a reviewer approves it (the approval stored between the
    re-check's reading of the state and its queueing of the new check: a webhook URL's DNS look-up, a rate
    check, the static checks lie in between). Expected: one of them wins; the approval stands (its landing
    job is queued) and the re-check is ``409 PROPOSAL_NOT_OPEN``."""
    wiki = await new_wiki(dep, "race")
    submitted = await propose(dep, who["pat"], wiki, [create("wiki/r.md", "# R\n")])
    url = submitted["proposal"]["url"]
    submissions = dep.app.state.wikiq.service.submissions
    original = submissions.revise
    approvals: list[httpx.Response] = []

    async def approve_first(*args: Any, **kwargs: Any) -> Any:
        approvals.append(await who["rita"].post(f"{url}/approve"))
        return await original(*args, **kwargs)

    monkeypatch.setattr(submissions, "revise", approve_first)
    recheck = await who["pat"].post(f"{url}/recheck")
    monkeypatch.undo()
    [approval] = approvals
    assert approval.status_code == 200, approval.text
    landing = await dep.wait(approval.json()["job_id"])
    assert landing["status"] == "succeeded", landing
    if recheck.status_code == 202:
        await dep.wait(recheck.json()["job_id"], who["pat"])
    proposal = (await who["rob"].get(url)).json()
    assert proposal["state"] == "landed", proposal
    expect_error(recheck, 409, "PROPOSAL_NOT_OPEN")


async def test_a_replayed_proposal_never_becomes_a_second_proposal(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """A proposer retries its submission with the same ``Idempotency-Key`` (24 h) after its proposal landed
    and its checks were released (kept only ``WIKIQ_DRY_RUN_RETENTION_SECONDS`` more: simulated here by
    letting the released record expire). Expected ("submitting again with the same key answers that job
    instead of queueing a second one"): ``200`` naming the first check, nothing new."""
    wiki = await new_wiki(dep, "replay")
    await dep.seed(wiki, {"wiki/l.md": "# L\n"})
    headers = {"Idempotency-Key": "append-once"}
    edits = [{"op": "append", "path": "wiki/l.md", "content": "one line\n"}]
    first = await propose(dep, who["pat"], wiki, edits, headers=headers)
    url = first["proposal"]["url"]
    approved = await who["rita"].post(f"{url}/approve")
    assert (await dep.wait(approved.json()["job_id"]))["status"] == "succeeded"
    assert (await who["rob"].get(url)).json()["state"] == "landed"  # read: its checks are released
    ttl = await dep.redis.ttl(keys.job(first["job_id"]))
    assert 0 < ttl <= DRY_RUN_RETENTION, ttl
    await dep.redis.pexpire(keys.job(first["job_id"]), 1)  # ten minutes later
    await asyncio.sleep(0.01)
    batch = {"message": "Proposed change", "edits": edits}
    again = await who["pat"].post(f"/v1/wikis/{wiki}/batches", json=batch, headers=headers)
    if again.status_code == 202 and "proposal" in again.json():  # a reviewer approves the "new" one
        await dep.wait(again.json()["job_id"], who["pat"])
        second = await who["rita"].post(f"{again.json()['proposal']['url']}/approve")
        await dep.wait(second.json()["job_id"])
    assert (await dep.page(wiki, "wiki/l.md"))["content"] == "# L\none line\n"
    assert again.status_code == 200 and again.json()["job_id"] == first["job_id"], again.text


async def test_a_proposal_whose_approval_met_a_redis_restart_can_still_be_decided(tmp_path: Path) -> None:
    """Redis restarts right after an approval stored its decision and before its landing job was queued:
    the approval answers 503, nothing was queued and ``_undecided`` could not run. Expected: the proposal
    is not stuck: a minute after the approval (``LANDING_GRACE_MS``: no landing job can be queued any
    more) it is ``failed`` and can be rejected or re-checked (it used to stay ``approved`` until the
    document expired two weeks later)."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        async with deployment(server, tmp_path, tokens_file=write_tokens(tmp_path)) as d:
            who = clients_of(d)
            wiki = await new_wiki(d, "restart")
            submitted = await propose(d, who["pat"], wiki, [create("wiki/s.md", "# S\n")])
            url = submitted["proposal"]["url"]
            submissions = d.app.state.wikiq.service.submissions
            original = submissions.land

            async def land_after_a_restart(*args: Any, **kwargs: Any) -> Any:
                await asyncio.to_thread(server.stop)  # the decision is stored (and in the AOF)
                return await original(*args, **kwargs)

            submissions.land = land_after_a_restart
            try:
                quiet = d.as_(TOKENS["rita"], raise_app_exceptions=False)
                answer = await quiet.post(f"{url}/approve")
                assert answer.status_code == 503, answer.text
            finally:
                del submissions.land
                await asyncio.to_thread(server.start)
            proposal = (await who["rob"].get(url)).json()
            assert proposal["state"] == "approved", proposal  # for a minute it may still be queueing
            key = keys.proposal(submitted["proposal"]["proposal_id"])
            stored = json.loads(await d.redis.get(key))
            stored["decision"]["at_ms"] -= 61_000  # a minute later: no landing job will come any more
            await d.redis.set(key, json.dumps(stored), keepttl=True)
            proposal = (await who["rob"].get(url)).json()
            assert proposal["state"] == "failed", proposal
            rejected = await who["rita"].post(f"{url}/reject", json={"comment": "try again"})
            assert rejected.status_code == 200, (proposal["state"], rejected.text)
    finally:
        server.stop()


async def test_a_landed_proposal_says_landed_after_its_landing_record_is_gone(
    fresh: Any, tmp_path: Path
) -> None:
    """A proposal approved and landed that nobody read afterwards, whose landing job's record then went
    (job retention, or, as here, dropped first under the approver's ``WIKIQ_MAX_RETAINED_BYTES``).
    Expected: it says ``landed`` with its commit."""
    async with fresh(tokens_file=write_tokens(tmp_path), max_retained_bytes=1) as d:
        who = clients_of(d)
        wiki = await new_wiki(d, "forgotten")
        submitted = await propose(d, who["pat"], wiki, [create("wiki/f.md", "# F\n")])
        url = submitted["proposal"]["url"]
        approved = await who["rita"].post(f"{url}/approve")
        landing_id = approved.json()["job_id"]
        landing = await d.wait(landing_id)
        assert landing["status"] == "succeeded", landing
        other = await who["rita"].post(
            f"/v1/wikis/{wiki}/batches", json={"message": "m", "edits": [create("wiki/g.md")]}
        )
        await d.wait(other.json()["job_id"])  # the approver's next job: its landing record is dropped
        assert (await who["rita"].get(f"/v1/jobs/{landing_id}")).status_code == 404
        proposal = (await who["rob"].get(url)).json()
        assert proposal["state"] == "landed", proposal
        assert proposal.get("commit") == landing["result"]["commit"], proposal


# -- idempotency ------------------------------------------------------------------------------------------


async def test_a_key_used_for_a_dry_run_conflicts_with_a_proposal(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """The same ``Idempotency-Key`` for a dry run and then for ``"propose": true`` of the same edits: two
    different bodies. Expected: ``422 IDEMPOTENCY_CONFLICT`` ("used for another body")."""
    wiki = await new_wiki(dep, "keys")
    headers = {"Idempotency-Key": "k-dry-then-propose"}
    edits = [create("wiki/k.md")]
    dry = await who["rita"].post(
        f"/v1/wikis/{wiki}/batches", json={"message": "m", "edits": edits, "dry_run": True}, headers=headers
    )
    assert dry.status_code == 202 and "proposal" not in dry.json(), dry.text
    proposed = await who["rita"].post(
        f"/v1/wikis/{wiki}/batches", json={"message": "m", "edits": edits, "propose": True}, headers=headers
    )
    expect_error(proposed, 422, "IDEMPOTENCY_CONFLICT")


# -- what is kept, and for how long ---------------------------------------------------------------------


async def test_landed_proposals_do_not_keep_counting_against_their_proposer(
    fresh: Any, tmp_path: Path
) -> None:
    """A proposer whose proposals are approved and land, none of them read afterwards. Expected: a landed
    proposal's checks no longer wait (the code's own note: "landed: its checks' diffs need not be kept a
    week"), so they stop counting in the proposer's queued bytes and it can go on proposing."""
    tmp = tmp_path
    async with fresh(tokens_file=write_tokens(tmp), max_queued_bytes=150_000) as d:
        who = clients_of(d)
        wiki = await new_wiki(d, "bytes")
        for number in range(6):
            batch = {"message": "m", "edits": [create(f"wiki/b{number}.md", "x" * 20_000 + "\n")]}
            answer = await who["pat"].post(f"/v1/wikis/{wiki}/batches", json=batch)
            assert answer.status_code == 202, (number, answer.text)
            await d.wait(answer.json()["job_id"], who["pat"])
            approved = await who["rita"].post(f"{answer.json()['proposal']['url']}/approve")
            assert (await d.wait(approved.json()["job_id"]))["status"] == "succeeded"


async def test_a_proposal_withdrawn_while_checking_keeps_its_check_briefly(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """Withdrawn (rejected) while its check still waits in the queue. Expected (contract: rejected, "its
    checks are kept only WIKIQ_DRY_RUN_RETENTION_SECONDS more"): once the check finishes its record lives
    at most that long."""
    wiki = await new_wiki(dep, "withdrawn")
    batch = {"message": "m", "edits": [create("wiki/w.md")]}
    async with dep.worker.paused():
        answer = await who["pat"].post(f"/v1/wikis/{wiki}/batches", json=batch)
        assert answer.status_code == 202, answer.text
        withdrawn = await who["pat"].post(f"{answer.json()['proposal']['url']}/reject")
        assert withdrawn.status_code == 200 and withdrawn.json()["state"] == "rejected", withdrawn.text
    check = await dep.wait(answer.json()["job_id"], who["pat"])
    assert check["status"] in ("succeeded", "failed")
    ttl = await dep.redis.ttl(keys.job(check["job_id"]))
    assert 0 < ttl <= DRY_RUN_RETENTION, f"the withdrawn proposal's check is kept {ttl} s"


# -- webhooks ----------------------------------------------------------------------------------------------


async def test_an_amended_recheck_keeps_the_proposals_webhook(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """A proposal with a webhook, re-checked with ``amend``. Expected (contract: "A proposal's webhook (the
    batch's webhook) receives its check as proposal.proposed or proposal.failed, its decision as ..."):
    the new revision's check carries the proposal's webhook like the first."""
    wiki = await new_wiki(dep, "hooked")
    url = "http://127.0.0.1:9/hook"
    submitted = await propose(dep, who["pat"], wiki, [create("wiki/h.md", "# H\n")], webhook={"url": url})
    first = await dep.wait(submitted["job_id"], who["pat"])
    assert first["webhook"] is not None and first["webhook"]["url"] == url
    amend = {"0": create("wiki/h.md", "# H, amended\n")}
    answer = await who["pat"].post(f"{submitted['proposal']['url']}/recheck", json={"amend": amend})
    assert answer.status_code == 202, answer.text
    second = await dep.wait(answer.json()["job_id"], who["pat"])
    assert second["status"] == "succeeded", second
    assert second["webhook"] is not None and second["webhook"]["url"] == url, second


async def test_a_decision_does_not_swallow_the_undelivered_proposed_event(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """The receiver answers the check's ``proposal.proposed`` with 503 once (a retry is scheduled), then
    the proposal is approved. Expected: the receiver eventually gets ``proposal.proposed`` too ("a
    receiver may see one event more than once"; none is lost)."""
    wiki = await new_wiki(dep, "swallowed")
    with running_receiver() as receiver:
        path = "/proposed-then-approved"
        receiver.script[path] = [(503, {}), (200, {})]
        submitted = await propose(
            dep, who["pat"], wiki, [create("wiki/e.md")], webhook={"url": receiver.url(path)}
        )
        check_id = submitted["job_id"]
        http = WebhookSender(dep.settings.webhook_allow_private, 5.0)
        ctx = dep.worker.context()
        ctx.update(http=http, signer=signer_for(TEST_SECRET), rng=random.Random(3))
        try:
            await deliver_webhook(ctx, check_id, 0, 0)  # the first attempt: 503, a retry is scheduled
            approved = await who["rita"].post(f"{submitted['proposal']['url']}/approve")
            assert approved.status_code == 200, approved.text
            await deliver_webhook(ctx, check_id, 0, 1)  # that retry, when due
            await deliver_webhook(ctx, check_id, 1, 0)  # the decision's event
        finally:
            await http.aclose()
        sent = [json.loads(d.body)["type"] for d in receiver.at(path)]
    assert sent[0] == "proposal.proposed", sent  # answered 503
    delivered = sent[1:]  # answered 200
    assert "proposal.approved" in delivered, sent
    assert "proposal.proposed" in delivered, sent


# -- rights ------------------------------------------------------------------------------------------------


async def test_an_author_who_lost_its_rights_may_not_recheck(fresh: Any, tmp_path: Path) -> None:
    """The proposer's token is narrowed to ``read`` (the tokens file is re-read when it changes).
    Expected: it may no longer submit anything, re-checks included (a re-check is a submission: a dry run
    with any edits ``amend`` gives, on the worker)."""
    tmp = tmp_path
    tokens = write_tokens(tmp)
    async with fresh(tokens_file=tokens) as d:
        who = clients_of(d)
        wiki = await new_wiki(d, "narrowed")
        submitted = await propose(d, who["pat"], wiki, [create("wiki/n.md")])
        narrowed = dict(ENTRIES, pat=("Pat Proposer", '{ "*" = "read" }'))
        tokens.write_text(tokens_toml(TOKENS, narrowed) + "\n# narrowed\n")
        refused = await who["pat"].post(
            f"/v1/wikis/{wiki}/batches",
            json={"message": "m", "edits": [create("wiki/o.md")], "dry_run": True},
        )
        expect_error(refused, 403, "FORBIDDEN")  # the narrowed file is in force
        amend = {"0": create("wiki/anything.md", "whatever the reader wants checked\n")}
        answer = await who["pat"].post(f"{submitted['proposal']['url']}/recheck", json={"amend": amend})
        expect_error(answer, 403, "FORBIDDEN")


# -- listing -----------------------------------------------------------------------------------------------


async def test_an_open_proposal_stays_listed_behind_many_newer_ones(fresh: Any, tmp_path: Path) -> None:
    """One open proposal, then 500 newer ones of another proposer still checking (a backlog, or spam).
    Expected: ``GET /v1/wikis/{wiki}/proposals?state=open`` lists the open one (or says the answer is cut
    short with a ``next_cursor``, as every read that is cut short must)."""
    tmp = tmp_path
    async with fresh(tokens_file=write_tokens(tmp)) as d:
        who = clients_of(d)
        wiki = await new_wiki(d, "buried")
        buried = await propose(d, who["pat"], wiki, [create("wiki/open.md")])
        async with d.worker.paused():
            for number in range(500):
                batch = {"message": "spam", "edits": [create(f"wiki/s{number}.md")], "propose": True}
                answer = await who["rita"].post(f"/v1/wikis/{wiki}/batches", json=batch)
                assert answer.status_code == 202, answer.text
            listed = (await who["rob"].get(f"/v1/wikis/{wiki}/proposals", params={"state": "open"})).json()
        ids = [p["proposal_id"] for p in listed["proposals"]]
        assert buried["proposal"]["proposal_id"] in ids or listed.get("next_cursor"), listed


async def test_a_rechecked_proposal_stays_in_its_wikis_list(
    dep: Deployment, who: dict[str, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proposal re-checked on its 12th day (its expiry renewed to day 19), then, on day 14.5, another
    proposal of the wiki is created. Expected: the open proposal is still listed."""
    import worker.jobs.proposals as proposal_store
    import worker.service.proposals as proposals

    wiki = await new_wiki(dep, "renewed")
    day = 24 * 3600 * 1000
    started = int(time.time() * 1000)
    kept = await propose(dep, who["pat"], wiki, [create("wiki/kept.md")])
    answer = await who["pat"].post(f"{kept['proposal']['url']}/recheck")
    assert answer.status_code == 202, answer.text
    await dep.wait(answer.json()["job_id"], who["pat"])
    key = keys.proposal(kept["proposal"]["proposal_id"])  # as if that re-check ran on day 12
    stored = json.loads(await dep.redis.get(key))
    stored["expires_ms"] = started + 19 * day
    await dep.redis.set(key, json.dumps(stored), keepttl=True)
    later = started + 14 * day + day // 2  # day 14.5: another proposal of the wiki
    monkeypatch.setattr(proposal_store, "now_ms", lambda: later)
    monkeypatch.setattr(proposals, "now_ms", lambda: later)
    await propose(dep, who["pat"], wiki, [create("wiki/later.md")])
    monkeypatch.undo()
    proposal = (await who["rob"].get(kept["proposal"]["url"])).json()
    assert proposal["state"] == "open", proposal
    listed = (await who["rob"].get(f"/v1/wikis/{wiki}/proposals")).json()["proposals"]
    assert kept["proposal"]["proposal_id"] in [p["proposal_id"] for p in listed], listed


async def test_an_amended_proposal_counts_its_edits(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """A re-check whose ``amend`` appends an edit. Expected: the proposal's ``edits`` ("how many edits its
    batch has") counts the batch that is now proposed."""
    wiki = await new_wiki(dep, "counted")
    submitted = await propose(dep, who["pat"], wiki, [create("wiki/c1.md")])
    amend = {"1": create("wiki/c2.md")}
    answer = await who["pat"].post(f"{submitted['proposal']['url']}/recheck", json={"amend": amend})
    assert answer.status_code == 202, answer.text
    await dep.wait(answer.json()["job_id"], who["pat"])
    proposal = (await who["rob"].get(submitted["proposal"]["url"])).json()
    assert len(proposal["revisions"][-1]["result"]["applied"]) == 2
    assert proposal["edits"] == 2, proposal


# -- messages ----------------------------------------------------------------------------------------------


async def test_a_cancelled_landing_is_not_reported_as_a_server_error(
    dep: Deployment, who: dict[str, httpx.AsyncClient]
) -> None:
    """The approver cancels the landing job before it starts (it may: it submitted it). Expected: the
    proposal says what happened (the landing was cancelled; nothing landed) with a code the contract
    gives for it, never ``INTERNAL`` (a server error, which it is not)."""
    wiki = await new_wiki(dep, "cancelled")
    submitted = await propose(dep, who["pat"], wiki, [create("wiki/x.md")])
    url = submitted["proposal"]["url"]
    async with dep.worker.paused():
        approved = await who["rita"].post(f"{url}/approve")
        assert approved.status_code == 200, approved.text
        cancelled = await who["rita"].delete(f"/v1/jobs/{approved.json()['job_id']}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
    proposal = (await who["rob"].get(url)).json()
    assert proposal["state"] == "failed", proposal
    error = proposal.get("error") or {}
    assert error.get("code") != "INTERNAL", proposal
    assert "cancel" in error.get("message", ""), proposal
