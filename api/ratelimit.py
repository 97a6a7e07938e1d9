"""Per-principal submission rate limits: a fixed window counter in Redis, shared by every API process."""

from __future__ import annotations

import hashlib
import math
import time

from redis.asyncio import Redis

from worker.errors import WikiqError


class RateLimited(WikiqError):
    """Too many submissions in the current window; ``retry_after`` says when to try again."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


async def check_rate(redis: Redis, principal: str, limit: int, window: float) -> None:
    """Count a submission of ``principal``; ``RateLimited`` past ``limit`` per ``window`` (0: no limit)."""
    if limit <= 0:
        return
    now = time.time()
    slot = math.floor(now / window)
    key = "wikiq:rate:" + hashlib.sha256(principal.encode()).hexdigest()[:32] + f":{slot}"
    async with redis.pipeline(transaction=True) as pipe:
        pipe.incr(key)
        pipe.expire(key, math.ceil(window) + 1)
        count, _ = await pipe.execute()
    if int(count) > limit:
        retry_after = max(1, math.ceil((slot + 1) * window - now))
        raise RateLimited(
            f"more than {limit} submissions in {window:g} s; try again in {retry_after} s", retry_after
        )
