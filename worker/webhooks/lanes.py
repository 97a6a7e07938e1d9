"""Fair shares of one process's webhook sending: each principal's POSTs in flight are bounded.

A receiver that never answers holds its POST for the whole delivery timeout. With one pool served first
come first served, one principal's hanging receivers would fill every slot and delay every other
principal's webhooks. ``Lanes`` gives each principal (a job's ``submitter``) a lane of ``each`` POSTs in
flight at most, inside the process's ``total``: a principal's POSTs past its lane wait in that lane, not
in the shared pool, so however many of its webhooks hang, it holds at most ``each`` slots and the others
stay free for everyone else (unless ``total / each`` principals' receivers all hang at once).

First attempts wait for their lane (``slot``); retries, which hold one of arq's job slots while they run,
do not wait: a retry whose lane is full (``full``) is put back on arq's queue a little later instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

FIRST_IN_FLIGHT = 64  # first attempts a process sends at once
FIRST_EACH = 8  # ... of which one principal's at most
RETRIES_IN_FLIGHT = 16  # retries a process runs at once (arq's job slots on the webhook queue)
RETRIES_EACH = 4  # ... of which one principal's at most


@dataclass
class _Lane:
    slots: asyncio.Semaphore
    users: int = 0  # POSTs in or waiting for this lane


@dataclass
class Lanes:
    """``total`` POSTs in flight at most, ``each`` of them per principal (see the module)."""

    total: int
    each: int
    _pool: asyncio.Semaphore = field(init=False)
    _lanes: dict[str, _Lane] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._pool = asyncio.Semaphore(self.total)

    def full(self, who: str) -> bool:
        """True while ``who`` has ``each`` POSTs in flight or waiting already."""
        lane = self._lanes.get(who)
        return lane is not None and lane.users >= self.each

    def in_flight(self, who: str) -> int:
        """POSTs of ``who`` in flight or waiting for their lane."""
        lane = self._lanes.get(who)
        return 0 if lane is None else lane.users

    @asynccontextmanager
    async def slot(self, who: str) -> AsyncIterator[None]:
        """Hold one of ``who``'s lane and one of the pool's slots for the block (waiting for both)."""
        lane = self._lanes.get(who)
        if lane is None:
            lane = self._lanes[who] = _Lane(asyncio.Semaphore(self.each))
        lane.users += 1
        try:
            async with lane.slots, self._pool:
                yield
        finally:
            lane.users -= 1
            if not lane.users:
                del self._lanes[who]
