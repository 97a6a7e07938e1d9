"""The lean webhook sender (``worker.webhooks.http``) against real HTTP servers on loopback: answers and
``Retry-After``, kept-alive connections reused, a closed idle connection retried, timeouts, redirects not
followed, refused addresses and unreachable receivers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from tests.e2e.receiver import running_receiver
from tests.e2e.service import TEST_SECRET
from worker.webhooks.deliver import send, signer_for
from worker.webhooks.http import SendError, WebhookSender

Handler = Callable[[bytes], bytes]


@asynccontextmanager
async def keepalive_server(answer: bytes, close_after: int = 0) -> AsyncIterator[dict[str, int]]:
    """An HTTP/1.1 server answering ``answer`` to every request, keeping connections open (closing each
    one after ``close_after`` answers when set); yields counters: port, connections, requests."""
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
                seen["requests"] += 1
                writer.write(answer)
                await writer.drain()
                served += 1
                if close_after and served >= close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
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


async def test_an_idle_connection_the_receiver_closed_is_replaced() -> None:
    """A receiver closing each connection after one answer: the next POST goes out on a new connection,
    none fails."""
    async with keepalive_server(OK, close_after=1) as seen:
        sender = WebhookSender(allow_private=True, timeout=5)
        for _ in range(3):
            assert (await sender.post(f"http://127.0.0.1:{seen['port']}/", b"{}", {})).status == 200
            await asyncio.sleep(0.05)  # let the receiver's close reach us before the next POST
        await sender.aclose()
    assert seen["requests"] == 3


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
