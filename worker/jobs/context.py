"""What arq job functions are handed: the process's ``Resources`` inside arq's ``ctx``.

arq passes each job a plain dict; ``JobContext`` names what wikiq puts in it (``resources``, ``redis``, and
for webhook deliveries ``http``, ``signer``, ``rng``, ``lanes``) and what arq adds (``job_try``), so job
functions read typed values instead of guessing keys.
"""

from __future__ import annotations

import random
from typing import Any, TypedDict

from arq.connections import ArqRedis
from standardwebhooks import Webhook

from worker.jobs.leases import Lease
from worker.jobs.resources import Resources


class JobContext(TypedDict, total=False):
    """arq's ``ctx`` as wikiq fills it."""

    resources: Resources
    redis: ArqRedis
    job_try: int  # set by arq: 1 on the first run
    owner: str  # the worker id holding the partition's lease (fences registry updates)
    lease: Lease  # that lease, with its epoch (fences every finish and the ref swap; absent: unfenced)
    http: Any  # webhook deliveries only: worker.webhooks.http.WebhookSender
    signer: Webhook | None
    rng: random.Random
    lanes: Any  # webhook deliveries only: worker.webhooks.lanes.Lanes, each principal's share of the slots
