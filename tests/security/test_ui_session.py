"""Finding 8 (low), the status page's session: ``/ui`` had no sign-out (``Sessions.end`` was never called),
and its cookie was ``Secure`` only when the request itself was https, so never behind a TLS proxy that is
not on loopback. Now ``POST /ui/logout`` ends the session, and the cookie is ``Secure`` whenever the
request came over TLS through a proxy named in ``WIKIQ_TRUSTED_PROXIES`` (and only such a proxy's
``X-Forwarded-Proto`` is believed)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

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
