"""The lean webhook sender (``worker.webhooks.http``) against real HTTP servers on loopback: answers and
``Retry-After``, kept-alive connections reused, a closed idle connection retried, timeouts, redirects not
followed, refused addresses and unreachable receivers, answers whose headers pass their bounds."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.e2e.hostile_receiver import hostile_receiver
from tests.e2e.receiver import running_receiver
from tests.e2e.service import TEST_SECRET
from worker.webhooks.deliver import send, signer_for
from worker.webhooks.http import MAX_HEAD, MAX_IDLE, SendError, WebhookSender

Handler = Callable[[bytes], bytes]


@asynccontextmanager
async def keepalive_server(
    answer: bytes, hang_up_after: int = 0, tls: ssl.SSLContext | None = None
) -> AsyncIterator[dict[str, int]]:
    """An HTTP/1.1 server (TLS with ``tls``) answering ``answer`` to every request and keeping connections
    open; with ``hang_up_after``, a connection's next request after that many answers is read and the
    connection closed without an answer (what a receiver closing an idle connection looks like to a client
    that already sent on it). Yields counters: port, connections, requests (answered)."""
    seen = {"port": 0, "connections": 0, "requests": 0}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if hang_up_after and served >= hang_up_after:
                    break
                seen["requests"] += 1
                writer.write(answer)
                await writer.drain()
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    seen["port"] = server.sockets[0].getsockname()[1]
    async with server:
        yield seen


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


async def test_answers_and_retry_after_are_read() -> None:
    """The status and the Retry-After header come back; the body is read and ignored."""
    answer = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\ncontent-length: 5\r\n\r\nslow!"
    async with keepalive_server(answer) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        got = await sender.post(f"http://127.0.0.1:{seen['port']}/hook?x=1", b"{}", {"webhook-id": "msg_1"})
        await sender.aclose()
    assert (got.status, got.retry_after) == (429, "7")


async def test_one_connection_serves_many_posts() -> None:
    """A kept-alive connection is reused: ten POSTs, one connection."""
    async with keepalive_server(OK) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        for n in range(10):
            assert (await sender.post(f"http://127.0.0.1:{seen['port']}/", b"%d" % n, {})).status == 200
        await sender.aclose()
    assert (seen["connections"], seen["requests"]) == (1, 10)


async def test_a_burst_of_posts_keeps_its_connections_for_the_next_burst() -> None:
    """Forty POSTs at once need forty connections; all are kept idle (up to ``MAX_IDLE`` per origin), so
    a second burst opens none."""
    async with keepalive_server(OK) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        url = f"http://127.0.0.1:{seen['port']}/"
        for _ in range(2):
            answers = await asyncio.gather(*(sender.post(url, b"{}", {}) for _ in range(40)))
            assert {answer.status for answer in answers} == {200}
        await sender.aclose()
    assert MAX_IDLE >= 40 and (seen["requests"], seen["connections"]) == (80, 40)


async def test_idle_connections_are_bounded_per_origin() -> None:
    """More concurrent POSTs than ``MAX_IDLE``: the connections beyond it are closed after their answer."""
    async with keepalive_server(OK) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        url = f"http://127.0.0.1:{seen['port']}/"
        answers = await asyncio.gather(*(sender.post(url, b"{}", {}) for _ in range(MAX_IDLE + 8)))
        assert {answer.status for answer in answers} == {200}
        assert sum(map(len, sender.idle.values())) == MAX_IDLE
        await sender.aclose()
    assert seen["connections"] == MAX_IDLE + 8


async def test_an_idle_connection_the_receiver_closed_is_replaced() -> None:
    """A receiver that hangs up a kept-alive connection when the next POST arrives on it: that POST is sent
    again once, on a new connection, and none fails."""
    async with keepalive_server(OK, hang_up_after=1) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        for _ in range(3):
            assert (await sender.post(f"http://127.0.0.1:{seen['port']}/", b"{}", {})).status == 200
        await sender.aclose()
    assert (seen["requests"], seen["connections"]) == (3, 3)


async def test_a_receiver_answering_too_late_is_a_timeout() -> None:
    """No answer within the timeout: ``TimeoutError`` (recorded as ``timeout`` by ``send``)."""

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(5)  # a receiver that never answers in time

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sender = WebhookSender(allow_private=True, timeout=0.3)
        signer = signer_for(TEST_SECRET)
        assert signer is not None
        outcome = await send(sender, f"http://127.0.0.1:{port}/", "msg_t", "{}", signer)
        with pytest.raises(TimeoutError):
            await sender.post(f"http://127.0.0.1:{port}/", b"{}", {})
        await sender.aclose()
    assert (outcome.attempt.status, outcome.attempt.error, outcome.delivered) == (None, "timeout", False)


def test_redirects_are_not_followed_and_http10_closes() -> None:
    """A 302 is reported as such (``send``: a failure, "redirect not followed"); the threaded HTTP/1.0
    receiver of the e2e tests works too (its connection is not kept)."""
    with running_receiver() as receiver:
        receiver.script["/moved"] = [(302, {"location": receiver.url("/elsewhere")})]

        async def go() -> tuple[int | None, str | None]:
            sender = WebhookSender(allow_private=True, timeout=5)
            signer = signer_for(TEST_SECRET)
            assert signer is not None
            outcome = await send(sender, receiver.url("/moved"), "msg_r", '{"a": 1}', signer)
            await sender.aclose()
            return outcome.attempt.status, outcome.attempt.error

        assert asyncio.run(go()) == (302, "redirect not followed")
        assert receiver.at("/elsewhere") == []
        (delivery,) = receiver.at("/moved")
        assert delivery.body == b'{"a": 1}' and delivery.headers["webhook-id"] == "msg_r"


async def test_private_addresses_are_refused_at_connect_time() -> None:
    """Without ``allow_private`` a loopback receiver is never connected to."""
    async with keepalive_server(OK) as seen:
        sender = WebhookSender(allow_private=False, timeout=5)
        with pytest.raises(SendError, match="refused address"):
            await sender.post(f"http://127.0.0.1:{seen['port']}/", b"{}", {})
        with pytest.raises(SendError, match="refused address"):
            await sender.post(f"http://localhost:{seen['port']}/", b"{}", {})
    assert seen["connections"] == 0


async def test_an_unreachable_receiver_is_a_connect_error() -> None:
    """Nothing listening: ``SendError`` naming a connect error (``send`` records it, then retries)."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    sender = WebhookSender(allow_private=True, timeout=5)
    with pytest.raises(SendError, match="ConnectError"):
        await sender.post(f"http://127.0.0.1:{port}/", b"{}", {})


