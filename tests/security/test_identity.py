"""Findings 7 and 8: principals keyed by token, a tokens file that fails closed, status-page sessions,
login CSRF, and the dev command's secret message."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import httpx

from tests.e2e.service import Service
from tests.security.conftest import TOKENS, as_, deployment, tokens_toml


def test_principals_sharing_a_name_share_no_idempotency_key(secured: Service) -> None:
    """Two tokens named "Twin": one Idempotency-Key with different batches makes two jobs, no conflict."""
    jobs = []
    for who in ("twin-a", "twin-b"):
        edits = [{"op": "create", "path": f"wiki/{who}.md", "content": who}]
        with as_(secured, who) as client:
            answer = client.post(
                "/v1/wikis/sec/batches",
                json={"message": who, "edits": edits, "dry_run": True},
                headers={"Idempotency-Key": "shared-key"},
            )
        assert answer.status_code == 202, answer.text
        jobs.append(answer.json()["job_id"])
    assert jobs[0] != jobs[1]


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


def test_a_tokens_file_that_breaks_or_disappears_fails_closed(tmp_path: Path) -> None:
    """Broken syntax: every token is refused; fixed: they work again; deleted: refused again."""
    service = deployment(tmp_path, workers=0)
    tokens = tmp_path / "tokens.toml"
    try:
        with as_(service, "dave") as dave:
            assert dave.get("/v1/wikis").status_code == 200
            tokens.write_text(tokens_toml() + "\n[[principals]\nbroken = ")
            os.utime(tokens, (1, 1))  # a different mtime even within the same clock tick
            refused = dave.get("/v1/wikis")
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED"
            tokens.write_text(tokens_toml())
            assert dave.get("/v1/wikis").status_code == 200
            backup = tmp_path / "tokens.bak"
            shutil.move(tokens, backup)
            assert dave.get("/v1/wikis").status_code == 401
            shutil.move(backup, tokens)
            assert dave.get("/v1/wikis").status_code == 200
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
