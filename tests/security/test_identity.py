"""Findings 7 and 8 with real processes: principals keyed by token (their rate limits), status-page
sessions, login CSRF, and the dev command's secret message. Rights, shared names' idempotency keys and a
tokens file that fails closed are shown in process (tests/service/test_rights.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from tests.e2e.service import Service
from tests.security.conftest import TOKENS, as_, deployment


def test_principals_sharing_a_name_share_no_rate_limit(tmp_path: Path) -> None:
    """With 2 submissions a window, twin-a's third is 429 while twin-b still submits."""
    service = deployment(
        tmp_path, workers=0, WIKIQ_RATE_LIMIT_SUBMISSIONS="2", WIKIQ_RATE_LIMIT_WINDOW_SECONDS="300"
    )
    try:
        batch = {
            "message": "m",
            "edits": [{"op": "create", "path": "wiki/r.md", "content": "r"}],
            "dry_run": True,
        }
        with as_(service, "twin-a") as a, as_(service, "twin-b") as b:
            assert [a.post("/v1/wikis/sec/batches", json=batch).status_code for _ in range(3)] == [
                202,
                202,
                429,
            ]
            assert b.post("/v1/wikis/sec/batches", json=batch).status_code == 202
    finally:
        service.stop()


def test_the_ui_cookie_holds_a_session_not_the_token(secured: Service) -> None:
    """Signing in sets a cookie that is neither the token nor its hash; it reads /ui and nothing else."""
    with httpx.Client(base_url=secured.url, timeout=30) as browser:
        signed = browser.post("/ui/login", data={"token": TOKENS["reader"]}, headers={"origin": secured.url})
        assert signed.status_code == 303, signed.text
        session = browser.cookies.get("wikiq_ui_session")
        assert session and TOKENS["reader"] not in session
        assert hashlib.sha256(TOKENS["reader"].encode()).hexdigest() not in session
        assert browser.get("/ui").status_code == 200
        assert browser.get("/v1/wikis").status_code == 401
    with httpx.Client(base_url=secured.url, timeout=30, cookies={"wikiq_ui_session": "made-up"}) as forger:
        assert forger.get("/ui").status_code == 303  # back to the sign-in form


def test_login_from_another_origin_is_refused(secured: Service) -> None:
    """A cross-site form post (another Origin, or Sec-Fetch-Site: cross-site) cannot sign a browser in."""
    with httpx.Client(base_url=secured.url, timeout=30) as browser:
        for headers in (
            {"origin": "https://evil.example"},
            {"referer": "https://evil.example/page"},
            {"sec-fetch-site": "cross-site"},
            {"origin": "null"},
        ):
            answer = browser.post("/ui/login", data={"token": TOKENS["reader"]}, headers=headers)
            assert answer.status_code == 403, headers
            assert "wikiq_ui_session" not in browser.cookies
