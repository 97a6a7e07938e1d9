"""Soak benchmark: many wikis, a long run, through the real service (Redis, one API, one worker process).

20 000 one-create batches spread round-robin over 200 wikis (``--quick``: 3000 over 100), submitted by
``AGENTS`` concurrent clients that each POST a batch and long-poll its job until it is finished (a closed
loop, as agents do: every batch waits for its answer); after every tenth, its agent reads the new page back
through the API (so the API process reopens evicted wikis too). Each batch's latency is POST → finished
answer (the read-back is not counted).
The figures compare the first and the last ``WINDOW`` batches to finish: batches/s over the window and p50
latency (target: last within 1.25x of first), and the resident memory of the worker and API processes at
the start and the end. With 200 wikis and the worker keeping fewer repositories open, nearly every batch
lands on a wiki that was evicted since its last one: the run measures reopening, the tree cache across
reopenings and the pack count each wiki accumulates.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.queue import _wait_for_owners
from bench.report import Context, Row
from tests.e2e.service import Service

AGENTS = 8
READ_EVERY = 10  # every tenth batch, its agent then reads the page back through the API
TARGET_RATIO = 1.25
PAGE = "Soak page {n}. " + "A short note an agent keeps about one thing it learned, " * 3 + "\n"


@dataclass(frozen=True)
class SoakSize:
    """How long a soak runs: batches, wikis, and the window compared at each end."""

    batches: int
    wikis: int
    window: int


FULL = SoakSize(20_000, 200, 2000)
QUICK = SoakSize(3000, 100, 500)


@dataclass(frozen=True)
class Done:
    """One finished batch: when it finished (client clock), its latency, and its status."""

    finished: float
    latency: float
    status: str


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int, system: bool = True) -> float:
    """User (+ system unless not ``system``) CPU seconds of process ``pid`` (children excluded)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + (int(fields[12]) if system else 0)) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    """How many file descriptors process ``pid`` holds."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def max_packs(data: Path) -> int:
    """The most ``.pack`` files any wiki under ``data`` holds."""
    counts = [
        sum(1 for name in os.listdir(pack_dir) if name.endswith(".pack"))
        for pack_dir in (data / "wikis").glob("*.git/objects/pack")
    ]
    return max(counts, default=0)


def batch(n: int) -> dict[str, object]:
    """Batch ``n``: one create of a ~200-byte page."""
    return {
        "message": f"soak {n}",
        "edits": [{"op": "create", "path": f"wiki/s{n:06d}.md", "content": PAGE.format(n=n)}],
    }


@dataclass
class Probe:
    """The worker's CPU seconds when the first window had finished and when the last one began (and its
    memory then)."""

    pid: int
    window: int
    total: int
    first_end: float = 0.0
    last_start: float = 0.0
    rss_last_start: float = 0.0
    user: list[float] = field(default_factory=list)  # user CPU at: start, first end, last start, end

    def finished(self, done: int) -> None:
        """Note the worker's CPU time (and memory) at the window boundaries (``done`` batches so far)."""
        if done == self.window:
            self.first_end = cpu_seconds(self.pid)
            self.user.append(cpu_seconds(self.pid, system=False))
        if done == self.total - self.window:
            self.last_start = cpu_seconds(self.pid)
            self.user.append(cpu_seconds(self.pid, system=False))
            self.rss_last_start = rss_mb(self.pid)


async def _agent(
    client: httpx.AsyncClient,
    wikis: list[str],
    counter: list[int],
    total: int,
    out: list[Done],
    probe: Probe,
) -> None:
    """Take the next batch number, submit it to its wiki (round-robin), wait for its job; until done."""
    while counter[0] < total:
        n = counter[0]
        counter[0] += 1
        wiki = wikis[n % len(wikis)]
        start = time.perf_counter()
        answer = await client.post(f"/v1/wikis/{wiki}/batches", json=batch(n))
        if answer.status_code != 202:
            raise AssertionError(f"soak batch {n} refused: {answer.text}")
        job_id = answer.json()["job_id"]
        while True:
            job = (await client.get(f"/v1/jobs/{job_id}", params={"wait": 60})).json()
            if job["status"] not in ("queued", "running"):
                break
        end = time.perf_counter()
        out.append(Done(end, end - start, job["status"]))
        probe.finished(len(out))
        if n % READ_EVERY == 0 and job["status"] == "succeeded":
            path = batch(n)["edits"][0]["path"]  # type: ignore[index]
            read = await client.get(f"/v1/wikis/{wiki}/pages/{path}")
            if read.status_code != 200 or read.json()["content"] != PAGE.format(n=n):
                raise AssertionError(f"soak page {path} of {wiki} did not read back: {read.text[:200]}")


async def _drive(url: str, wikis: list[str], total: int, probe: Probe) -> tuple[float, list[Done]]:
    """Run ``AGENTS`` agents until ``total`` batches finished; (start time, finished batches in order)."""
    out: list[Done] = []
    counter = [0]
    limits = httpx.Limits(max_connections=AGENTS * 2)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(_agent(client, wikis, counter, total, out, probe) for _ in range(AGENTS)))
    return start, out


