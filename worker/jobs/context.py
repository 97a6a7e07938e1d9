"""What arq job functions are handed: the process's shared resources (``Deps``) inside arq's ``ctx``.

arq passes each job a plain dict; ``JobContext`` names what wikiq puts in it (``deps``, ``redis``, and for
webhook deliveries ``http``, ``signer``, ``rng``) and what arq adds (``job_try``), so job functions read
typed values instead of guessing keys.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from arq.connections import ArqRedis
from standardwebhooks import Webhook

from worker.git import GitStore
from worker.jobs.records import JobRecord, JobStore
from worker.jobs.wikis import Wikis

if TYPE_CHECKING:
    from worker.jobs.publish import Publisher
from worker.settings import Settings


@dataclass
class Deps:
    """What job functions need, created once at worker start-up and handed down through arq's ctx.

    ``wikis`` knows the remote-backed wikis (None: local wikis only, as in some tests); ``publisher``
    remembers, per remote, when this process last pushed.
    """

    settings: Settings
    store: GitStore
    jobs: JobStore
    wikis: Wikis | None = None
    publisher: Publisher = field(default_factory=lambda: _publisher())


class FirstAttempts(Protocol):
    """Sends the first attempt of a finished job's webhook from the process that finished it, at once and
    without a round through arq (``worker.webhooks.first``); the attempt also queued on arq, ``defer_ms``
    later, is the safety net should this process die first."""

    defer_ms: int

    def start(self, finished: list[tuple[JobRecord, bytes]]) -> None:
        """Send the webhooks of ``finished`` jobs (each with the exact bytes stored for it), in the
        background."""


class JobContext(TypedDict, total=False):
    """arq's ``ctx`` as wikiq fills it."""

    deps: Deps
    redis: ArqRedis
    job_try: int  # set by arq: 1 on the first run
    owner: str  # the worker id holding the partition's lease (fences registry updates)
    http: Any  # webhook deliveries only: worker.webhooks.http.WebhookSender (tests: an httpx.AsyncClient)
    signer: Webhook | None
    rng: random.Random
    first_attempts: FirstAttempts  # a worker process's batch consumers: webhooks' first attempts


def _publisher() -> Publisher:
    from worker.jobs.publish import Publisher  # publish imports this module: resolved at first use

    return Publisher()
