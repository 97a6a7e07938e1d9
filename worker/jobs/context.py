"""What arq job functions are handed: the process's shared resources (``Deps``) inside arq's ``ctx``.

arq passes each job a plain dict; ``JobContext`` names what wikiq puts in it (``deps``, ``redis``, and for
webhook deliveries ``http``, ``signer``, ``rng``) and what arq adds (``job_try``), so job functions read
typed values instead of guessing keys.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, TypedDict

from arq.connections import ArqRedis
from standardwebhooks import Webhook

from worker.git import GitStore
from worker.jobs.leases import Lease
from worker.jobs.proofs import CommitKey
from worker.jobs.records import JobStore
from worker.jobs.wikis import Wikis
from worker.settings import Settings


@dataclass
class Deps:
    """What job functions need, created once at worker start-up and handed down through arq's ctx.

    ``wikis`` knows the remote-backed wikis (None: local wikis only, as in some tests); ``last_push``
    remembers, per remote name, when this process last pushed there (``time.monotonic()``; pushes to one
    remote are spaced by it, ``worker.jobs.targets``); ``commit_key`` is the key of commit proofs.
    """

    settings: Settings
    store: GitStore
    jobs: JobStore
    wikis: Wikis | None = None
    last_push: dict[str, float] = field(default_factory=dict)
    commit_key: CommitKey = field(default_factory=CommitKey)


class JobContext(TypedDict, total=False):
    """arq's ``ctx`` as wikiq fills it."""

    deps: Deps
    redis: ArqRedis
    job_try: int  # set by arq: 1 on the first run
    owner: str  # the worker id holding the partition's lease (fences registry updates)
    lease: Lease  # that lease, with its epoch (fences every finish and the ref swap; absent: unfenced)
    http: Any  # webhook deliveries only: worker.webhooks.http.WebhookSender (tests: an httpx.AsyncClient)
    signer: Webhook | None
    rng: random.Random
