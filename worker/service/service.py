"""The ``Service``: every operation a transport offers, on the process's ``Resources``."""

from __future__ import annotations

from worker.jobs.proposals import ProposalStore
from worker.jobs.resources import Resources
from worker.service.jobs import Jobs
from worker.service.links import LinkReads
from worker.service.proposals import Proposals
from worker.service.reads import Reads
from worker.service.submit import Submissions


class Service:
    """Every operation a transport offers, on one set of resources (see the package docstring)."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        settings, redis, wikis, jobs = resources.settings, resources.redis, resources.wikis, resources.jobs
        self.reads = Reads(settings, resources.store, wikis)
        self.links = LinkReads(self.reads)
        self.jobs = Jobs(settings, redis, wikis, jobs, resources.waiters)
        self.proposals = Proposals(settings, ProposalStore.of(redis, settings), jobs, wikis)
        self.submissions = Submissions(settings, redis, wikis, jobs, self.proposals)
        self.proposals.submissions = self.submissions
