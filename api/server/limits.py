"""Request limits enforced before the body is read: body size, query string length, header size.

Refusals carry the contract's error object: a body over ``max_body_bytes`` is ``413 BATCH_TOO_LARGE``
(judged on Content-Length when given, else while streaming, before it is all in memory); an over-long query
string is ``414`` and over-large headers ``431``, both ``INVALID_BATCH``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_QUERY_BYTES = 48 * 1024  # room for every query parameter at its declared maximum, percent-encoded
MAX_HEADER_BYTES = 32 * 1024


class _TooLarge(Exception):
    pass


def _error(status: int, code: str, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": {"code": code, "message": message, "index": None}}).encode()


class RequestLimits:
    """ASGI middleware refusing requests over the limits with the contract's error object."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._check_head(scope)
        if refusal is not None:
            await _answer(send, *refusal)
            return
        received = 0
        overflow = False
        answered = False

        async def limited_receive() -> Message:
            nonlocal received, overflow
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    overflow = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal answered
            if not overflow:
                await send(message)
            elif not answered:  # the app turned the cut-off body into its own error: answer 413 instead
                answered = True
                await _answer(send, *self._too_large())

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _TooLarge:
            if not answered:
                await _answer(send, *self._too_large())

    def _too_large(self) -> tuple[int, bytes]:
        return _error(
            413, "BATCH_TOO_LARGE", f"the request body is over {self.max_body} bytes; split the batch"
        )

    def _check_head(self, scope: Scope) -> tuple[int, bytes] | None:
        if len(scope.get("query_string", b"")) > MAX_QUERY_BYTES:
            return _error(414, "INVALID_BATCH", f"the query string is over {MAX_QUERY_BYTES} bytes")
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        if sum(len(k) + len(v) for k, v in headers) > MAX_HEADER_BYTES:
            return _error(431, "INVALID_BATCH", f"the request headers are over {MAX_HEADER_BYTES} bytes")
        for key, value in headers:
            if key == b"content-length":
                try:
                    if int(value) > self.max_body:
                        return self._too_large()
                except ValueError:
                    return _error(400, "INVALID_BATCH", "Content-Length is not a number")
        return None


async def _answer(send: Send, status: int, body: bytes) -> None:
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
