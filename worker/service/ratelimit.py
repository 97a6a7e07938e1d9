"""Throttles shared by every API process: fixed-window counters in Redis.

``check_rate`` counts a principal's submissions (and webhook redeliveries) per window, and
``check_sign_in`` the status page's sign-in attempts per client address and per token; ``once_per`` lets
one thing (a job's redelivery) happen at most once per interval.
"""

from __future__ import annotations

import hashlib
import math
import time

from redis.asyncio import Redis

from worker import keys
from worker.errors import RateLimited


async def check_rate(
    redis: Redis, principal_id: str, limit: int, window: float, what: str = "submissions"
) -> None:
    """Count a request of ``principal_id``; ``RateLimited`` (naming ``what`` was counted) past ``limit`` per
    ``window`` (0: no limit)."""
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
            f"more than {limit} {what} in {window:g} s; try again in {retry_after} s", retry_after
        )


async def check_sign_in(redis: Redis, address: str, token: str, limit: int, window: float) -> None:
    """Count a sign-in attempt from client ``address`` with ``token`` (right or wrong) against both
    counters; ``RateLimited`` past ``limit`` attempts per ``window`` from that address, or with that token,
    whichever comes first (0: no limit). A refusal by the address is not counted against the token."""
    await check_rate(
        redis, f"ui-login address\x00{address}", limit, window, "sign-in attempts from your address"
    )
    digest = hashlib.sha256(token.encode()).hexdigest()
    await check_rate(redis, f"ui-login token\x00{digest}", limit, window, "sign-in attempts with this token")


async def once_per(redis: Redis, what: str, seconds: int, message: str) -> None:
    """Let ``what`` happen at most once every ``seconds``; ``RateLimited`` (with ``message``) sooner."""
    key = keys.once(what)
    if await redis.set(key, b"1", nx=True, ex=seconds):
        return
    left = await redis.ttl(key)
    retry_after = max(1, int(left) if left and int(left) > 0 else seconds)
    raise RateLimited(f"{message}; try again in {retry_after} s", retry_after)
