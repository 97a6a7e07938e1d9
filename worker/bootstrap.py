"""Wiring in one place: the resources of a process, built from its settings at start-up and let go of at
shutdown.

Every process enters one of these, and nothing else builds a Redis client, a store or a registry for it:

    bootstrap(settings)         the ``Resources`` of a worker (``worker.process``), of the API with
                                ``listen=True`` (``api.server.app``), and of the in-process test deployment
    connected(settings)         the Redis client alone, for the webhook sender (``worker.sender``), with
    job_store(settings, redis)  its job store
    doorbells(settings)         the client of a worker's blocking doorbell pop (``worker.process``)
    build(settings, redis)      the ``Resources`` on a client already open, any part given instead (tests)

Redis may be away at start (restarting, failing over): a process serves anyway, every loop of it retries,
and ``/readyz`` says 503 meanwhile. Every reply is bounded (``reply_timeout``: a Redis that stopped answering
is an error, the API's 503, not a hung request), except on the pub/sub connection of the API's waiters,
which is idle between events by design. The metrics recorder flushes into the process's client while it is
open.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from arq.connections import ArqRedis
from redis.exceptions import RedisError

from worker.git import GitStore
from worker.git.remote import RemoteRegistry
from worker.jobs.connection import client, reply_timeout
from worker.jobs.registry import WikiRegistry
from worker.jobs.resources import Resources
from worker.jobs.store import JobStore
from worker.jobs.wikis import Wikis
from worker.settings import Settings
from worker.telemetry.metrics import RECORDER

log = logging.getLogger("wikiq.bootstrap")

BELL_MARGIN = 1.0  # seconds a doorbell reply may take beyond its pop's own wait (``BLPOP`` of 1 s)


@asynccontextmanager
async def bootstrap(
    settings: Settings, *, remotes: RemoteRegistry | None = None, listen: bool = False
) -> AsyncIterator[Resources]:
    """The ``Resources`` of a process, on a client of ``connected``; ``remotes``: the declared remotes,
    when the caller read them already (else from ``settings.remotes_file``: ``ValueError`` or ``OSError``
    for a bad file); ``listen``: the waiters listen for finished jobs (an API process) on a pub/sub
    connection of their own. On leaving: the waiters stop, the repositories close, the clients close."""
    async with connected(settings) as redis:
        resources = build(settings, redis, remotes=remotes)
        events = client(settings) if listen else None
        if events is not None:
            resources.waiters.start(events)
        try:
            yield resources
        finally:
            await resources.waiters.stop()
            resources.store.close()
            if events is not None:
                await events.aclose()


def build(
    settings: Settings,
    redis: ArqRedis,
    *,
    store: GitStore | None = None,
    jobs: JobStore | None = None,
    remotes: RemoteRegistry | None = None,
) -> Resources:
    """The ``Resources`` on ``redis``: the git store of ``settings.data_dir``, the job store with the
    settings' retentions, the wikis registry in Redis and the declared remotes, each unless given."""
    store = store if store is not None else GitStore(settings.data_dir)
    jobs = jobs if jobs is not None else job_store(settings, redis)
    remotes = remotes if remotes is not None else RemoteRegistry(settings.remotes_file)
    return Resources(settings, redis, store, jobs, Wikis(store, WikiRegistry(redis), remotes))


def job_store(settings: Settings, redis: ArqRedis) -> JobStore:
    """The job store on ``redis``, keeping finished records as long as ``settings`` say, and within each
    principal's retained-bytes cap."""
    return JobStore(
        redis,
        settings.job_retention_seconds,
        settings.dry_run_retention_seconds,
        settings.max_retained_bytes,
    )


@asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[ArqRedis]:
    """The process's Redis client, every reply bounded by ``reply_timeout``, with the metrics recorder
    flushing into it; a warning when Redis does not answer at start. On leaving: the recorder flushes
    what is left, the client closes."""
    redis = client(settings, timeout=reply_timeout(settings))
    try:
        try:
            await redis.ping()
        except RedisError as exc:
            log.warning("Redis at %s unavailable at start (%s); starting anyway", settings.redis_where, exc)
        RECORDER.start(redis)
        yield redis
    finally:
        await RECORDER.stop()
        await redis.aclose()


@asynccontextmanager
async def doorbells(settings: Settings) -> AsyncIterator[ArqRedis]:
    """A worker's doorbell client: a pool of its own, so that the blocking pop over the doorbells holds up
    no other command, its replies bounded ``BELL_MARGIN`` beyond the others'."""
    bells = client(settings, timeout=reply_timeout(settings) + BELL_MARGIN)
    try:
        yield bells
    finally:
        await bells.aclose()
