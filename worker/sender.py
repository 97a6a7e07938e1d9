"""A ``wikiq webhooks`` process: sends the first attempt of every finished job's webhook at once, beside the
workers and off their cores (``worker.webhooks.first``).

Any number may run; each pops its own records from the shared list. None running costs no webhook, only
time: arq's attempt 0, queued by every finish ``safety_net_ms`` later, is then sent by a worker. Retries
and redeliveries are arq jobs the workers run (``worker.process``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal

from worker.bootstrap import connected, job_store
from worker.settings import Settings
from worker.webhooks.deliver import signer_for
from worker.webhooks.first import FirstAttempts
from worker.webhooks.http import WebhookSender

log = logging.getLogger("wikiq.webhooks")


async def serve(settings: Settings) -> None:
    """Send first attempts until SIGINT/SIGTERM; then let those in flight finish (bounded by the delivery
    timeout). Without ``WIKIQ_WEBHOOK_SECRET`` there is nothing to send: wait for the signal."""
    os.nice(10)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    signer = signer_for(settings.webhook_secret)
    if signer is None or not settings.senders_send_first_attempts:
        log.warning("webhooks: no WIKIQ_WEBHOOK_SECRET or WIKIQ_WEBHOOK_SENDERS=false; nothing to send")
        await stopping.wait()
        return
    async with connected(settings) as redis:  # Redis may be away at start: ``FirstAttempts.serve`` retries
        http = WebhookSender(settings.webhook_allow_private, settings.webhook_timeout)
        first = FirstAttempts(settings, job_store(settings, redis), redis, http, signer, random.Random())
        log.info("webhooks: sending first attempts")
        try:
            await first.serve(stopping)
        finally:
            await first.close(settings.webhook_timeout)
            await http.aclose()
