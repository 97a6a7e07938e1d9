"""``worker.tasks.cancel_and_wait``: a cancelled background task ends even when a cancellation is lost."""

from __future__ import annotations

import asyncio
import sys

from worker.tasks import cancel_and_wait


async def _sent() -> int:
    return 1  # a command's send: done in one step, as a socket write usually is


async def _command_loop() -> None:
    """A loop around ``asyncio.wait_for`` as redis-py sends every command (see ``worker.tasks``)."""
    while True:
        await asyncio.wait_for(_sent(), 5)
        await asyncio.sleep(0.005)  # the reply's wait


async def test_a_command_loop_ends_whichever_step_the_cancellation_lands_on() -> None:
    """Cancelled once at each of the loop's first scheduling steps in turn, the loop goes on after some of
    them on Python 3.11 (the step where ``wait_for`` returns its result instead of raising);
    ``cancel_and_wait`` ends it every time."""
    went_on = 0
    for steps in range(6):
        task = asyncio.create_task(_command_loop())
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=0.2)
        went_on += not done
        await asyncio.wait_for(cancel_and_wait(task), 10)
        assert task.cancelled(), steps
    if sys.version_info < (3, 12):
        assert went_on >= 1, "no step lost the cancellation: the premise of worker.tasks does not hold"


async def test_a_task_that_swallows_its_cancellation_is_cancelled_again() -> None:
    """A task that goes on after its first ``CancelledError`` is cancelled again until it ends; a task that
    ended with an error is waited for without raising it."""
    swallowed: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(1)

    async def failing() -> None:
        raise RuntimeError("its own error")

    task, broken = asyncio.create_task(stubborn()), asyncio.create_task(failing())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, broken), 10)
    assert task.cancelled() and swallowed == [1]
    assert isinstance(broken.exception(), RuntimeError)
