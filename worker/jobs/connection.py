"""The one Redis connection factory: every process reaches Redis through ``connect`` or ``client``, for arq
and for every key wikiq keeps itself.

A target is a plain ``redis://`` URL, or the current primary named by Redis Sentinel
(``WIKIQ_REDIS_SENTINELS``). Every connection has a bounded connect time and TCP keepalive, and its replies
a bound when asked (``reply_timeout``), so a Redis that stopped answering fails a command instead of hanging
it; arq's jobs are JSON (``worker.jobs.payloads``), never pickle.
"""

from __future__ import annotations

import socket
from typing import Any, cast

from arq.connections import ArqRedis
from redis.asyncio.sentinel import Sentinel

from worker.jobs.payloads import dumps, loads
from worker.settings import Settings

CONNECT_TIMEOUT = 1.0  # seconds to open a TCP connection to Redis or a sentinel (arq's default too)
SENTINEL_TIMEOUT = 1.0  # seconds a sentinel has to answer "who is the primary?"
REPLY_MARGIN = 0.5  # seconds a Redis reply may take beyond the longest wait a command of ours asks for
# A primary that loses power sends no RST: without these, a connection waiting on it (a pub/sub listener, a
# reply in flight) would hang for TCP's defaults (2 h idle, ~15 min of retransmissions) instead of failing
# over: probe after 10 s idle, give up after 3 unanswered probes 5 s apart, or 30 s without an ACK.
KEEPALIVE = {
    getattr(socket, name): value
    for name, value in (
        ("TCP_KEEPIDLE", 10),
        ("TCP_KEEPINTVL", 5),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", 30_000),
    )
    if hasattr(socket, name)
}


def client(target: Settings | str, *, decode: bool = False, timeout: float | None = None) -> ArqRedis:
    """An arq Redis pool (JSON jobs, never pickle) for ``target``: a ``redis://`` URL, or settings naming
    either a URL or sentinels. Nothing is sent yet; ``timeout`` bounds every reply (None: no bound, which
    blocking commands such as ``BLPOP`` need).

    With sentinels, each new connection asks them for the current primary, and a connection that finds a
    demoted primary (``READONLY``) is dropped, so a failover is followed without a restart (redis-py's
    ``SentinelConnectionPool``). arq's own sentinel support (``RedisSettings(sentinel=True)``) is not used:
    it sets no connect timeout for the sentinels or the primary, so one unreachable host stalls every
    process.
    """
    options: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": timeout,
        "socket_keepalive": True,
        "socket_keepalive_options": KEEPALIVE,
        "decode_responses": decode,
        # no CLIENT SETINFO on connect: a new connection to a Redis that does not answer would wait out
        # one reply bound for it before its command waits out another
        "lib_name": None,
        "lib_version": None,
    }
    if isinstance(target, Settings) and target.redis_sentinels:
        assert target.redis_sentinel_master is not None  # the settings check that both are given
        sentinel = Sentinel(
            list(target.redis_sentinels),
            sentinel_kwargs={
                "socket_connect_timeout": CONNECT_TIMEOUT,
                "socket_timeout": SENTINEL_TIMEOUT,
                "decode_responses": True,
            },
            **options,
        )
        pool = cast(ArqRedis, sentinel.master_for(target.redis_sentinel_master, redis_class=ArqRedis))
    else:
        url = target.redis_url if isinstance(target, Settings) else target
        pool = ArqRedis.from_url(url, **options)
    pool.job_serializer = dumps
    pool.job_deserializer = loads
    return pool


async def connect(target: Settings | str, *, decode: bool = False) -> ArqRedis:
    """``client(target)`` once it answers PING (raises the ``RedisError`` otherwise)."""
    pool = client(target, decode=decode)
    try:
        await pool.ping()
    except BaseException:
        await pool.aclose()
        raise
    return pool


def reply_timeout(settings: Settings) -> float:
    """The socket timeout of wikiq's Redis clients (``client(timeout=...)``): longer than the longest wait
    a command of ours asks Redis for (the acceptance's ``WAITAOF``/``WAIT``, ``accept_timeout_seconds``),
    so that only a Redis that stopped answering times out, as a ``RedisTimeoutError``: the API's 503 comes
    within the accept timeout plus a second, as the contract says."""
    return settings.accept_timeout_seconds + REPLY_MARGIN
