"""What wikiq relies on inside arq still holds in the installed arq (fails loudly after an arq upgrade)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from arq.constants import in_progress_key_prefix, job_key_prefix
from arq.worker import Worker, func

from worker.jobs.arq_compat import job_entry, job_keys, poll_once
from worker.jobs.connection import connect
from worker.jobs.payloads import dumps, loads
from worker.redis_server import RedisServer


def test_the_private_poll_step_and_key_prefixes_exist() -> None:
    """``Worker._poll_iteration`` is a coroutine function; the key prefixes our Lua scripts use hold."""
    assert inspect.iscoroutinefunction(Worker._poll_iteration)
    assert in_progress_key_prefix == "arq:in-progress:"
    assert job_key_prefix == "arq:job:"


async def test_one_poll_starts_a_due_job(redis_server: RedisServer) -> None:
    """``poll_once`` claims a queued job and starts it, without arq's own loop."""
    redis = await connect(redis_server.url)
    ran = asyncio.Event()

    async def job(ctx: dict[str, Any], value: int) -> int:
        ran.set()
        return value

    worker = Worker(
        functions=[func(job, name="job")],
        queue_name="compat:queue",
        redis_pool=redis,
        handle_signals=False,
        max_jobs=1,
        keep_result=0,
        job_serializer=dumps,
        job_deserializer=loads,
    )
    try:
        await redis.enqueue_job("job", 7, _job_id="compat-1", _queue_name="compat:queue")
        await poll_once(worker)
        assert list(worker.tasks) == ["compat-1"]
        await asyncio.wait_for(ran.wait(), 30)
        await asyncio.wait_for(asyncio.gather(*worker.tasks.values()), 30)
        assert await redis.zcard("compat:queue") == 0
    finally:
        await worker.close()
        await redis.aclose()


async def test_job_entry_is_what_enqueue_job_stores(redis_server: RedisServer) -> None:
    """``job_entry`` builds the bytes arq's own ``enqueue_job`` stores (wikiq's scripts queue jobs with
    it), and ``job_keys`` names the keys arq uses for a job."""
    redis = await connect(redis_server.url)
    try:
        await redis.enqueue_job("apply_batch", "compat-2", _job_id="compat-2", _queue_name="compat:q2")
        stored = loads(await redis.get(job_key_prefix + "compat-2"))
        ours = loads(job_entry("apply_batch", ("compat-2",), stored["et"], dumps))
        assert ours == stored
        assert job_keys("compat-2") == (
            "arq:job:compat-2",
            "arq:result:compat-2",
            "arq:in-progress:compat-2",
            "arq:retry:compat-2",
        )
    finally:
        await redis.aclose()
