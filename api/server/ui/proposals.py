"""``/ui/wikis/{wiki}/proposals``: a wiki's proposals, and each one's review page (issue 40, reviewed writes).

The list shows the wiki's proposals, the open ones by default (each with its summary, author, age, and
for an open one its files and warnings counted), refreshed live like the status page. The review page
(a proposal's ``review_url``) shows its summary and state, the latest revision's warnings and checks, and
one unified diff per changed file (``FileDiff``), each in a ``<details>``: collapsed when the file changed
only because links in it were rewritten (``link_only``), open otherwise. Below, approve and reject (with
a comment) for those the service lets decide (``Proposals.permissions``; the
author may withdraw it; the service refuses anyway, and its refusal is shown on the page). While the
proposal is ``checking`` or ``approved`` the page polls ``<page>/state`` like the job page, so after
approving it shows ``landed`` with the commit, or ``stale`` naming the pages that changed.

Deciding is a form ``POST`` to ``<page>/approve`` or ``<page>/reject``, authenticated by the page's
session cookie (``api.server.auth.principal`` accepts it for GET only; these two routes read it
themselves, and nothing else posts with it). A post is accepted only when the browser says it comes from
a page of this server (``Sec-Fetch-Site: same-origin``, or an ``Origin`` of this server: the ``HostGuard``
already refuses a foreign one, ``login._cross_site`` too, and a request with neither is no form of ours)
and carries the page's form token (``form_token``: an HMAC of the session id, which no other site can
read); the cookie is also SameSite=Strict. The pages send ``Referrer-Policy: same-origin``
(``pages.HEADERS``): under ``no-referrer`` a browser sends ``Origin: null`` with a form's POST, which the
``HostGuard`` rightly refuses.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from api.server.auth import UI_COOKIE, Principal
from api.server.deps import AppState, Caller, Svc
from api.server.errors import STATUS
from api.server.routes.wikis import WikiId
from api.server.ui import login, pages
from worker.engine.markdown.links import find_links
from worker.errors import AccessDenied, BatchRejected, ProposalNotFound, WikiqError
from worker.schema.answers import Checks, FileDiff, Proposal
from worker.service import Service
from worker.service.proposals import Permissions

router = APIRouter(prefix="/ui", include_in_schema=False)
ProposalId = Annotated[str, Path(min_length=1, max_length=64)]
Shown = Literal["all", "checking", "open", "failed", "approved", "landed", "stale", "rejected", "expired"]
STATES: tuple[Shown, ...] = (
    "open",
    "checking",
    "approved",
    "landed",
    "stale",
    "failed",
    "rejected",
    "expired",
    "all",
)
HEADERS = pages.HEADERS
MOVING: frozenset[str] = frozenset({"checking", "approved"})  # states the page follows by polling
LISTED = 50  # proposals on the list page
COUNTED = 10  # open ones of them whose files and warnings are counted (each read with its diff)
FORM_BYTES = 64 * 1024  # a decision form: a comment (2000 characters, percent-encoded) and the token
DIFF_LINES = pages.DIFF_LINES  # lines of diff shown per file


# -- what the templates show --------------------------------------------------------------------------


def diff_lines(text: str) -> pages.Diff:
    """A ``FileDiff``'s unified diff as ``(css class, line)`` pairs (the classes of the job page's diff).

    Lines before the first hunk (``--- a/...``, ``+++ b/...``, ``rename from``) are headers; after it, the
    first character decides, so a removed ``---`` line (a markdown rule) is a deletion, not a header."""
    lines: list[tuple[str, str]] = []
    in_hunk = False
    all_lines = text.splitlines()
    for line in all_lines[:DIFF_LINES]:
        if line.startswith("@@"):
            in_hunk = True
            lines.append(("hunk", line))
        elif not in_hunk or line.startswith("\\"):
            lines.append(("meta-line", line))
        elif line.startswith("+"):
            lines.append(("add", line))
        elif line.startswith("-"):
            lines.append(("del", line))
        else:
            lines.append(("ctx", line))
    return pages.Diff(lines, len(all_lines) > DIFF_LINES)


def _masked(line: str) -> str:
    """``line`` with every link's destination (its target to the link's end: fragment, title, a
    wikilink's label and closing brackets) replaced by one NUL, so two lines that differ only there are
    equal."""
    out, last = [], 0
    for link in find_links(line):
        out.append(line[last : link.target_start])
        out.append("\0")
        last = link.end
    out.append(line[last:])
    return "".join(out)


def links_only_diff(diff: str) -> bool:
    """True when a unified diff changes nothing but link destinations: it has a hunk, and in every hunk
    each run of removed lines is followed by as many added lines, the i-th added line equal to the i-th
    removed one once each line's link destinations are masked (``_masked``). A created, deleted or
    truncated file, an added or removed line without a partner, or any other change is not links only."""
    removed: list[str] = []
    added: list[str] = []
    hunks = 0

    def paired() -> bool:
        ok = len(removed) == len(added) and all(
            _masked(old) == _masked(new) for old, new in zip(removed, added, strict=True)
        )
        removed.clear()
        added.clear()
        return ok

    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("@@"):
            in_hunk, hunks = True, hunks + 1
            if not paired():
                return False
        elif not in_hunk:
            if line.startswith(("--- /dev/null", "+++ /dev/null", "Binary files")):
                return False
        elif line.startswith("-"):
            if added and not paired():  # a removal after additions starts a new run
                return False
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        elif not line.startswith("\\") and not paired():
            return False
    return hunks > 0 and paired()


def link_only(file: FileDiff, checks: Checks | None) -> bool:
    """Whether a changed file is shown collapsed, as changed only by link rewriting.

    The dry run's checks say it (``FileCheck.named`` is False for a file no edit named, changed only
    because ``rewrite_links`` rewrote links in it). Without a check for the file (a check that did not
    run), its diff decides (``links_only_diff``); a truncated diff is never links only."""
    if checks is not None:
        for found in checks.files:
            if found.path == file.path:
                return not found.named
    return not file.truncated and links_only_diff(file.diff)


def _file_view(file: FileDiff, checks: Checks | None) -> dict[str, Any]:
    check = next((c for c in checks.files if c.path == file.path), None) if checks is not None else None
    return {
        "path": file.path,
        "old_path": file.old_path,
        "change": check.change if check is not None else None,
        "added": check.added if check is not None else None,
        "removed": check.removed if check is not None else None,
        "links": check.links if check is not None else None,
        "link_only": link_only(file, checks),
        "diff": diff_lines(file.diff),
        "truncated": bool(file.truncated),
    }


def _clock(stamp: str | None) -> str:
    return "" if not stamp else f"{stamp[:10]} {stamp[11:19]}"


def proposal_view(proposal: Proposal) -> dict[str, Any]:
    """What the templates show of a proposal: its summary, state, decision and outcome, and its latest
    revision's review (warnings, checks and one diff per file) when the proposal was read with diffs."""
    title, _, rest = proposal.message.strip().partition("\n")
    latest = proposal.revisions[-1] if proposal.revisions else None
    result = latest.result if latest is not None else None
    checks = result.checks if result is not None else None
    decision = proposal.decision
    review: dict[str, Any] = {
        "status": latest.status if latest is not None else "expired",
        "error": latest.error.model_dump(mode="json") if latest is not None and latest.error else None,
        "warnings": [w.model_dump(mode="json") for w in (result.warnings or [])] if result else [],
        "files": [_file_view(f, checks) for f in (result.diff or [])] if result else [],
        "checks": None if checks is None else checks.model_dump(mode="json"),
        "has_result": result is not None,
    }
    review["link_only"] = sum(f["link_only"] for f in review["files"])
    return {
        "id": proposal.proposal_id,
        "wiki": proposal.wiki,
        "state": proposal.state,
        "title": title.strip() or "(no message)",
        "body": rest.strip(),
        "message": proposal.message,
        "author": f"{proposal.author.name} <{proposal.author.email}>",
        "created_at": proposal.created_at,
        "created_clock": _clock(proposal.created_at),
        "expires_at": proposal.expires_at,
        "edits": proposal.edits,
        "revision": latest.revision if latest is not None else 0,
        "revisions": [
            r.model_dump(mode="json", include={"revision", "job_id", "status", "checked_at"})
            for r in proposal.revisions
        ],
        "decision": None
        if decision is None
        else {
            "by": f"{decision.by.name} <{decision.by.email}>",
            "at": decision.at,
            "approved": decision.approved,
            "comment": decision.comment,
        },
        "job_id": proposal.job_id,
        "commit": proposal.commit,
        "stale_paths": proposal.stale_paths or [],
        "error": None if proposal.error is None else proposal.error.model_dump(mode="json"),
        "review": review,
        "url": page_url(proposal.wiki, proposal.proposal_id),
    }


