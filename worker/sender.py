"""A ``wikiq webhooks`` process: a taker of the webhook outbox and nothing else (``worker.webhooks.taker``),
beside the workers and off their cores.

Any number may run, sharing the outbox with each other and with the workers' own takers (which take too
unless ``WIKIQ_WEBHOOK_SENDERS=true`` leaves first attempts to these processes). Retries and the attempts
of earlier versions are arq jobs the workers run (``worker.process``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal

from redis.exceptions import RedisError

from worker.jobs.queue import client, reply_timeout
from worker.jobs.records import JobStore
from worker.settings import Settings
from worker.telemetry.metrics import RECORDER
from worker.webhooks.deliver import signer_for
from worker.webhooks.http import WebhookSender
from worker.webhooks.taker import Taker, taker_name

log = logging.getLogger("wikiq.webhooks")


async def serve(settings: Settings) -> None:
    """Take first attempts until SIGINT/SIGTERM; then let those in flight finish (bounded by the delivery
    timeout). Without ``WIKIQ_WEBHOOK_SECRET`` there is nothing to send: wait for the signal."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    signer = signer_for(settings.webhook_secret)
    if signer is None:
        log.warning("webhooks: no WIKIQ_WEBHOOK_SECRET; nothing to send")
        await stopping.wait()
        return
    # Redis may be away at start: ``Taker.serve`` retries; replies wait past the outbox's blocking read
    redis = client(settings, timeout=reply_timeout(settings) + 1)
    try:
        await redis.ping()
    except RedisError as exc:
        log.warning("Redis at %s unavailable at start (%s); retrying", settings.redis_where, exc)
    jobs = JobStore(redis, settings.job_retention_seconds, settings.dry_run_retention_seconds)
    http = WebhookSender(settings.webhook_allow_private, settings.webhook_timeout)
    taker = Taker(settings, jobs, redis, http, signer, random.Random(), taker_name("webhooks"))
    RECORDER.start(redis)
    log.info("webhooks: taking first attempts from the outbox")
    try:
        await taker.serve(stopping)
    finally:
        await taker.close(settings.webhook_timeout)
        await http.aclose()
        await RECORDER.stop()
        await redis.aclose()
