"""``GET /metrics``: Prometheus text for the whole deployment, served by any API process.

Counters and histograms come from the Redis hash every process adds into (``worker.metrics``); queue
depth, oldest-job age, live workers and partition leases are read from Redis at scrape time. One pipelined
round trip gathers everything; a ``Collector`` bound to that snapshot renders it through prometheus-client.
The endpoint needs no token (like ``/healthz``): it shows counts, partitions and worker ids, never content.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from redis.asyncio import Redis

from api.server.deps import Svc
from worker import keys
from worker.settings import Settings
from worker.telemetry.metrics import COUNTERS, HISTOGRAMS, KEY, bound_text, parse_field

router = APIRouter(tags=["health"])
Labels = tuple[tuple[str, str], ...]


@dataclass
class Snapshot:
    """Everything one scrape renders, read from Redis in one round trip."""

    stored: dict[str, float] = field(default_factory=dict)
    depth: list[int] = field(default_factory=list)
    oldest_ms: list[float | None] = field(default_factory=list)
    owners: list[str | None] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    webhooks_due: int = 0
    webhooks_deferred: int = 0
    outbox_entries: int = 0
    now_ms: int = 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def read_snapshot(settings: Settings, redis: Redis) -> Snapshot:
    """Read the stored metrics and the live queue state of the deployment."""
    now_ms = int(time.time() * 1000)
    count = settings.partitions
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(KEY)
        pipe.zrangebyscore(keys.WORKERS, now_ms - int(settings.lease_seconds * 1000), "+inf")
        pipe.zcount(keys.WEBHOOK_QUEUE, "-inf", now_ms)
        pipe.zcard(keys.WEBHOOK_QUEUE)
        for partition in range(count):
            pipe.xlen(keys.outbox(partition))
        for partition in range(count):
            pipe.zcard(keys.queue(partition))
            pipe.zrange(keys.queue(partition), 0, 0, withscores=True)
            pipe.get(keys.lease(partition))
        replies = await pipe.execute()
    stored, live, due, total = replies[:4]
    rest = replies[4 + count :]
    snap = Snapshot(now_ms=now_ms, webhooks_due=int(due), webhooks_deferred=int(total) - int(due))
    snap.outbox_entries = sum(int(n) for n in replies[4 : 4 + count])
    snap.stored = {_text(k): float(v) for k, v in stored.items()}
    snap.live = sorted(_text(w) for w in live)
    for i in range(count):
        depth, first, owner = rest[3 * i : 3 * i + 3]
        snap.depth.append(int(depth))
        snap.oldest_ms.append(float(first[0][1]) if first else None)
        snap.owners.append(None if owner is None else _text(owner))
    return snap


class SnapshotCollector(Collector):
    """Yields the metric families of one ``Snapshot``."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        """Counters, histograms and scrape-time gauges, every family present even when empty."""
        yield from self._counters()
        yield from self._histograms()
        yield from self._gauges()

    def _series(self) -> dict[str, dict[Labels, dict[str, float]]]:
        series: dict[str, dict[Labels, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        for raw, value in self.snap.stored.items():
            parsed = parse_field(raw)
            if parsed is not None:
                name, labels, part = parsed
                series[name][labels][part] = value
        return series

    def _counters(self) -> Iterator[Metric]:
        series = self._series()
        for name, spec in COUNTERS.items():
            family = CounterMetricFamily(name, spec.help, labels=spec.labels)
            found = series.get(name, {})
            if not found and not spec.labels:
                family.add_metric([], 0.0)
            for labels, parts in sorted(found.items()):
                if tuple(k for k, _ in labels) == spec.labels:
                    family.add_metric([v for _, v in labels], parts.get("", 0.0))
            yield family

    def _histograms(self) -> Iterator[Metric]:
        series = self._series()
        for name, spec in HISTOGRAMS.items():
            family = HistogramMetricFamily(name, spec.help, labels=spec.labels)
            found = series.get(name, {})
            if not found and not spec.labels:
                found = {(): {}}
            for labels, parts in sorted(found.items()):
                if tuple(k for k, _ in labels) != spec.labels:
                    continue
                running = 0.0
                buckets: list[tuple[str, float]] = []
                for bound in spec.buckets or ():
                    running += parts.get("le=" + bound_text(bound), 0.0)
                    buckets.append((bound_text(bound), running))
                buckets.append(("+Inf", parts.get("count", running + parts.get("le=+Inf", 0.0))))
                family.add_metric([v for _, v in labels], buckets, parts.get("sum", 0.0))
            yield family

    def _gauges(self) -> Iterator[Metric]:
        snap = self.snap
        depth = GaugeMetricFamily(
            "wikiq_queue_depth", "Jobs waiting or running on a partition's queue.", labels=["partition"]
        )
        age = GaugeMetricFamily(
            "wikiq_queue_oldest_age_seconds",
            "Age of the oldest job on a partition's queue (0 when empty).",
            labels=["partition"],
        )
        owned = GaugeMetricFamily(
            "wikiq_partition_owned", "1 when a live worker holds the partition's lease.", labels=["partition"]
        )
        lease = GaugeMetricFamily(
            "wikiq_partition_lease",
            "The worker holding a partition's lease (value 1).",
            labels=["partition", "worker"],
        )
        live = set(snap.live)
        per_worker: dict[str, int] = dict.fromkeys(snap.live, 0)
        for p, (n, oldest, owner) in enumerate(zip(snap.depth, snap.oldest_ms, snap.owners, strict=True)):
            depth.add_metric([str(p)], n)
            age.add_metric([str(p)], 0.0 if oldest is None else max(0.0, (snap.now_ms - oldest) / 1000))
            owned.add_metric([str(p)], 1.0 if owner in live else 0.0)
            if owner is not None:
                lease.add_metric([str(p), owner], 1.0)
                if owner in live:
                    per_worker[owner] += 1
        workers = GaugeMetricFamily(
            "wikiq_worker_partitions", "Partitions leased by each live worker.", labels=["worker"]
        )
        for worker, n in sorted(per_worker.items()):
            workers.add_metric([worker], n)
        yield from (depth, age, owned, lease, workers)
        yield GaugeMetricFamily("wikiq_workers_live", "Worker processes with a recent heartbeat.", len(live))
        hooks = GaugeMetricFamily(
            "wikiq_webhook_queue_depth",
            "Webhook retries queued on arq: due now, or deferred.",
            labels=["state"],
        )
        hooks.add_metric(["due"], snap.webhooks_due)
        hooks.add_metric(["deferred"], snap.webhooks_deferred)
        yield hooks
        yield GaugeMetricFamily(
            "wikiq_webhook_outbox_entries",
            "First webhook attempts in the partitions' outboxes, not yet sent and recorded (grows while no "
            "taker runs; each partition keeps about 10 000, dropping the oldest past that).",
            snap.outbox_entries,
        )


@router.get("/metrics", include_in_schema=False)
async def metrics(svc: Svc) -> Response:
    """Prometheus text exposition of the deployment's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(await read_snapshot(svc.resources.settings, svc.resources.redis)))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