def _certificate(tmp: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for DNS ``name`` (and 127.0.0.1 when ``name`` is localhost) and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    alt: list[x509.GeneralName] = [x509.DNSName(name)]
    if name == "localhost":
        alt.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / f"{name}.pem", tmp / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


def _server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_https_receivers_are_verified_against_the_system_trust_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """https: the receiver's certificate must chain to a trusted CA (here: the system store named by
    ``SSL_CERT_FILE``) and name the URL's host; then the POST goes through and its connection is kept."""
    cert, key = _certificate(tmp_path, "localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    async with keepalive_server(OK, tls=_server_tls(cert, key)) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        for _ in range(3):
            assert (await sender.post(f"https://localhost:{seen['port']}/hook", b"{}", {})).status == 200
        await sender.aclose()
    assert (seen["requests"], seen["connections"]) == (3, 1)


async def test_https_receivers_with_untrusted_or_misnamed_certificates_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A self-signed certificate nobody trusts, or a trusted one naming another host: ``SendError`` at
    connect time, and no request is answered."""
    cert, key = _certificate(tmp_path, "localhost")
    other, _ = _certificate(tmp_path, "other.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(other))  # trusts only a certificate for another name
    async with keepalive_server(OK, tls=_server_tls(cert, key)) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        with pytest.raises(SendError, match=r"ConnectError.*CERTIFICATE_VERIFY_FAILED"):
            await sender.post(f"https://localhost:{seen['port']}/hook", b"{}", {})
    misnamed, misnamed_key = _certificate(tmp_path, "other.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(misnamed))
    async with keepalive_server(OK, tls=_server_tls(misnamed, misnamed_key)) as seen_misnamed:
        sender = WebhookSender(allow_private=True, timeout=5)
        with pytest.raises(SendError, match=r"ConnectError.*CERTIFICATE_VERIFY_FAILED"):
            await sender.post(f"https://localhost:{seen_misnamed['port']}/hook", b"{}", {})
    assert seen["requests"] == seen_misnamed["requests"] == 0


async def test_a_url_that_would_break_the_request_line_is_refused() -> None:
    """Whitespace or control characters in the URL (the submission check refuses them first) never reach
    the wire: ``SendError``, no connection."""
    async with keepalive_server(OK) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        for url in (
            f"http://127.0.0.1:{seen['port']}/a b",
            f"http://127.0.0.1:{seen['port']}/a\r\nx-injected: 1",
            f"http://127.0.0.1:{seen['port']}/?q=\n",
        ):
            with pytest.raises(SendError, match="UnsupportedProtocol"):
                await sender.post(url, b"{}", {})
    assert seen["connections"] == 0


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("header-bomb", "headers are over 16384 bytes"), ("many-headers", "over 100 header fields")],
)
async def test_an_answer_whose_headers_never_end_is_refused_at_their_bound(mode: str, reason: str) -> None:
    """A receiver streaming one endless header, or endless small ones: a ``SendError`` naming the bound,
    long before the timeout, having read no more of the answer than the bound (and one read's worth)."""
    with hostile_receiver(mode) as bad:
        sender = WebhookSender(allow_private=True, timeout=30)
        with pytest.raises(SendError, match=reason):
            await sender.post(bad.url(), b"{}", {})
        await sender.aclose()


async def test_an_answer_within_the_head_bounds_is_read() -> None:
    """99 headers of 150 bytes (under 16 KiB in all) are an ordinary answer."""
    headers = b"".join(b"x-pad-%02d: %s\r\n" % (n, b"p" * 136) for n in range(99))
    answer = b"HTTP/1.1 200 OK\r\n" + headers + b"content-length: 2\r\n\r\nok"
    assert len(answer) < MAX_HEAD
    async with keepalive_server(answer) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        assert (await sender.post(f"http://127.0.0.1:{seen['port']}/", b"{}", {})).status == 200
        await sender.aclose()
