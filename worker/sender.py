"""A ``wikiq webhooks`` process: a taker of the webhook outbox and nothing else (``worker.webhooks.taker``),
beside the workers.

A worker sends the first attempts of the jobs it finishes itself; these processes take the rest of the
outbox (a redelivery's entry, what a dead worker left), any number sharing it with each other and with the
workers' takers (which take it too unless ``WIKIQ_WEBHOOK_SENDERS=true`` leaves it to these processes).
Retries and the attempts of earlier versions are arq jobs the workers run (``worker.process``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal

from worker.bootstrap import connected, job_store
from worker.settings import Settings
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
    async with connected(settings) as redis:  # Redis may be away at start: ``Taker.serve`` retries
        http = WebhookSender(settings.webhook_allow_private, settings.webhook_timeout)
        taker = Taker(
            settings, job_store(settings, redis), redis, http, signer, random.Random(), taker_name("webhooks")
        )
        log.info("webhooks: taking first attempts from the outbox")
        try:
            await taker.serve(stopping)
        finally:
            await taker.close(settings.webhook_timeout)
            await http.aclose()