def page_url(wiki: str, proposal_id: str) -> str:
    """The review page of a proposal (``worker.service.proposals.review_url``)."""
    return f"/ui/wikis/{quote(wiki, safe='')}/proposals/{quote(proposal_id, safe='')}"


# -- who may decide -----------------------------------------------------------------------------------


async def actions_for(svc: Service, caller: Principal, proposal: Proposal) -> Permissions:
    """The buttons the page offers ``caller``: what the service lets it do with ``proposal`` now."""
    return await svc.proposals.permissions(caller, proposal.proposal_id)


# -- forms --------------------------------------------------------------------------------------------


def form_token(session: str | None) -> str:
    """The token a decision form carries: an HMAC of the browser's session id (empty without a session,
    in single-user mode), which a page of another site cannot know."""
    if not session:
        return ""
    return hmac.new(session.encode(), b"wikiq-ui-decision", hashlib.sha256).hexdigest()


def _from_own_page(request: Request) -> bool:
    """True when the browser says this POST comes from a page of this server (see the module)."""
    if login._cross_site(request):
        return False
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    return request.headers.get("origin") is not None


async def _poster(request: Request) -> Principal:
    """The principal deciding through a form: its session's (the single user's without a tokens file)."""
    wikiq: AppState = request.app.state.wikiq
    if not _from_own_page(request):
        raise AccessDenied("decide from this server's own review page", code="FORBIDDEN")
    session = request.cookies.get(UI_COOKIE)
    if wikiq.auth.path is None and not session:
        return wikiq.auth.single_user()
    found = await wikiq.sessions.principal(session, wikiq.auth)
    if found is None:
        raise AccessDenied("sign in again at /ui/login", code="UNAUTHORIZED")
    return found


