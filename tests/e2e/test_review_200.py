"""The whole reviewed-write path at the size agents use it, with real processes and a real browser: an
agent holding only ``propose`` scripts the 200-page refactor of ``test_mcp_refactor_200`` over MCP
(``check_batch``, then ``write_batch`` of its plan), which becomes a proposal and lands nothing; a reviewer
signs in to ``/ui``, reads the review page (a diff per changed file) and approves; plain git then shows one
commit on the old head, authored by the agent's principal, whose tree is the proposal's reviewed revision
(``refs/proposals/<id>``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.service import Service
from tests.e2e.test_mcp import connect
from tests.e2e.test_mcp_refactor_200 import Counted, generated_wiki, plan_refactor, seed_wiki
from tests.gitutil import git_text
from tests.principals import tokens_toml

TOKENS = {"root": "tok-root", "pia": "tok-pia", "rae": "tok-rae"}
ENTRIES = {
    "root": ("Root", '{ "*" = "admin" }'),
    "pia": ("Pia Agent", '{ "*" = "propose" }'),
    "rae": ("Rae Reviewer", '{ "*" = "write" }'),
}
WAIT = 60_000  # ms the browser waits for what the worker does


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("review-200")
    tokens = root / "tokens.toml"
    tokens.write_text(tokens_toml(TOKENS, ENTRIES))
    service = Service(root, WIKIQ_TOKENS_FILE=str(tokens)).start(workers=1)
    service.client.headers["authorization"] = f"Bearer {TOKENS['root']}"
    yield service
    service.stop()


async def propose_refactor(secured: Service, wiki: str) -> dict[str, Any]:
    """The agent's part, over MCP stdio with the propose-only token: check the refactor, then write its
    plan; write_batch's answer."""
    async with connect(secured, "stdio", token=TOKENS["pia"]) as client:
        agent = Counted(client)
        edits = await plan_refactor(agent, wiki, broken=False)
        message = "Refactor the platform docs"
        checked = await agent.call("check_batch", wiki=wiki, message=message, edits=edits)
        assert checked["status"] == "succeeded" and checked["warnings"] == []
        return await agent.call("write_batch", wiki=wiki, message=message, plan=checked["plan"])


def test_an_agent_proposes_a_200_page_refactor_and_a_reviewer_approves_it_in_the_browser(
    secured: Service, browser: Browser
) -> None:
    wiki = "review-200"
    seed_wiki(secured, wiki, generated_wiki())
    repo = secured.data / "wikis" / f"{wiki}.git"
    before = git_text(repo, "rev-parse", "main").strip()
    with ThreadPoolExecutor(1) as thread:  # the browser's sync API holds this thread's event loop
        done = thread.submit(asyncio.run, propose_refactor(secured, wiki)).result()
    proposal = done["proposal"]
    assert done["commit"] is None and proposal["state"] == "open", done
    assert git_text(repo, "rev-parse", "main").strip() == before  # proposed: nothing landed
    reviewed = git_text(repo, "rev-parse", f"refs/proposals/{proposal['id']}").strip()
    assert git_text(repo, "rev-parse", f"{reviewed}^").strip() == before
    body = secured.client.get(f"/v1/proposals/{proposal['id']}").json()
    files = [entry["path"] for entry in body["revisions"][-1]["result"]["diff"]]
    assert len(files) >= 180 and not any(e.get("truncated") for e in body["revisions"][-1]["result"]["diff"])

    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{secured.url}/ui/login")
    page.fill("input[name=token]", TOKENS["rae"])
    page.click("button[type=submit]")
    page.goto(f"{secured.url}{proposal['review_url']}")
    expect(page.locator("#proposal-status")).to_have_text("open")
    expect(page.locator("details.file")).to_have_count(len(files))  # one diff per changed file
    page.locator("button.approve").click()
    expect(page.locator("#proposal-status")).to_have_text("landed", timeout=WAIT)
    context.close()

    after = git_text(repo, "rev-parse", "main").strip()
    assert git_text(repo, "rev-list", f"{before}..{after}").split() == [after]  # one commit
    assert git_text(repo, "rev-parse", f"{after}^{{tree}}") == git_text(
        repo, "rev-parse", f"{reviewed}^{{tree}}"
    )
    author = git_text(repo, "log", "-1", "--format=%an|%(trailers:key=Approved-by,valueonly)", after).strip()
    assert author == "Pia Agent|Rae Reviewer <rae@example.org>"
