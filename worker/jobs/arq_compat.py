"""The one place wikiq reaches into arq's internals.

wikiq drives arq's ``Worker`` one poll at a time (woken by its own doorbells instead of arq's fixed
``poll_delay``), which arq has no public call for; and it writes and removes arq's job entries inside its
own Lua scripts (a submission's record, queue entry and doorbell in one atomic step; a batch taken along by
a group commit leaving the queue with its record's finish), which needs arq's key names and entry format.
``tests/integration/test_arq_compat.py`` fails loudly when an arq release renames or changes what is used
here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix
from arq.jobs import serialize_job
from arq.worker import Worker

Serializer = Callable[[dict[str, Any]], bytes]
# arq's in-progress marker of a job is this prefix and the job's id (a Lua script clears a queue's markers)
IN_PROGRESS_PREFIX: str = in_progress_key_prefix


async def poll_once(worker: Worker) -> None:
    """Let ``worker`` claim and start the jobs that are due now (arq's ``Worker._poll_iteration``)."""
    await worker._poll_iteration()


def job_entry(function: str, args: tuple[Any, ...], enqueue_ms: int, serializer: Serializer) -> bytes:
    """The bytes arq stores under ``arq:job:<id>`` for a job of ``function(*args)`` enqueued at
    ``enqueue_ms`` (what ``ArqRedis.enqueue_job`` writes), so a Lua script can queue a job in the same
    atomic step as wikiq's own keys."""
    return serialize_job(function, args, {}, None, enqueue_ms, serializer=serializer)


def job_keys(job_id: str) -> tuple[str, str, str, str]:
    """arq's keys of job ``job_id``: its entry, result, in-progress marker and retry counter."""
    return (
        job_key_prefix + job_id,
        result_key_prefix + job_id,
        in_progress_key_prefix + job_id,
        retry_key_prefix + job_id,
    )
