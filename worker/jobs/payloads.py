"""arq's job payloads as JSON, both ways: the serializer every queue and every Lua-written job entry uses.

Only JSON crosses Redis, never pickle (arq's default). Its own module so that the Redis client factory
(``worker.jobs.connection``, arq's serializer), the queue and the webhook taker (whose Lua scripts write arq
entries themselves) and the processes' arq workers share it without importing each other.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(value: dict[str, Any]) -> bytes:
    """A job payload as JSON (``default=str``: arq also stores results, which may hold an exception)."""
    return json.dumps(value, separators=(",", ":"), default=str).encode()


def loads(raw: bytes) -> dict[str, Any]:
    """A job payload from JSON; ``ValueError`` for anything but an object."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("arq job payload is not a JSON object")
    return value
