"""Ending background tasks for sure.

A loop around a Redis command can swallow a ``cancel()`` and go on: redis-py sends every command through
``asyncio.wait_for``, which on Python 3.11 returns the result instead of raising when the cancellation
arrives as the send completes (CPython gh-86296, fixed in 3.12). A shutdown that cancels such a loop once
and awaits it then waits forever (a test deployment's doorbell loop did, one close in a few hundred).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

RECANCEL = 1.0  # seconds a cancelled task may take to end before it is cancelled again


async def cancel_and_wait(*tasks: asyncio.Task[Any]) -> None:
    """Cancel ``tasks`` and return once each has ended, whatever it ended with; a task still running
    ``RECANCEL`` seconds after its cancellation is cancelled again (see the module). For loops whose
    cancellation needs no cleanup that takes a second, not for a job's task: a second cancellation would
    cut short ``apply_batch``'s wait for its git work to end."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL)
    for task in tasks:
        if not task.cancelled():
            with contextlib.suppress(Exception):
                task.exception()  # retrieved: the task's own error is not this caller's to raise