def window_figures(start: float, done: list[Done], window: int) -> tuple[float, float, float, float]:
    """(first per s, last per s, first p50 ms, last p50 ms) of the first and last ``window`` batches."""
    ordered = sorted(done, key=lambda d: d.finished)
    first, last = ordered[:window], ordered[-window:]
    before_last = ordered[-window - 1].finished if len(ordered) > window else start
    first_rate = len(first) / (first[-1].finished - start)
    last_rate = len(last) / (last[-1].finished - before_last)
    return (
        first_rate,
        last_rate,
        statistics.median(d.latency for d in first) * 1000,
        statistics.median(d.latency for d in last) * 1000,
    )


def _create_wikis(service: Service, count: int) -> list[str]:
    wikis = [f"soak{i:03d}" for i in range(count)]
    for wiki in wikis:
        service.create_wiki(wiki)
    return wikis


def section(ctx: Context) -> list[Row]:
    """Throughput, latency and memory at the start and the end of a long many-wiki run."""
    size = QUICK if ctx.quick else FULL
    service = Service(ctx.workdir / "soak", WIKIQ_PARTITIONS="16", WIKIQ_LEASE_SECONDS="5")
    service.start(workers=1)
    try:
        _wait_for_owners(service, 1)
        wikis = _create_wikis(service, size.wikis)
        worker = service.workers[0].pid
        api = service.api.pid if service.api is not None else worker
        worker_start, api_start = rss_mb(worker), rss_mb(api)
        cpu_start = cpu_seconds(worker)
        probe = Probe(worker, size.window, size.batches)
        probe.user.append(cpu_seconds(worker, system=False))
        began = time.perf_counter()
        start, done = asyncio.run(_drive(service.url, wikis, size.batches, probe))
        elapsed = time.perf_counter() - began
        cpu_end = cpu_seconds(worker)
        probe.user.append(cpu_seconds(worker, system=False))
        worker_cpu = cpu_end - cpu_start
        worker_end, api_end, fds = rss_mb(worker), rss_mb(api), open_fds(worker)
        packs = max_packs(service.data)
    finally:
        service.stop()
    failed = sum(1 for d in done if d.status != "succeeded")
    first_rate, last_rate, first_p50, last_p50 = window_figures(start, done, size.window)
    shape = f"{size.batches} batches over {size.wikis} wikis, {AGENTS} agents"
    rate_ok = last_rate * TARGET_RATIO >= first_rate
    p50_ok = last_p50 <= first_p50 * TARGET_RATIO
    return [
        Row("soak.first_per_s", first_rate, "batches/s", f"first {size.window} of {shape}"),
        Row(
            "soak.last_per_s",
            last_rate,
            "batches/s",
            f"last {size.window}; target within {TARGET_RATIO}x of first: {'meets' if rate_ok else 'MISSES'}",
        ),
        Row("soak.first_p50_ms", first_p50, "ms", "POST → finished answer (long-poll)"),
        Row(
            "soak.last_p50_ms",
            last_p50,
            "ms",
            f"target within {TARGET_RATIO}x of first: {'meets' if p50_ok else 'MISSES'}",
        ),
        Row("soak.last_over_first", last_rate / first_rate, "x", "batches/s, last window over first"),
        Row("soak.overall_per_s", len(done) / elapsed, "batches/s", "whole run"),
        Row("soak.worker_cpu_ms", worker_cpu * 1000 / max(1, len(done)), "ms/batch", "worker process CPU"),
        Row(
            "soak.first_worker_cpu_ms",
            (probe.first_end - cpu_start) * 1000 / size.window,
            "ms/batch",
            "worker CPU over the first window",
        ),
        Row(
            "soak.last_worker_cpu_ms",
            (cpu_end - probe.last_start) * 1000 / size.window,
            "ms/batch",
            "worker CPU over the last window (the rest of the time is I/O and waiting)",
        ),
        Row(
            "soak.first_worker_user_ms",
            (probe.user[1] - probe.user[0]) * 1000 / size.window,
            "ms/batch",
            "of which user time (system time is mostly flushing: it moves with the machine's disk load)",
        ),
        Row("soak.last_worker_user_ms", (probe.user[3] - probe.user[2]) * 1000 / size.window, "ms/batch", ""),
        Row("soak.worker_rss_start_mb", worker_start, "MB", "after creating the wikis"),
        Row("soak.worker_rss_last_start_mb", probe.rss_last_start, "MB", "when the last window began"),
        Row("soak.worker_rss_end_mb", worker_end, "MB", "after the last batch"),
        Row("soak.api_rss_start_mb", api_start, "MB", ""),
        Row("soak.api_rss_end_mb", api_end, "MB", ""),
        Row("soak.worker_fds_end", fds, "fds", "file descriptors the worker holds at the end"),
        Row("soak.max_packs_per_wiki", packs, "packs", "the most packs any wiki holds at the end"),
        Row("soak.failed_jobs", failed, "jobs", "must be 0"),
    ]
