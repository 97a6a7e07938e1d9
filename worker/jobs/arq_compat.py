"""The one place wikiq reaches into arq's internals.

wikiq drives arq's ``Worker`` one poll at a time (woken by its own doorbells instead of arq's fixed
``poll_delay``), which arq has no public call for. ``tests/unit/test_arq_compat.py`` fails loudly when an
arq release renames or changes what is used here.
"""

from __future__ import annotations

from arq.worker import Worker


async def poll_once(worker: Worker) -> None:
    """Let ``worker`` claim and start the jobs that are due now (arq's ``Worker._poll_iteration``)."""
    await worker._poll_iteration()
