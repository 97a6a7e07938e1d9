"""Signing in to ``/ui`` from a browser, which cannot send a bearer header.

``POST /ui/login`` checks the token like the API does and keeps it in an HttpOnly, SameSite=Strict cookie
scoped to ``/ui``; ``api.auth.principal`` accepts that cookie for GET requests under ``/ui`` only, so the
cookie can never submit, cancel or redeliver anything (no cross-site request forgery on the API).
"""

from __future__ import annotations

from html import escape
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.auth import UI_COOKIE
from worker.errors import AccessDenied

router = APIRouter(prefix="/ui", include_in_schema=False)
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
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


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token; on success keep it in the /ui cookie and go to /ui, else show the form again (401)."""
    body = (await request.body())[:4096].decode("utf-8", "replace")
    token = (parse_qs(body).get("token") or [""])[0].strip()
    try:
        request.app.state.wikiq.auth.authenticate(f"Bearer {token}")
    except AccessDenied:
        note = escape("That token is not known here.")
        return HTMLResponse(_FORM.format(note=note), status_code=401, headers=HEADERS)
    answer = RedirectResponse("/ui", status_code=303, headers=HEADERS)
    answer.set_cookie(
        UI_COOKIE, token, httponly=True, samesite="strict", path="/ui", secure=request.url.scheme == "https"
    )
    return answer
