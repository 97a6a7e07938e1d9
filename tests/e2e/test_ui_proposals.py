"""The proposals' review pages in a real browser (Debian's chromium via Playwright), over real processes.

A proposer's batch appears in its wiki's list; a reviewer opens it, reads the diff (a file changed only by
link rewriting folded), approves, and the page shows it landed with the commit plain git has; a reader
and the author see no approve button and their post is refused with the service's message; a proposal
approved after another writer changed its page turns stale naming the page; a reviewer rejects with a
comment, and a second reviewer's late approval shows the service's refusal.

Principals (tokens are the dict's values): ``root`` admin everywhere; ``pat`` propose on ``pw``; ``rita``
and ``rex`` write on ``pw``; ``rob`` read on ``pw``. One deployment and one browser serve the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.e2e.service import Service
from tests.principals import tokens_toml

WIKI = "pw"
TOKENS = {"root": "tok-root", "pat": "tok-pat", "rita": "tok-rita", "rex": "tok-rex", "rob": "tok-rob"}
ENTRIES = {
    "root": ("Root Admin", '{ "*" = "admin" }'),
    "pat": ("Pat Proposer", '{ "pw" = "propose" }'),
    "rita": ("Rita Reviewer", '{ "pw" = "write" }'),
    "rex": ("Rex Reviewer", '{ "pw" = "write" }'),
    "rob": ("Rob Reader", '{ "pw" = "read" }'),
}
LINE = "Proposed from the browser test <b>not bold</b>"
WAIT = 30_000  # ms Playwright waits for what a worker does


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with the module's tokens file and the wiki ``pw`` (root's client)."""
    root = tmp_path_factory.mktemp("ui-proposals")
    tokens = root / "tokens.toml"
    tokens.write_text(tokens_toml(TOKENS, ENTRIES))
    service = Service(root, WIKIQ_TOKENS_FILE=str(tokens)).start(workers=1)
    service.client.headers["authorization"] = f"Bearer {TOKENS['root']}"
    service.create_wiki(WIKI)
    yield service
    service.stop()


@pytest.fixture
def contexts(browser: Browser) -> Iterator[list[BrowserContext]]:
    """The browser contexts a test opens (one per principal), closed after it."""
    opened: list[BrowserContext] = []
    yield opened
    for context in opened:
        context.close()


def sign_in(secured: Service, browser: Browser, contexts: list[BrowserContext], who: str) -> Page:
    """A page of a fresh browser context signed in to /ui as ``who`` through the sign-in form."""
    context = browser.new_context()
    contexts.append(context)
    page = context.new_page()
    page.goto(f"{secured.url}/ui/login")
    page.fill("input[name=token]", TOKENS[who])
    page.click("button[type=submit]")
    page.wait_for_url(f"{secured.url}/ui")
    return page


def as_(secured: Service, who: str) -> httpx.Client:
    return httpx.Client(base_url=secured.url, headers={"authorization": f"Bearer {TOKENS[who]}"}, timeout=30)


def propose(
    secured: Service, edits: list[dict[str, Any]], message: str = "Proposed change", who: str = "pat"
) -> dict[str, Any]:
    """Submit ``edits`` as ``who`` (a proposer; a writer says ``propose``), wait for its check: the
    proposal reference."""
    batch = {"message": message, "edits": edits, "propose": True}
    with as_(secured, who) as client:
        answer = client.post(f"/v1/wikis/{WIKI}/batches", json=batch)
        assert answer.status_code == 202, answer.text
        proposal = dict(answer.json()["proposal"])
        assert proposal["review_url"] == f"/ui/wikis/{WIKI}/proposals/{proposal['proposal_id']}"
    secured.wait(answer.json()["job_id"])
    return proposal


