"""The shared resources of a process, built once at start-up by ``worker.bootstrap``.

One ``Resources`` is what every part of a process works on: arq's job functions find it in their ``ctx``
(``worker.jobs.context``), the ``Service`` of the API is built on it (``worker.service``), and the in-process
test deployment builds its worker's the same way (``tests.service.harness``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from arq.connections import ArqRedis

from worker.git import GitStore
from worker.jobs.handover import OutboxEntry
from worker.jobs.proofs import CommitKey
from worker.jobs.record import JobRecord
from worker.jobs.store import JobStore
from worker.jobs.waiters import Waiters
from worker.jobs.wikis import Wikis
from worker.settings import Settings


class FirstSends(Protocol):
    """What sends the first webhook attempts of the jobs a process finishes (``worker.webhooks.taker``):
    its finishes take their outbox entries for consumer ``name`` and hand them over at once."""

    name: str

    async def finished(self, records: list[tuple[JobRecord, bytes]], taken: list[OutboxEntry]) -> None:
        """Send the attempts ``taken`` asks for; ``records`` are the jobs just finished, with the exact
        bytes stored for each."""


@dataclass
class Resources:
    """Settings, the Redis client, the git store, the job store and the wikis (local and remote-backed).

    ``waiters`` are the long-poll wake-ups (listening only in an API process); ``last_push`` remembers, per
    remote name, when this process last pushed there (``time.monotonic()``; pushes to one remote are spaced
    by it, ``worker.jobs.targets``); ``commit_key`` is the key of commit proofs (``worker.jobs.proofs``);
    ``first_sends`` sends the first webhook attempts of the jobs this process finishes (a worker's taker);
    ``sweep_now`` names the partitions whose proposal refs the consumer sweeps before its next job (a
    proposal's landing job just ran there, ``worker.jobs.revisions``).
    """

    settings: Settings
    redis: ArqRedis
    store: GitStore
    jobs: JobStore
    wikis: Wikis
    waiters: Waiters = field(default_factory=Waiters)
    last_push: dict[str, float] = field(default_factory=dict)
    commit_key: CommitKey = field(default_factory=CommitKey)
    first_sends: FirstSends | None = None
    sweep_now: set[int] = field(default_factory=set)
