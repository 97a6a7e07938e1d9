"""Throttles shared by every API process: fixed-window counters in Redis.

``check_rate`` counts a principal's submissions (and webhook redeliveries) per window; ``once_per`` lets one
thing (a job's redelivery) happen at most once per interval.
"""

from __future__ import annotations

import math
import time

from redis.asyncio import Redis

from worker import keys
from worker.errors import RateLimited


async def check_rate(redis: Redis, principal_id: str, limit: int, window: float) -> None:
    """Count a request of ``principal_id``; ``RateLimited`` past ``limit`` per ``window`` (0: no limit)."""
    if limit <= 0:
        return
    now = time.time()
    slot = math.floor(now / window)
    key = keys.rate(principal_id, slot)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.incr(key)
        pipe.expire(key, math.ceil(window) + 1)
        count, _ = await pipe.execute()
    if int(count) > limit:
        retry_after = max(1, math.ceil((slot + 1) * window - now))
        raise RateLimited(
            f"more than {limit} submissions in {window:g} s; try again in {retry_after} s", retry_after
        )


async def once_per(redis: Redis, what: str, seconds: int, message: str) -> None:
    """Let ``what`` happen at most once every ``seconds``; ``RateLimited`` (with ``message``) sooner."""
    key = keys.once(what)
    if await redis.set(key, b"1", nx=True, ex=seconds):
        return
    left = await redis.ttl(key)
    retry_after = max(1, int(left) if left and int(left) > 0 else seconds)
    raise RateLimited(f"{message}; try again in {retry_after} s", retry_after)
