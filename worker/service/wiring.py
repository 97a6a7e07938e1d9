"""Wiring in one place: the shared resources of a process, created once at start-up, and the ``Service``
built on them."""

from __future__ import annotations

from dataclasses import dataclass

from arq.connections import ArqRedis

from worker.git import GitStore
from worker.jobs.records import JobStore
from worker.jobs.waiters import Waiters
from worker.jobs.wikis import Wikis
from worker.service.jobs import Jobs
from worker.service.links import LinkReads
from worker.service.reads import Reads
from worker.service.submit import Submissions
from worker.settings import Settings


@dataclass
class Wiring:
    """What the service needs: settings, the Redis pool, the git store, the job store, long-poll wake-ups."""

    settings: Settings
    redis: ArqRedis
    store: GitStore
    jobs: JobStore
    waiters: Waiters
    wikis: Wikis


class Service:
    """Every operation a transport offers, on one set of resources (see the package docstring)."""

    def __init__(self, wiring: Wiring) -> None:
        self.wiring = wiring
        self.reads = Reads(wiring.settings, wiring.store, wiring.wikis)
        self.links = LinkReads(self.reads)
        self.jobs = Jobs(wiring.settings, wiring.redis, wiring.wikis, wiring.jobs, wiring.waiters)
        self.submissions = Submissions(wiring.settings, wiring.redis, wiring.wikis, wiring.jobs)
