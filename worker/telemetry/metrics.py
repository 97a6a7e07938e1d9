"""Deployment-wide counters and histograms kept in one Redis hash, so any API process can serve them.

Every process (API or worker) records into an in-memory ``Recorder``: a dict of pending increments behind
a lock, a few microseconds an event. A background task adds them into the hash ``wikiq:metrics`` with one
pipelined ``HINCRBYFLOAT`` per changed field shortly after (``FLUSH_DELAY``), and once more when the process
stops. ``GET /metrics`` (``api.metrics``) reads the hash and renders it with gauges computed at scrape time.

A field of the hash names one series: ``<metric>|<label>=<value>,...|<part>`` where ``part`` is empty for a
counter and ``le=<bound>``, ``sum`` or ``count`` for a histogram (buckets stored per bucket, not cumulative).
Counts survive worker restarts; they reset only with Redis. Increments not yet flushed when a process is
SIGKILLed are lost (at most ``FLUSH_DELAY`` worth).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from worker import keys
from worker.tasks import cancel_and_wait

KEY = keys.METRICS
FLUSH_DELAY = 0.05  # seconds to gather increments before one pipelined write

log = logging.getLogger("wikiq.metrics")

SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
EDITS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
BYTES = tuple(float(2**n) for n in range(8, 24, 2))  # 256 B .. 8 MiB


@dataclass(frozen=True)
class Spec:
    """One metric: its help text, label names and, for a histogram, its bucket upper bounds."""

    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None


COUNTERS: dict[str, Spec] = {
    "wikiq_jobs_accepted": Spec("Batches accepted (202) by the API."),
    "wikiq_jobs_succeeded": Spec("Jobs finished succeeded (dry runs included)."),
    "wikiq_jobs_failed": Spec("Jobs finished failed, by error code.", ("code",)),
    "wikiq_jobs_cancelled": Spec("Jobs cancelled while queued."),
    "wikiq_job_retries": Spec("Job runs handed back to arq to run again (unexpected error or Redis away)."),
    "wikiq_cas_retries": Spec(
        "Compare-and-swap retries of refs/heads/main: moved (another commit won) or locked.", ("reason",)
    ),
    "wikiq_webhook_attempts": Spec(
        "Webhook delivery attempts by outcome: delivered, http_4xx, http_5xx, redirect, timeout, network.",
        ("outcome",),
    ),
}
HISTOGRAMS: dict[str, Spec] = {
    "wikiq_job_queue_seconds": Spec("Submit to start of a job's first run.", buckets=SECONDS),
    "wikiq_job_run_seconds": Spec(
        "Start of a job to its recorded end: commit durable (succeeded) or refused (failed).",
        ("outcome",),
        SECONDS,
    ),
    "wikiq_commit_edits": Spec("Edits per commit written.", buckets=EDITS),
    "wikiq_commit_bytes": Spec("New content bytes a commit writes (changed paths).", buckets=BYTES),
}


def _clean(value: str) -> str:
    return value.translate(str.maketrans("|,=", "___"))


def field(name: str, labels: Iterable[tuple[str, str]] = (), part: str = "") -> str:
    """The hash field of one series (``part``: empty, ``le=<bound>``, ``sum`` or ``count``)."""
    return _field(name, tuple(labels), part)


@functools.lru_cache(maxsize=4096)
def _field(name: str, labels: tuple[tuple[str, str], ...], part: str) -> str:
    return f"{name}|{','.join(f'{k}={_clean(v)}' for k, v in labels)}|{part}"


@functools.lru_cache(maxsize=1024)
def _histogram_fields(name: str, labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ...], str, str]:
    buckets = HISTOGRAMS[name].buckets or ()
    per_bucket = tuple(_field(name, labels, "le=" + bound_text(b)) for b in buckets)
    return (
        (*per_bucket, _field(name, labels, "le=+Inf")),
        _field(name, labels, "sum"),
        _field(name, labels, "count"),
    )


def parse_field(raw: str) -> tuple[str, tuple[tuple[str, str], ...], str] | None:
    """``(metric, labels, part)`` of a hash field, or None when it is not one ``field`` makes."""
    pieces = raw.split("|")
    if len(pieces) != 3:
        return None
    name, labels, part = pieces
    pairs = tuple(tuple(p.split("=", 1)) for p in labels.split(",") if p)
    if any(len(p) != 2 for p in pairs):
        return None
    return name, pairs, part  # type: ignore[return-value]


def bound_text(bound: float) -> str:
    """A bucket bound as stored in a field: ``repr`` of the float, so ``0.05`` stays ``0.05``."""
    return repr(float(bound))


class Recorder:
    """Increments of this process, gathered in memory and added into Redis in the background."""

    def __init__(self, key: str = KEY, delay: float = FLUSH_DELAY) -> None:
        self.key = key
        self.delay = delay
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}
        self._redis: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, redis: Any) -> None:
        """Flush into ``redis`` from a task of the running loop (call once per process; later calls no-op)."""
        if self._task is not None and not self._task.done():
            return
        self._redis = redis
        self._loop = asyncio.get_running_loop()
        self._dirty = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name="metrics-flush")
        if self._pending:
            self._dirty.set()

    async def stop(self) -> None:
        """Stop the background task and flush what is left (errors ignored: the process is ending)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        with contextlib.suppress(RedisError, OSError):
            await self.flush()

    def inc(self, name: str, labels: Iterable[tuple[str, str]] = (), value: float = 1.0) -> None:
        """Add ``value`` to counter ``name``."""
        key = _field(name, tuple(labels), "")
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + value
        self._wake()

    def observe(self, name: str, value: float, labels: Iterable[tuple[str, str]] = ()) -> None:
        """Record one observation of histogram ``name``."""
        buckets = HISTOGRAMS[name].buckets or ()
        per_bucket, total, count = _histogram_fields(name, tuple(labels))
        bucket = per_bucket[bisect.bisect_left(buckets, value)]
        with self._lock:
            pending = self._pending
            pending[bucket] = pending.get(bucket, 0.0) + 1.0
            pending[total] = pending.get(total, 0.0) + value
            pending[count] = pending.get(count, 0.0) + 1.0
        self._wake()

    def pending(self) -> dict[str, float]:
        """A copy of the increments not yet written to Redis."""
        with self._lock:
            return dict(self._pending)

    def _wake(self) -> None:
        dirty, loop = self._dirty, self._loop
        if dirty is None or loop is None or dirty.is_set():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            dirty.set()
        else:  # an event from a worker thread (the git work runs in one)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(dirty.set)

    async def flush(self) -> None:
        """Add the pending increments into Redis now; on failure they stay pending."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending or self._redis is None:
            self._merge(pending)
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key, value in pending.items():
                    pipe.hincrbyfloat(self.key, key, value)
                await pipe.execute()
        except BaseException:
            self._merge(pending)
            raise

    def _merge(self, pending: dict[str, float]) -> None:
        if not pending:
            return
        with self._lock:
            for key, value in pending.items():
                self._pending[key] = self._pending.get(key, 0.0) + value

    async def _run(self) -> None:
        assert self._dirty is not None
        backoff = 0.5
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.delay)  # gather the increments of a burst into one write
            self._dirty.clear()
            try:
                await self.flush()
                backoff = 0.5
            except (RedisError, OSError) as exc:
                log.warning("metrics: Redis unavailable (%s); keeping increments", type(exc).__name__)
                self._dirty.set()
                await asyncio.sleep(backoff)  # back off while Redis is away
                backoff = min(backoff * 2, 5.0)


RECORDER = Recorder()
