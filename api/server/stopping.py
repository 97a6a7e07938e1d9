"""Stopping an API process gracefully, and serving it until then.

SIGTERM (or SIGINT) stops accepting connections and closes idle ones; every long-poll in flight
(``GET /v1/jobs/{id}?wait=S``, the MCP tools' waits) answers at once with the job as it stands, as it would
once ``S`` ran out, so the client polls again (through another API process) instead of holding this one up;
every other request in flight is answered, for at most ``GRACE_SECONDS`` (then uvicorn cuts it short and
closes its connection). The process then closes its Redis connections and exits 0 — not by the signal, as
uvicorn's own handler would have it, since an orchestrator reads that as a crash. A second SIGINT stops at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import uvicorn

from worker.tasks import cancel_and_wait

T = TypeVar("T")

# seconds requests in flight may take to end after SIGTERM: a submission waits at most
# WIKIQ_ACCEPT_TIMEOUT_SECONDS (5 by default) for Redis, a read at most WIKIQ_COST_CPU_SECONDS (2)
GRACE_SECONDS = 10


class Draining:
    """Set once the process was asked to stop; long-polls then answer what they have."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def begin(self) -> None:
        """The process is stopping: wake every long-poll."""
        self.event.set()

    @property
    def started(self) -> bool:
        """True once ``begin`` was called."""
        return self.event.is_set()

    async def long_poll(self, get: Callable[[float], Awaitable[T]], wait: float) -> T:
        """``get(wait)``, a long-poll waiting up to ``wait`` seconds; once the process is stopping, ``get(0)``
        instead: the answer as it stands now."""
        if wait <= 0 or self.started:
            return await get(0)
        polling = asyncio.ensure_future(get(wait))
        stopping = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({polling, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the request itself is cancelled (its client went away)
            await cancel_and_wait(stopping, *([] if polling.done() else [polling]))
        if polling.done() and not polling.cancelled():
            return polling.result()
        return await get(0)


class ApiServer(uvicorn.Server):
    """uvicorn's server, stopping as the module says."""

    def __init__(self, config: uvicorn.Config, draining: Draining) -> None:
        super().__init__(config)
        self.draining = draining

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Handle SIGTERM and SIGINT in the event loop while serving, and (unlike uvicorn's own) do not
        raise them again once stopped: the process exits 0."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def handle_exit(self, sig: int, frame: Any) -> None:
        """Begin draining, then uvicorn's shutdown (a second SIGINT forces it)."""
        self.draining.begin()
        super().handle_exit(sig, frame)


def serve(app: Any, draining: Draining, **config: Any) -> None:
    """Serve ``app`` (uvicorn ``config`` options) until SIGTERM or SIGINT, then stop as the module says."""
    settings = uvicorn.Config(app, timeout_graceful_shutdown=GRACE_SECONDS, **config)
    ApiServer(settings, draining).run()
