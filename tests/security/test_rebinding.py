"""Finding 6 (medium): DNS rebinding and cross-site posts on ``/v1``, ``/ui`` and ``/mcp``.

A page at ``attacker.example`` that points its name at 127.0.0.1 makes the browser send requests with
``Host: attacker.example:<port>`` and a matching ``Origin``; before the fix, single-user mode created a
wiki for it. Now every route answers ``421 MISDIRECTED_HOST`` to a foreign Host, and a state-changing
request (and any ``/mcp`` request, also in tokens mode) from a foreign Origin is ``403 FORBIDDEN``.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from api.server.hosts import AllowedHosts, split_host
from tests.e2e.service import Service
from tests.security.conftest import TOKENS
from tests.security.test_mcp_guard import INIT, MCP_HEADERS


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A single-user deployment (no tokens file), listening on loopback, no worker."""
    service = Service(tmp_path_factory.mktemp("single"), WIKIQ_ALLOWED_HOSTS="wiki.example.org").start(
        workers=0, senders=0
    )
    yield service
    service.stop()


def _wikis(service: Service) -> list[str]:
    answer = service.client.get("/v1/wikis")
    assert answer.status_code == 200, answer.text
    return [w["id"] for w in answer.json()["wikis"]]


def _refused(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code, answer.text


def test_a_rebinding_page_reaches_nothing(single: Service) -> None:
    """Host attacker.example with a matching Origin: 421 on /v1 (create, submit, read), /ui and /mcp;
    nothing is created."""
    rebound = f"attacker.example:{single.port}"
    headers = {"host": rebound, "origin": f"http://{rebound}"}
    with httpx.Client(base_url=single.url, headers=headers, timeout=30) as page:
        _refused(page.post("/v1/wikis", json={"id": "rebound"}), 421, "MISDIRECTED_HOST")
        batch = {"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "x"}]}
        _refused(page.post("/v1/wikis/rebound/batches", json=batch), 421, "MISDIRECTED_HOST")
        _refused(page.get("/v1/wikis"), 421, "MISDIRECTED_HOST")
        _refused(page.get("/ui"), 421, "MISDIRECTED_HOST")
        _refused(page.post("/mcp", json=INIT, headers=MCP_HEADERS), 421, "MISDIRECTED_HOST")
        assert page.get("/healthz").status_code == 200  # probes may use any name; it tells nothing
    assert "rebound" not in _wikis(single)


def test_a_foreign_origin_changes_nothing(single: Service) -> None:
    """Our own Host but another site's Origin: 403 for a change and for /mcp; reads and same-origin
    posts go through."""
    for origin in ("http://evil.example", "null", f"http://localhost:{single.port}", "http://127.0.0.1:1"):
        headers = {"origin": origin}
        _refused(single.client.post("/v1/wikis", json={"id": "crossed"}, headers=headers), 403, "FORBIDDEN")
        answer = single.client.post("/mcp", json=INIT, headers={**MCP_HEADERS, **headers})
        _refused(answer, 403, "FORBIDDEN")
        assert single.client.get("/v1/wikis", headers=headers).status_code == 200
    assert "crossed" not in _wikis(single)
    own = single.client.post("/v1/wikis", json={"id": "own"}, headers={"origin": single.url})
    assert own.status_code == 201, own.text
    answer = single.client.post("/mcp", json=INIT, headers={**MCP_HEADERS, "origin": single.url})
    assert answer.status_code == 200, answer.text


def test_names_the_operator_allows_are_answered(single: Service) -> None:
    """WIKIQ_ALLOWED_HOSTS=wiki.example.org: that Host is answered, with its https Origin (a TLS proxy
    in front) too; localhost and other loopback addresses are the bind address's own."""
    for host in (
        "wiki.example.org",
        "WIKI.example.org:8443",
        "localhost",
        f"127.0.0.2:{single.port}",
        "[::1]",
    ):
        assert single.client.get("/v1/wikis", headers={"host": host}).status_code == 200, host
    headers = {"host": "wiki.example.org", "origin": "https://wiki.example.org"}
    answer = single.client.post("/v1/wikis", json={"id": "proxied"}, headers=headers)
    assert answer.status_code == 201, answer.text
    _refused(
        single.client.get("/v1/wikis", headers={"host": "sub.wiki.example.org"}), 421, "MISDIRECTED_HOST"
    )


def test_mcp_checks_origin_in_tokens_mode(secured: Service) -> None:
    """With a tokens file, /mcp refuses another site's Origin (it accepted any before), even with a
    valid token."""
    headers = {**MCP_HEADERS, "authorization": f"Bearer {TOKENS['reader']}"}
    answer = httpx.post(
        f"{secured.url}/mcp", json=INIT, headers={**headers, "origin": "https://evil.example"}, timeout=30
    )
    _refused(answer, 403, "FORBIDDEN")
    assert httpx.post(f"{secured.url}/mcp", json=INIT, headers=headers, timeout=30).status_code == 200


def test_allowed_hosts_follow_the_bind_address() -> None:
    """Loopback binds answer loopback names; a wildcard bind any IP address (a rebinding page cannot use
    one as its name) but no foreign name; another address only itself; ".domain" its subdomains."""
    loopback = AllowedHosts("127.0.0.1")
    assert all(loopback.allows(n) for n in ("localhost", "127.0.0.1", "127.9.9.9", "::1"))
    assert not any(loopback.allows(n) for n in ("10.0.0.1", "attacker.example", "localhost.attacker.example"))
    wildcard = AllowedHosts("0.0.0.0", (".example.org",))
    assert all(
        wildcard.allows(n) for n in ("10.0.0.1", "2001:db8::1", "localhost", "example.org", "a.example.org")
    )
    assert not any(wildcard.allows(n) for n in ("attacker.example", "example.org.attacker.example"))
    bound = AllowedHosts("192.0.2.7")
    assert bound.allows("192.0.2.7") and not bound.allows("192.0.2.8") and not bound.allows("localhost")
    assert AllowedHosts("10.0.0.1", ("*",)).allows("anything.example")
    assert split_host("[::1]:8080") == ("::1", "8080")
    assert split_host("Example.ORG.:80") == ("example.org", "80")
    assert split_host("::1") == ("::1", "")


def test_allowed_hosts_setting_is_checked_at_start() -> None:
    """WIKIQ_ALLOWED_HOSTS takes names, ".domain", "*" and addresses (brackets optional); a name with a
    port or a scheme stops start-up with one line naming the variable."""
    from worker.settings import SettingsError, load_settings

    settings = load_settings(allowed_hosts="Wiki.Example.org., [::1], .example.net, *")
    assert settings.allowed_hosts == ("wiki.example.org", "::1", ".example.net", "*")
    for bad in ("wiki.example.org:8443", "https://wiki.example.org", "a b"):
        with pytest.raises(SettingsError, match="WIKIQ_ALLOWED_HOSTS"):
            load_settings(allowed_hosts=bad)
    with pytest.raises(SettingsError, match="WIKIQ_TRUSTED_PROXIES"):
        load_settings(trusted_proxies="proxy.internal")
    assert load_settings(trusted_proxies="10.0.0.5, 172.16.0.1/12").trusted_proxies == (
        "10.0.0.5",
        "172.16.0.0/12",
    )
