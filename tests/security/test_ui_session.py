"""Finding 8 (low), the status page's session: ``/ui`` had no sign-out (``Sessions.end`` was never called),
and its cookie was ``Secure`` only when the request itself was https, so never behind a TLS proxy that is
not on loopback. Now ``POST /ui/logout`` ends the session, and the cookie is ``Secure`` whenever the
request came over TLS through a proxy named in ``WIKIQ_TRUSTED_PROXIES`` (and only such a proxy's
``X-Forwarded-Proto`` is believed).

Issue 36, finding 8 (low): ``POST /ui/login`` had no rate limit (thousands of sessions a second from one
client, each kept 12 h). Now sign-in attempts are limited per client address and per token
(``WIKIQ_UI_LOGIN_ATTEMPTS`` per ``WIKIQ_UI_LOGIN_WINDOW_SECONDS``: ``429 RATE_LIMITED`` with
``Retry-After`` beyond, and no session), and each token keeps at most ``WIKIQ_UI_SESSIONS_PER_TOKEN``
sessions, the oldest ended first."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis as redis_sync

from tests.e2e.service import Service
from tests.security.conftest import TOKENS, deployment

PROXY = "127.0.0.2"  # a second loopback address stands for the proxy's host


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with a tokens file that trusts the proxy at ``PROXY``, no worker."""
    service = deployment(tmp_path_factory.mktemp("proxied"), workers=0, WIKIQ_TRUSTED_PROXIES=PROXY)
    yield service
    service.stop()


def _sign_in(browser: httpx.Client, **headers: str) -> httpx.Response:
    answer = browser.post("/ui/login", data={"token": TOKENS["reader"]}, headers=headers)
    assert answer.status_code == 303, answer.text
    return answer


def test_signing_out_ends_the_session_everywhere(proxied: Service) -> None:
    """After POST /ui/logout the cookie is cleared, and the session id, replayed from a copy, reads
    nothing."""
    with httpx.Client(base_url=proxied.url, timeout=30) as browser:
        _sign_in(browser)
        session = browser.cookies.get("wikiq_ui_session")
        assert session and browser.get("/ui").status_code == 200
        assert 'action="/ui/logout"' in browser.get("/ui").text
        out = browser.post("/ui/logout", headers={"origin": proxied.url})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login", out.text
        assert "wikiq_ui_session" not in browser.cookies
        assert browser.get("/ui").status_code == 303  # back to the sign-in form
    with httpx.Client(base_url=proxied.url, timeout=30, cookies={"wikiq_ui_session": session}) as copy:
        assert copy.get("/ui").status_code == 303
        assert copy.get("/ui/state").status_code == 401


def test_a_foreign_page_cannot_sign_a_browser_out(proxied: Service) -> None:
    """A cross-site post to /ui/logout is refused (403) and the session lives on."""
    with httpx.Client(base_url=proxied.url, timeout=30) as browser:
        _sign_in(browser)
        refused = browser.post("/ui/logout", headers={"origin": "https://evil.example"})
        assert refused.status_code == 403, refused.text
        assert browser.get("/ui").status_code == 200


def _cookie_line(answer: httpx.Response) -> str:
    (line,) = [v for v in answer.headers.get_list("set-cookie") if v.startswith("wikiq_ui_session=")]
    return line.lower()


def test_the_cookie_is_secure_behind_a_declared_tls_proxy(proxied: Service) -> None:
    """Through the declared proxy with X-Forwarded-Proto: https, the cookie is Secure; the same header from
    any other peer is not believed (no Secure: the request was plain http)."""
    through = httpx.HTTPTransport(local_address=PROXY)
    with httpx.Client(base_url=proxied.url, timeout=30, transport=through) as browser:
        assert "; secure" in _cookie_line(_sign_in(browser, **{"x-forwarded-proto": "https"}))
        assert "; secure" not in _cookie_line(_sign_in(browser))
    with httpx.Client(base_url=proxied.url, timeout=30) as direct:
        assert "; secure" not in _cookie_line(_sign_in(direct, **{"x-forwarded-proto": "https"}))


ATTEMPTS = 5
SESSIONS = 3


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment allowing 5 sign-in attempts per client address and per token a day (a window no test
    run crosses but by chance), and 3 sessions per token; no worker."""
    service = deployment(
        tmp_path_factory.mktemp("guarded"),
        workers=0,
        WIKIQ_UI_LOGIN_ATTEMPTS=str(ATTEMPTS),
        WIKIQ_UI_LOGIN_WINDOW_SECONDS="86400",
        WIKIQ_UI_SESSIONS_PER_TOKEN=str(SESSIONS),
    )
    yield service
    service.stop()


def _sessions(service: Service) -> int:
    client = redis_sync.Redis.from_url(service.redis.url)
    try:
        return sum(1 for _ in client.scan_iter("wikiq:ui-session:*", count=1000))
    finally:
        client.close()


def _from(service: Service, address: str) -> httpx.Client:
    """A browser on loopback address ``address``."""
    return httpx.Client(
        base_url=service.url, timeout=30, transport=httpx.HTTPTransport(local_address=address)
    )


def _refused(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "RATE_LIMITED"
    assert int(answer.headers["retry-after"]) >= 1
    assert not any(v.startswith("wikiq_ui_session=") for v in answer.headers.get_list("set-cookie"))


def test_sign_in_attempts_are_limited_per_client_address(guarded: Service) -> None:
    """Five wrong tokens from one address, then even a right one is refused 429 with no session; another
    address still signs in."""
    with _from(guarded, "127.0.0.11") as browser:
        for n in range(ATTEMPTS):
            assert browser.post("/ui/login", data={"token": f"wrong-{n}"}).status_code == 401
        before = _sessions(guarded)
        for _ in range(3):
            _refused(browser.post("/ui/login", data={"token": TOKENS["dave"]}))
        assert _sessions(guarded) == before
        assert "wikiq_ui_session" not in browser.cookies
    with _from(guarded, "127.0.0.12") as other:
        assert other.post("/ui/login", data={"token": TOKENS["dave"]}).status_code == 303
        assert other.get("/ui").status_code == 200


def test_sign_in_attempts_are_limited_per_token(guarded: Service) -> None:
    """One token signing in from ever new addresses: five attempts, then 429 with no session."""
    for n in range(ATTEMPTS):
        with _from(guarded, f"127.0.1.{n + 1}") as browser:
            assert browser.post("/ui/login", data={"token": TOKENS["reader"]}).status_code == 303
    before = _sessions(guarded)
    with _from(guarded, "127.0.1.200") as browser:
        _refused(browser.post("/ui/login", data={"token": TOKENS["reader"]}))
        assert "wikiq_ui_session" not in browser.cookies
    assert _sessions(guarded) == before


def test_a_token_keeps_a_bounded_number_of_sessions(guarded: Service) -> None:
    """Five sign-ins of one token: only the three newest sessions are kept, the oldest ended first."""
    browsers = [_from(guarded, f"127.0.2.{n + 1}") for n in range(ATTEMPTS)]
    try:
        before = _sessions(guarded)
        for browser in browsers:
            assert browser.post("/ui/login", data={"token": TOKENS["admin"]}).status_code == 303
        assert _sessions(guarded) - before == SESSIONS
        assert [b.get("/ui").status_code for b in browsers] == [303] * (ATTEMPTS - SESSIONS) + [
            200
        ] * SESSIONS
        assert browsers[-1].post("/ui/logout").status_code == 303
        assert _sessions(guarded) - before == SESSIONS - 1
    finally:
        for browser in browsers:
            browser.close()