async def _form(request: Request) -> dict[str, str] | None:
    """The form's fields (the first value of each), or None when the body is larger than a form of ours."""
    body = await request.body()
    if len(body) > FORM_BYTES:
        return None
    text = body.decode("utf-8", "replace")
    return {name: values[0] for name, values in parse_qs(text, keep_blank_values=True).items()}


# -- routes -------------------------------------------------------------------------------------------


def _page(html: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(html, status_code=status, headers=HEADERS)


async def _listing(svc: Service, caller: Principal, wiki: str, state: Shown) -> dict[str, Any]:
    found = await svc.proposals.list(caller, wiki, None if state == "all" else state, LISTED)
    shown, counted = [], 0
    for proposal in found.proposals:
        if proposal.state == "open" and counted < COUNTED:  # its files and warnings, from its check
            proposal = await svc.proposals.view(caller, proposal.proposal_id, diffs=True)
            counted += 1
        shown.append(proposal_view(proposal))
    return {"wiki": wiki, "state": state, "states": STATES, "proposals": shown}


@router.get("/wikis/{wiki}/proposals", response_class=HTMLResponse)
async def list_page(
    request: Request, wiki: WikiId, svc: Svc, caller: Caller, state: Annotated[Shown, Query()] = "open"
) -> Response:
    """A wiki's proposals (the open ones unless ``state`` says otherwise), newest first, live."""
    view = await _listing(svc, caller, wiki, state)
    poll = f"/ui/wikis/{quote(wiki, safe='')}/proposals/state?state={state}"
    html = pages._render(
        "proposals.html",
        title=f"proposals of {wiki}",
        poll_url=poll,
        done=False,
        signed_in=pages._signed_in(request),
        **view,
    )
    return _page(html)


@router.get("/wikis/{wiki}/proposals/state")
async def list_state(
    wiki: WikiId, svc: Svc, caller: Caller, state: Annotated[Shown, Query()] = "open"
) -> JSONResponse:
    """The list's part, for its live refresh."""
    view = await _listing(svc, caller, wiki, state)
    parts = {"proposals": pages._render("_proposals.html", **view)}
    return JSONResponse({"parts": parts, "done": False}, headers=HEADERS)


async def _visible(svc: Service, caller: Principal, wiki: str, proposal_id: str, diffs: bool) -> Proposal:
    """The proposal, if ``caller`` may read it and it is of ``wiki``; else ``PROPOSAL_NOT_FOUND``."""
    proposal = await svc.proposals.view(caller, proposal_id, diffs)
    if proposal.wiki != wiki:  # the same answer as for a proposal that does not exist
        raise ProposalNotFound(f"no proposal {proposal_id[:64]!r} in this wiki")
    return proposal


async def _proposal(
    svc: Service, caller: Principal, wiki: str, proposal_id: str
) -> tuple[dict[str, Any], Permissions]:
    proposal = await _visible(svc, caller, wiki, proposal_id, diffs=True)
    return proposal_view(proposal), await actions_for(svc, caller, proposal)


def _review_page(
    request: Request, view: dict[str, Any], actions: Permissions, refusal: dict[str, Any] | None = None
) -> str:
    moving = view["state"] in MOVING
    poll = f"{view['url']}/state" + ("?diff=1" if view["state"] == "checking" else "") if moving else ""
    return pages._render(
        "proposal.html",
        title=f"proposal {view['title'][:60]}",
        poll_url=poll,
        done=not moving,
        signed_in=pages._signed_in(request),
        p=view,
        actions=actions,
        form_token=form_token(request.cookies.get(UI_COOKIE)),
        refusal=refusal,
    )


@router.get("/wikis/{wiki}/proposals/{proposal_id}", response_class=HTMLResponse)
async def review_page(
    request: Request, wiki: WikiId, proposal_id: ProposalId, svc: Svc, caller: Caller
) -> Response:
    """A proposal's review page: summary, state, warnings, checks, a diff per file, approve and reject."""
    view, actions = await _proposal(svc, caller, wiki, proposal_id)
    return _page(_review_page(request, view, actions))


@router.get("/wikis/{wiki}/proposals/{proposal_id}/state")
async def review_state(
    request: Request,
    wiki: WikiId,
    proposal_id: ProposalId,
    svc: Svc,
    caller: Caller,
    diff: Annotated[bool, Query()] = False,
) -> JSONResponse:
    """The review page's parts, for its refresh while the proposal is checking or approved; ``done`` once
    it is in a state only a person changes. The review (diffs) only with ``diff``: it does not change
    once checked, and re-rendering it would fold what the reader unfolded."""
    proposal = await _visible(svc, caller, wiki, proposal_id, diffs=diff)
    view, actions = proposal_view(proposal), await actions_for(svc, caller, proposal)
    context = {"p": view, "actions": actions, "form_token": form_token(request.cookies.get(UI_COOKIE))}
    parts = {
        "proposal-state": pages._render("_proposal_state.html", **context),
        "proposal-actions": pages._render("_proposal_actions.html", **context),
    }
    if diff:
        parts["proposal-review"] = pages._render("_proposal_review.html", **context)
    done = view["state"] not in MOVING
    return JSONResponse({"parts": parts, "done": done, "state": view["state"]}, headers=HEADERS)


async def _decide(request: Request, wiki: str, proposal_id: str, svc: Service, approve: bool) -> Response:
    """Approve or reject from the review page's form; then back to the page (303), or the page again
    with the refusal (the service's message, or the form's) and its status. A post not from this server's
    page is refused outright (403), one without a session goes to the sign-in form."""
    try:
        caller = await _poster(request)
    except AccessDenied as exc:
        if exc.code == "UNAUTHORIZED":
            return RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
        raise
    await _visible(svc, caller, wiki, proposal_id, diffs=False)  # 404 unless the caller may read it
    form = await _form(request)
    refused: WikiqError | None = None
    if form is None:
        refused = BatchRejected("INVALID_BATCH", f"the form is larger than {FORM_BYTES} bytes")
    elif not hmac.compare_digest(form.get("form_token", ""), form_token(request.cookies.get(UI_COOKIE))):
        refused = AccessDenied("this form is out of date: reload the page and decide again")
    else:
        comment = form.get("comment", "").strip() or None
        try:
            if approve:
                await svc.proposals.approve(caller, proposal_id, comment)
            else:
                await svc.proposals.reject(caller, proposal_id, comment)
        except ProposalNotFound:
            raise
        except WikiqError as exc:
            refused = exc
    if refused is None:
        return RedirectResponse(page_url(wiki, proposal_id), status_code=303, headers=HEADERS)
    view, actions = await _proposal(svc, caller, wiki, proposal_id)
    refusal = {"code": refused.code, "message": refused.message}
    return _page(_review_page(request, view, actions, refusal), STATUS.get(refused.code, 422))


@router.post("/wikis/{wiki}/proposals/{proposal_id}/approve")
async def approve(request: Request, wiki: WikiId, proposal_id: ProposalId, svc: Svc) -> Response:
    """Approve the proposal (the review page's form)."""
    return await _decide(request, wiki, proposal_id, svc, approve=True)


@router.post("/wikis/{wiki}/proposals/{proposal_id}/reject")
async def reject(request: Request, wiki: WikiId, proposal_id: ProposalId, svc: Svc) -> Response:
    """Reject the proposal, or withdraw it when it is the caller's own (the review page's form)."""
    return await _decide(request, wiki, proposal_id, svc, approve=False)
