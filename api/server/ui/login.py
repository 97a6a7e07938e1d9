"""Signing in to ``/ui`` from a browser, which cannot send a bearer header.

``POST /ui/login`` checks the token like the API does and starts a server-side session
(``api.ui_sessions``): the HttpOnly, SameSite=Strict cookie scoped to ``/ui`` holds only a random session id,
never the token; it is ``Secure`` whenever the request came over TLS, directly or through a proxy named in
``WIKIQ_TRUSTED_PROXIES`` (whose ``X-Forwarded-Proto`` is then the request's scheme). ``POST /ui/logout``
ends the session in Redis (the cookie is worthless from then on, wherever a copy of it is) and clears it.
``api.auth.principal`` accepts that cookie for GET requests under ``/ui`` only, so it can never submit,
cancel or redeliver anything. The login form refuses a cross-origin post (``Origin`` or
``Referer`` of another site, or ``Sec-Fetch-Site: cross-site``), so no other site can sign a browser in
under its own token (login CSRF). Sign-in attempts are limited per client address (the peer, or what a
proxy of ``WIKIQ_TRUSTED_PROXIES`` names) and per token, right or wrong (``WIKIQ_UI_LOGIN_ATTEMPTS`` per
``WIKIQ_UI_LOGIN_WINDOW_SECONDS``): beyond, ``429 RATE_LIMITED`` with ``Retry-After``, and no session.
"""

from __future__ import annotations

from html import escape
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.server.auth import UI_COOKIE
from api.server.ui.sessions import SESSION_SECONDS
from worker.errors import AccessDenied
from worker.service.ratelimit import check_sign_in

router = APIRouter(prefix="/ui", include_in_schema=False)
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",  # no-referrer would make the form post "Origin: null", refused
    "X-Content-Type-Options": "nosniff",
}
_FORM = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>sign in · wikiq</title>
<link rel="stylesheet" href="/ui/static/ui.css"></head><body><main>
<h1>wikiq</h1><p>{note}</p>
<form method="post" action="/ui/login"><label>Token <input name="token" type="password" autocomplete="off"
required autofocus></label> <button type="submit">Sign in</button></form></main></body></html>"""


@router.get("/login", response_class=HTMLResponse)
async def login_form() -> HTMLResponse:
    """The sign-in form."""
    return HTMLResponse(_FORM.format(note="Paste your wikiq token to see the status page."), headers=HEADERS)


def _cross_site(request: Request) -> bool:
    """True when the browser says the request comes from another origin than this server's."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return source == "null"  # an opaque origin (sandboxed frame, data: URL) is never ours
    parts = urlsplit(source)
    own = urlsplit(str(request.base_url))
    return (parts.scheme, parts.netloc) != (own.scheme, own.netloc)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token; on success start a session and go to /ui, else show the form again (401).

    A post from another origin is refused with 403 before the token is looked at; an attempt past the
    sign-in limit (per client address, then per token) with ``429 RATE_LIMITED`` before the token is
    checked.
    """
    if _cross_site(request):
        note = escape("Sign in from this server's own page.")
        return HTMLResponse(_FORM.format(note=note), status_code=403, headers=HEADERS)
    body = (await request.body())[:4096].decode("utf-8", "replace")
    token = (parse_qs(body).get("token") or [""])[0].strip()
    wikiq = request.app.state.wikiq
    settings = wikiq.service.resources.settings
    address = request.client.host if request.client is not None else ""
    await check_sign_in(
        wikiq.service.resources.redis,
        address,
        token,
        settings.ui_login_attempts,
        settings.ui_login_window_seconds,
    )
    try:
        request.app.state.wikiq.auth.authenticate(f"Bearer {token}")
    except AccessDenied:
        note = escape("That token is not known here.")
        return HTMLResponse(_FORM.format(note=note), status_code=401, headers=HEADERS)
    session = await request.app.state.wikiq.sessions.create(token)
    answer = RedirectResponse("/ui", status_code=303, headers=HEADERS)
    answer.set_cookie(
        UI_COOKIE,
        session,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        path="/ui",
        secure=request.url.scheme == "https",
    )
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End this browser's session (its id is forgotten in Redis) and clear the cookie; then the form.

    A post from another origin is refused before (``api.server.hosts``), and the SameSite=Strict cookie
    is not sent with one anyway.
    """
    await request.app.state.wikiq.sessions.end(request.cookies.get(UI_COOKIE))
    answer = RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
    answer.delete_cookie(
        UI_COOKIE, path="/ui", httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )
    return answer