def state_of(secured: Service, proposal: dict[str, Any]) -> dict[str, Any]:
    answer = secured.client.get(proposal["url"], params={"diffs": "false"})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def seed(secured: Service, files: dict[str, str]) -> dict[str, str]:
    """Create ``files`` as root (one commit); their versions."""
    edits = [{"op": "create", "path": path, "content": content} for path, content in files.items()]
    job = secured.apply(WIKI, {"message": "seed", "edits": edits})
    assert job["status"] == "succeeded", job
    return {path: secured.page(WIKI, path)["version"] for path in files}


def post_form(page: Page, action: str, token: str | None = None) -> int:
    """Post a decision form to ``action`` from ``page`` as the browser would (its cookie, its Origin),
    with the page's form token unless ``token`` says otherwise; the answer's status (the page shows it)."""
    script = """([action, token]) => {
        const form = document.createElement("form");
        form.method = "post";
        form.action = action;
        const field = document.createElement("input");
        field.type = "hidden"; field.name = "form_token"; field.value = token;
        form.appendChild(field);
        document.body.appendChild(form);
        form.submit();
    }"""
    if token is None:
        token = page.locator("#proposal").get_attribute("data-form-token") or ""
    with page.expect_response(lambda r: r.url.endswith(action) and r.request.method == "POST") as info:
        page.evaluate(script, [action, token])
    page.wait_for_load_state()
    return info.value.status


def test_a_reviewer_reads_the_diff_approves_and_sees_the_commit(
    secured: Service, browser: Browser, contexts: list[BrowserContext], tmp_path: Path
) -> None:
    versions = seed(secured, {"wiki/alpha.md": "# Alpha\n", "wiki/linker.md": "# Linker\n\nSee [[alpha]].\n"})
    head = secured.git(WIKI, "rev-parse", "main").strip()
    edits = [
        {"op": "create", "path": "wiki/new.md", "content": f"# New\n\n{LINE}\n"},
        {
            "op": "rename",
            "path": "wiki/alpha.md",
            "new_path": "wiki/beta.md",
            "expected_version": versions["wiki/alpha.md"],
            "rewrite_links": True,
        },
    ]
    proposal = propose(secured, edits, "Add a page, rename alpha\n\nThe body says <i>why</i>.")
    pid = proposal["proposal_id"]

    rita = sign_in(secured, browser, contexts, "rita")
    rita.locator(f'tr[data-wiki="{WIKI}"] a.proposals').click()
    rita.wait_for_url(f"**/ui/wikis/{WIKI}/proposals")
    listed = rita.locator(f'li[data-proposal="{pid}"]')
    expect(listed).to_have_attribute("data-state", "open", timeout=WAIT)
    expect(listed.locator(".warnings-count")).to_contain_text("warning")
    listed.locator("a.title").click()
    rita.wait_for_url(f"**{proposal['review_url']}")

    expect(rita.locator(".proposal-title")).to_have_text("Add a page, rename alpha")
    expect(rita.locator(".message").first).to_have_text("The body says <i>why</i>.")  # text, not markup
    expect(rita.locator("#proposal-status")).to_have_text("open")
    expect(rita.locator(".warnings")).to_contain_text("NOT_IN_INDEX")
    created = rita.locator('details.file[data-path="wiki/new.md"]')
    expect(created).to_have_attribute("open", "")
    expect(created.locator(".diff .add").last).to_have_text("+" + LINE)
    assert rita.locator(".diff b, .message i").count() == 0  # page text is never markup
    relinked = rita.locator('details.file[data-path="wiki/linker.md"]')
    expect(relinked).to_have_class("file link-only")
    expect(relinked).not_to_have_attribute("open", "")
    expect(relinked.locator(".diff")).to_be_hidden()  # folded
    relinked.locator("summary").click()
    expect(relinked.locator(".diff .add")).to_have_text("+See [[beta]].")
    expect(rita.locator('details.file[data-path="wiki/beta.md"]')).to_have_attribute("open", "")
    rita.screenshot(path=str(tmp_path / "review.png"), full_page=True)

    assert secured.git(WIKI, "rev-parse", "main").strip() == head  # nothing landed yet
    rita.fill("#comment", "looks right")
    rita.locator("button.approve").click()
    expect(rita.locator("#proposal-status")).to_have_text("landed", timeout=WAIT)
    commit = rita.locator("#proposal-commit").inner_text()
    expect(rita.locator("#decision")).to_contain_text("Rita Reviewer")
    expect(rita.locator("#decision-comment")).to_have_text("looks right")
    assert state_of(secured, proposal)["commit"] == commit
    assert secured.git(WIKI, "rev-parse", "main").strip() == commit
    assert secured.git(WIKI, "rev-parse", f"{commit}^").strip() == head
    shown = secured.git(WIKI, "log", "-1", "--format=%an%n%(trailers:key=Approved-by,valueonly)", commit)
    assert shown.split("\n")[:2] == ["Pat Proposer", "Rita Reviewer <rita@example.org>"]
    assert secured.git(WIKI, "show", f"{commit}:wiki/linker.md") == "# Linker\n\nSee [[beta]].\n"
    expect(rita.locator("#proposal-actions button")).to_have_count(0)
    expect(rita.locator("#live")).to_have_text("final")

    rita.goto(f"{secured.url}/ui/wikis/{WIKI}/proposals?state=landed")
    expect(rita.locator(f'li[data-proposal="{pid}"] .line2')).to_contain_text(commit[:10])


