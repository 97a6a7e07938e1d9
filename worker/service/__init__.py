"""The service layer: what every transport (HTTP routes, MCP tools, the status page) calls.

Each operation takes the ``Principal`` making the call and answers a typed model of
``worker.schema.answers`` or raises one error of ``worker.errors``. Rights, limits, idempotency, job
ownership and enqueueing are decided here, once, so the transports stay thin adapters.

    Service
    ├── reads    wikis, pages (one, many, sections), search, commits   (worker.service.reads)
    ├── links    backlinks of a page                                    (worker.service.links)
    ├── submit   a batch: checks, idempotency, enqueue                  (worker.service.submit)
    ├── proposals   a batch that lands once approved: review, decide    (worker.service.proposals)
    └── jobs     get / long-poll, cancel, redeliver, list               (worker.service.jobs)
"""

from __future__ import annotations

from worker.service.caller import RIGHTS, SINGLE_USER_ID, Principal
from worker.service.service import Service

__all__ = ["RIGHTS", "SINGLE_USER_ID", "Principal", "Service"]