def test_a_reader_and_the_author_may_not_approve(
    secured: Service, browser: Browser, contexts: list[BrowserContext], tmp_path: Path
) -> None:
    """rob may only read; rex may write but proposed it himself (a writer's batch saying propose)."""
    edits = [{"op": "create", "path": "wiki/unsure.md", "content": "# Unsure\n"}]
    proposal = propose(secured, edits, who="rex")
    page_url = f"{secured.url}{proposal['review_url']}"
    approve = f"{proposal['review_url']}/approve"

    rob = sign_in(secured, browser, contexts, "rob")
    rob.goto(page_url)
    expect(rob.locator("#proposal-status")).to_have_text("open")
    expect(rob.locator('details.file[data-path="wiki/unsure.md"] .diff .add')).to_have_text("+# Unsure")
    expect(rob.locator("#proposal-actions button")).to_have_count(0)
    expect(rob.locator("#why-not")).to_contain_text("does not allow write")
    assert post_form(rob, approve) == 403
    expect(rob.locator("#refusal")).to_contain_text("FORBIDDEN: your token does not allow write on this wiki")
    assert post_form(rob, approve, token="forged") == 403
    expect(rob.locator("#refusal")).to_contain_text("this form is out of date")

    rex = sign_in(secured, browser, contexts, "rex")
    rex.goto(page_url)
    expect(rex.locator("#proposal-status")).to_have_text("open")
    expect(rex.locator("button.approve")).to_have_count(0)
    expect(rex.locator("button.reject")).to_have_text("Withdraw")  # the author may withdraw it
    expect(rex.locator("#why-not")).to_contain_text("you proposed it")
    assert post_form(rex, approve) == 403
    expect(rex.locator("#refusal")).to_contain_text("FORBIDDEN: you proposed it")
    rex.screenshot(path=str(tmp_path / "refused.png"), full_page=True)
    expect(rex.locator("#proposal-status")).to_have_text("open")
    assert state_of(secured, proposal)["state"] == "open"

    # the session cookie writes nothing but through these forms, and never from another site
    cookies = {c["name"]: c["value"] for c in rex.context.cookies()}
    with httpx.Client(base_url=secured.url, cookies=cookies, timeout=30) as raw:
        foreign = raw.post(approve, headers={"origin": "http://evil.example"})
        assert foreign.status_code == 403, foreign.text
        assert raw.post(approve).status_code == 403  # neither Origin nor Sec-Fetch-Site: no form of ours
        assert raw.post(f"{proposal['url']}/reject").status_code == 401  # the API wants a token


def test_a_proposal_approved_after_its_page_changed_turns_stale(
    secured: Service, browser: Browser, contexts: list[BrowserContext], tmp_path: Path
) -> None:
    versions = seed(secured, {"wiki/s.md": "# S\n\nold text\n"})
    edit = {
        "op": "replace",
        "path": "wiki/s.md",
        "old": "old text",
        "new": "proposed text",
        "expected_version": versions["wiki/s.md"],
    }
    proposal = propose(secured, [edit])
    rita = sign_in(secured, browser, contexts, "rita")
    rita.goto(f"{secured.url}{proposal['review_url']}")
    expect(rita.locator('details.file[data-path="wiki/s.md"] .diff .add')).to_have_text("+proposed text")

    other = {"op": "append", "path": "wiki/s.md", "content": "\nmore\n"}
    assert secured.apply(WIKI, {"message": "meanwhile", "edits": [other]})["status"] == "succeeded"
    head = secured.git(WIKI, "rev-parse", "main").strip()
    rita.locator("button.approve").click()
    expect(rita.locator("#proposal-status")).to_have_text("stale", timeout=WAIT)
    expect(rita.locator("#outcome .stale-paths li")).to_have_text(["wiki/s.md"])
    expect(rita.locator("button.approve")).to_have_count(0)  # only its author can re-check it
    expect(rita.locator("button.reject")).to_have_text("Reject")  # a stale proposal may still be rejected
    assert secured.git(WIKI, "rev-parse", "main").strip() == head  # nothing landed
    assert state_of(secured, proposal)["stale_paths"] == ["wiki/s.md"]
    rita.screenshot(path=str(tmp_path / "stale.png"), full_page=True)
    rita.locator("button.reject").click()
    expect(rita.locator("#proposal-status")).to_have_text("rejected", timeout=WAIT)


def test_a_reviewer_rejects_with_a_comment_and_a_late_approval_is_refused(
    secured: Service, browser: Browser, contexts: list[BrowserContext], tmp_path: Path
) -> None:
    proposal = propose(secured, [{"op": "create", "path": "wiki/no.md", "content": "# No\n"}])
    page_url = f"{secured.url}{proposal['review_url']}"
    rex = sign_in(secured, browser, contexts, "rex")
    rex.goto(page_url)
    expect(rex.locator("button.approve")).to_be_visible()
    rita = sign_in(secured, browser, contexts, "rita")
    rita.goto(page_url)
    comment = "Not this way: <i>see the style guide</i>"
    rita.fill("#comment", comment)
    rita.locator("button.reject").click()
    expect(rita.locator("#proposal-status")).to_have_text("rejected")
    expect(rita.locator("#decision-comment")).to_have_text(comment)
    expect(rita.locator("#outcome")).to_contain_text("Rejected by Rita Reviewer")
    assert rita.locator("#proposal-state i").count() == 0
    decided = state_of(secured, proposal)
    assert decided["state"] == "rejected" and decided["decision"]["comment"] == comment

    with rex.expect_response(lambda r: r.url.endswith("/approve")) as info:
        rex.locator("button.approve").click()  # a page read before the rejection
    assert info.value.status == 409
    expect(rex.locator("#refusal")).to_contain_text("PROPOSAL_NOT_OPEN")
    expect(rex.locator("#refusal")).to_contain_text("only an open proposal can be approved")
    expect(rex.locator("#proposal-status")).to_have_text("rejected")

    rex.goto(f"{secured.url}/ui/wikis/{WIKI}/proposals")
    expect(rex.locator("h1")).to_have_text(f"Proposals of {WIKI}")
    expect(rex.locator(f'li[data-proposal="{proposal["proposal_id"]}"]')).to_have_count(0)  # open only
    rex.locator(".filters a", has_text="all").click()
    rex.wait_for_url("**/proposals?state=all")
    rex.screenshot(path=str(tmp_path / "list.png"), full_page=True)
    rex.locator(".filters a", has_text="rejected").click()
    expect(rex.locator(f'li[data-proposal="{proposal["proposal_id"]}"]')).to_have_attribute(
        "data-state", "rejected"
    )
    rex.locator("form.logout button").click()
    rex.wait_for_url("**/ui/login")
