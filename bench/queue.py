"""Queue benchmark: submit→committed latency through HTTP and long-poll, sustained batches/s with 1 and 2
workers, next to the engine-only rate and arq's default-settings start latency measured in the same run;
then the cost of durable acceptance: the same submission latency (POST→202) and sustained rate with
``WIKIQ_ACCEPT_DURABILITY`` none, local and replica (each on its own fresh deployment, Redis fsyncing as
the setting needs; ``replica`` adds a replica server on the same machine).

Everything is real: a Redis-compatible server, the API and worker processes (tests/e2e/service.py), HTTP
on loopback. Latency is measured by the client: from just before the POST to the 202 (accepted) and to
the long-poll answer (committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker, func

from bench.engine import run_engine
from bench.report import Context, Row
from bench.wikis import Layout, build_bare
from bench.workload import Workload
from tests.e2e.service import Service
from worker.engine import Applied
from worker.git import GitStore
from worker.redis_server import RedisServer, free_port

LAYOUT = Layout("nested", 100)
WIKIS = 8
ROUNDS = ("plain", "hooked", "hooked", "plain") * 2  # the order of the webhooks comparison's rounds


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _applied(job: dict[str, Any]) -> list[Applied]:
    return [
        Applied(a["index"], a["op"], a["path"], a["version"], a.get("new_path"))
        for a in job["result"]["applied"]
    ]


def _batch_json(workload: Workload, webhook: str | None = None) -> dict[str, Any]:
    batch = workload.batch()
    workload.record(workload.expected(batch))  # the client knows what its own batch will do
    body = batch.model_dump(mode="json", exclude_none=True)
    if webhook is not None:
        body["webhook"] = {"url": webhook}
    return body


def measure_latency(
    service: Service, workload: Workload, wiki: str, count: int
) -> tuple[list[float], list[float]]:
    """Sequential batches at light load: seconds from POST to its 202 (accepted), and to the long-poll
    answer of the finished job (committed)."""
    accepted, committed = [], []
    with httpx.Client(base_url=service.url, timeout=70) as client:
        for _ in range(count):
            body = _batch_json(workload)
            start = time.perf_counter()
            answer = client.post(f"/v1/wikis/{wiki}/batches", json=body)
            accepted.append(time.perf_counter() - start)
            if answer.status_code != 202:
                raise AssertionError(f"bench batch refused: {answer.status_code} {answer.text}")
            job = client.get(f"/v1/jobs/{answer.json()['job_id']}", params={"wait": 30}).json()
            committed.append(time.perf_counter() - start)
            if job["status"] != "succeeded":
                raise AssertionError(f"bench batch failed: {job}")
    return accepted, committed


class Submitter:
    """One kept-alive HTTP/1.1 connection to the API that POSTs ready-made bodies: the bench's client.

    The client shares the machine's two cores with the service, so its own CPU per batch is kept small:
    every body is built and serialised before the clock starts, and a POST is a few writes and reads on a
    socket (httpx spends ~1 ms of CPU per request here, as much as the API spends accepting it).
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` (JSON) to ``path``: the status and the answer's body."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line, *lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        length = 0
        for line in lines:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return int(status_line.split(" ", 2)[1]), await self.reader.readexactly(length)

    async def close(self) -> None:
        """Close the connection."""
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def _drive_wiki(submitter: Submitter, wiki: str, bodies: list[bytes]) -> str:
    """Submit ``bodies`` to one wiki in order (acceptance order is apply order); the last job id."""
    last = ""
    for body in bodies:
        status, answer = await submitter.post(f"/v1/wikis/{wiki}/batches", body)
        if status != 202:
            raise AssertionError(f"bench batch refused: {status} {answer[:300]!r}")
        last = json.loads(answer)["job_id"]
    return last


class CpuMeter:
    """CPU seconds (user + system) that each process of a deployment, and this client, spent between
    ``start`` and ``stop``: where the machine's two cores go per batch."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        found = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}
        found["client"] = time.process_time()
        return found

    def start(self) -> None:
        """Begin (or resume) counting."""
        self.before = self._now()

    def stop(self) -> None:
        """Stop counting: ``spent`` adds each process's CPU seconds since ``start``."""
        after = self._now()
        for name in after:
            self.spent[name] = self.spent.get(name, 0.0) + after[name] - self.before[name]

    def rows(self, prefix: str, batches: int, note: str) -> list[Row]:
        """One row per process: its CPU milliseconds per batch, and their sum."""
        rows = [
            Row(f"{prefix}.{name}", seconds / batches * 1000, "ms CPU", note if name == "api" else "")
            for name, seconds in self.spent.items()
        ]
        total = sum(self.spent.values()) / batches * 1000
        cores = os.cpu_count() or 1
        rows.append(
            Row(f"{prefix}.total", total, "ms CPU", f"at most {cores * 1000 / total:.0f}/s on {cores} cores")
        )
        return rows


WIKIQ_PROCESSES = ("api", "worker", "sender", "redis")  # what ``queue.cpu_per_webhook_ms`` counts


def service_pids(service: Service, **more: int) -> dict[str, int]:
    """The process ids of a deployment with one worker and at most one webhook sender: API, worker, sender
    (if any), Redis (and ``more``)."""
    assert service.api is not None and service.redis.process is not None
    return {
        "api": service.api.pid,
        "worker": service.workers[0].pid,
        **({"sender": service.senders[0].pid} if service.senders else {}),
        "redis": service.redis.process.pid,
        **more,
    }


def cpu_per_webhook_ms(plain: CpuMeter, hooked: CpuMeter, webhooks: int) -> float:
    """wikiq's own CPU milliseconds per webhook: what its processes (API, worker, sender, Redis; neither
    the client nor the receiver) spent in the webhooks rounds beyond what they spent in as many batches
    without webhooks."""
    spent = {
        name: sum(seconds for process, seconds in meter.spent.items() if process in WIKIQ_PROCESSES)
        for name, meter in (("plain", plain), ("hooked", hooked))
    }
    return (spent["hooked"] - spent["plain"]) / webhooks * 1000


async def _sustained(
    service: Service,
    workloads: dict[str, Workload],
    per_wiki: int,
    webhook: str | None = None,
    meter: CpuMeter | None = None,
    clock: list[float] | None = None,
) -> tuple[float, int]:
    """Batches/s from the first POST until every wiki's last job finished, and how many failed;
    ``clock`` gets the start's ``time.monotonic()``."""
    limits = httpx.Limits(max_connections=32)
    bodies = {
        wiki: [json.dumps(_batch_json(workload, webhook)).encode() for _ in range(per_wiki)]
        for wiki, workload in workloads.items()
    }  # made before the clock starts: the workload knows what each batch will do
    submitters = {wiki: Submitter(service.port) for wiki in workloads}
    async with httpx.AsyncClient(base_url=service.url, timeout=120, limits=limits) as client:
        if meter is not None:
            meter.start()
        start = time.perf_counter()
        if clock is not None:
            clock.append(time.monotonic())
        lasts = await asyncio.gather(*(_drive_wiki(submitters[w], w, b) for w, b in bodies.items()))
        for submitter in submitters.values():
            await submitter.close()
        for job_id in lasts:
            while (await client.get(f"/v1/jobs/{job_id}", params={"wait": 60})).json()["status"] in (
                "queued",
                "running",
            ):
                pass
        elapsed = time.perf_counter() - start
        if meter is not None:
            meter.stop()
        failed = 0
        for wiki in workloads:
            jobs = (await client.get(f"/v1/wikis/{wiki}/jobs", params={"limit": per_wiki})).json()["jobs"]
            failed += sum(1 for job in jobs if job["status"] != "succeeded")
    return len(workloads) * per_wiki / elapsed, failed


async def _arq_default_latency(redis_url: str, samples: int) -> list[float]:
    """Start delay of a trivial job under arq's defaults (poll_delay 0.5 s): enqueue → function start."""

    async def stamp(ctx: dict[str, Any], enqueued: float) -> float:
        return time.time() - enqueued

    pool = await create_pool(RedisSettings.from_dsn(redis_url))
    worker = Worker(
        functions=[func(stamp, name="stamp")],
        redis_pool=pool,
        queue_name="bench:arq-default",
        handle_signals=False,
    )
    task = asyncio.create_task(worker.async_run())
    delays = []
    try:
        for _ in range(samples):
            job = await pool.enqueue_job("stamp", time.time(), _queue_name="bench:arq-default")
            assert job is not None
            delays.append(float(await job.result(timeout=10, poll_delay=0.01)))
    finally:
        # a job arq is still finishing (its result written after ``job.result`` saw it) ends cancelled
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(asyncio.CancelledError):
            await worker.close()
    return delays


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _idle_cpu(pid: int, seconds: float) -> float:
    """Share of one core a process used over ``seconds`` of idleness."""
    before, start = _cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)  # measuring an idle process over a wall-clock window
    return (_cpu_seconds(pid) - before) / (time.perf_counter() - start)


def _engine_only(root: Path, commits: int) -> float:
    versions = build_bare(root, "engine", LAYOUT)
    store = GitStore(root)
    run = run_engine(store.open("engine"), Workload(LAYOUT, versions, seed=99), commits)
    store.close()
    return run.commits_per_s


@dataclass
class Compared:
    """The plain and the webhooks-on sustained runs of one deployment (``_plain_and_hooked``)."""

    plain_rate: float
    hooked_rate: float
    jobs_rate: float
    plain_failed: int
    hooked_failed: int
    delivered: int
    block_ratios: list[float]  # webhooks over plain in each block of four rounds (plain, webhooks x2, plain)


def _plain_and_hooked(
    service: Service,
    workloads: dict[str, Workload],
    per_wiki: int,
    port: int,
    plain: CpuMeter,
    hooked: CpuMeter,
) -> Compared:
    """Sustained runs without and with a webhook on every batch, in eight rounds of ``per_wiki / 2``
    batches per wiki: plain, webhooks, webhooks, plain, twice (``ROUNDS``). Each round leaves the wikis
    larger and Redis fuller than it found them, so running all of one kind after the other would charge
    that drift to the second kind; in this order a drift that grows steadily weighs on both alike, and
    the machine's slower and faster spells (a shared VM's) fall on both kinds more evenly than in one
    such sequence. A webhooks round counts until its last webhook reached the receiver (the receiver's
    ``/last``)."""
    half = per_wiki // 2
    url = f"http://127.0.0.1:{port}/bench"
    blocks: list[dict[str, float]] = []  # the seconds of each kind in each block of four rounds
    jobs_seconds = 0.0  # the webhooks rounds until their last job finished
    failed = {"plain": 0, "hooked": 0}
    delivered = 0
    for n, kind in enumerate(ROUNDS):
        if n % 4 == 0:
            blocks.append({"plain": 0.0, "hooked": 0.0})
        if kind == "plain":
            rate, bad = asyncio.run(_sustained(service, workloads, half, meter=plain))
            spent = WIKIS * half / rate
        else:
            started: list[float] = []
            rate, bad = asyncio.run(_sustained(service, workloads, half, url, hooked, started))
            jobs_seconds += WIKIS * half / rate
            hooked.start()  # again: count the deliveries that come after the last job finished
            delivered = _await_deliveries(port, delivered + WIKIS * half)
            hooked.stop()
            spent = float(httpx.get(f"http://127.0.0.1:{port}/last", timeout=5).text) - started[0]
        blocks[-1][kind] += spent
        failed[kind] += bad
    batches = ROUNDS.count("plain") * WIKIS * half
    seconds = {kind: sum(block[kind] for block in blocks) for kind in ("plain", "hooked")}
    return Compared(
        batches / seconds["plain"],
        batches / seconds["hooked"],
        batches / jobs_seconds,
        failed["plain"],
        failed["hooked"],
        delivered,
        [block["plain"] / block["hooked"] for block in blocks],
    )


def _ms(values: list[float], q: float) -> float:
    return _percentile(values, q) * 1000


def section(ctx: Context) -> list[Row]:
    """Latency, sustained throughput (1 and 2 workers), engine-only rate, arq defaults, idle CPU."""
    latency_n, per_wiki, engine_n, arq_n = (40, 15, 60, 10) if ctx.quick else (300, 250, 1000, 40)
    root = ctx.workdir / "queue"
    engine_rate = _engine_only(ctx.workdir / "engine-only", engine_n)
    # as compose.yaml and `wikiq dev` run it: the worker sends the webhooks, no sender process
    service = Service(root, WIKIQ_PARTITIONS="16", WIKIQ_LEASE_SECONDS="5")
    workloads = {
        f"q{i}": Workload(LAYOUT, build_bare(service.data, f"q{i}", LAYOUT), seed=i) for i in range(WIKIS)
    }
    rows: list[Row] = []
    hooked_batches = ROUNDS.count("hooked") * WIKIS * (per_wiki // 2)
    service.start(workers=1, senders=0)
    try:
        _wait_for_owners(service, 1)
        idle = _idle_cpu(service.workers[0].pid, 5 if ctx.quick else 10)
        _, latency = measure_latency(service, workloads["q0"], "q0", latency_n)
        port = free_port()  # the receiver runs in its own process, not sharing this client's GIL
        receiver = subprocess.Popen([sys.executable, "-m", "tests.e2e.receiver", str(port)])
        plain = CpuMeter(service_pids(service))
        hooked = CpuMeter(service_pids(service, receiver=receiver.pid))
        try:
            compared = _plain_and_hooked(service, workloads, per_wiki, port, plain, hooked)
            got = httpx.get(f"http://127.0.0.1:{port}/delays", timeout=30).text.split()
            delays = [float(ms) / 1000 for ms in got]
        finally:
            receiver.terminate()
            receiver.wait()
        one_rate, hooked_rate, hooked_jobs_rate = (
            compared.plain_rate,
            compared.hooked_rate,
            compared.jobs_rate,
        )
        one_failed, hooked_failed, delivered = (
            compared.plain_failed,
            compared.hooked_failed,
            compared.delivered,
        )
        service.start_worker()
        _wait_for_owners(service, 2)
        two_rate, two_failed = asyncio.run(_sustained(service, workloads, per_wiki))
        arq = asyncio.run(_arq_default_latency(service.redis.url, arq_n))
    finally:
        service.stop()
    rows += [
        Row(
            "queue.worker_idle_cpu_pct",
            idle * 100,
            "% core",
            "one idle worker holding 16 partitions; target < 2",
        ),
        Row(
            "queue.latency_p50_ms",
            _ms(latency, 50),
            "ms",
            f"{latency_n} sequential 10-edit batches; target ≤ 20",
        ),
        Row("queue.latency_p95_ms", _ms(latency, 95), "ms", "submit → committed, via long-poll"),
        Row("queue.latency_p99_ms", _ms(latency, 99), "ms", "target ≤ 60"),
        Row("queue.latency_mean_ms", statistics.mean(latency) * 1000, "ms", ""),
        Row("queue.arq_default_start_p50_ms", _ms(arq, 50), "ms", f"arq defaults (poll 0.5 s), {arq_n} jobs"),
        Row("queue.engine_only_per_s", engine_rate, "batches/s", "engine + store alone, same run"),
        Row("queue.sustained_1_worker_per_s", one_rate, "batches/s", f"{WIKIS} wikis x {per_wiki} batches"),
        Row(
            "queue.sustained_1_worker_webhooks_per_s",
            hooked_rate,
            "batches/s",
            "same, every batch with a webhook: until the last webhook arrived",
        ),
        Row(
            "queue.sustained_1_worker_webhooks_jobs_per_s",
            hooked_jobs_rate,
            "batches/s",
            "the same run until the last job finished",
        ),
        Row("queue.webhooks_over_plain", hooked_rate / one_rate, "x", "no target (see the next three)"),
        *(
            Row(f"queue.webhooks_over_plain_block_{n}", ratio, "x", "the same in one block of four rounds")
            for n, ratio in enumerate(compared.block_ratios, 1)
        ),
        Row(
            "queue.webhook_delivery_p50_ms",
            _ms(delays, 50),
            "ms",
            "job finished (its commit on main) → the receiver has the POST; target ≤ 5",
        ),
        Row("queue.webhook_delivery_p99_ms", _ms(delays, 99), "ms", "the same; target ≤ 25"),
        Row(
            "queue.cpu_per_webhook_ms",
            cpu_per_webhook_ms(plain, hooked, hooked_batches),
            "ms CPU",
            "API + worker + sender + Redis, webhooks rounds minus plain rounds; target ≤ 0.35",
        ),
        Row(
            "queue.webhooks_delivered",
            delivered,
            "posts",
            f"to a loopback receiver; expected {ROUNDS.count('hooked') * WIKIS * (per_wiki // 2)}",
        ),
        Row("queue.sustained_2_workers_per_s", two_rate, "batches/s", f"{WIKIS} wikis x {per_wiki} batches"),
        Row("queue.sustained_over_engine_1", one_rate / engine_rate, "x", "target ≥ 0.6"),
        Row("queue.sustained_over_engine_2", two_rate / engine_rate, "x", "2 workers on 2 cores"),
        Row("queue.failed_jobs", one_failed + two_failed + hooked_failed, "jobs", "must be 0"),
    ]
    batches = ROUNDS.count("plain") * WIKIS * (per_wiki // 2)
    rows += plain.rows("queue.cpu_per_batch", batches, "1 worker, sustained; CPU of each process / batches")
    rows += hooked.rows("queue.cpu_per_batch_webhooks", batches, "the same with a webhook on every batch")
    rows += durability_rows(ctx)
    return rows


def _replicated(root: Path) -> tuple[RedisServer, RedisServer]:
    """A primary and its replica (AOF fsynced always on both), started; once the replica is online."""
    import redis

    primary = RedisServer(root / "primary", extra=("--repl-diskless-sync-delay", "0")).start()
    replica = RedisServer(
        root / "replica",
        extra=("--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", str(primary.port)),
    ).start()
    client = redis.Redis(host="127.0.0.1", port=primary.port, decode_responses=True)
    deadline = time.monotonic() + 60
    try:
        while client.info("replication").get("slave0", {}).get("state") != "online":
            if time.monotonic() > deadline:
                raise RuntimeError("the bench replica did not come online")
            time.sleep(0.05)  # waiting for the replica's first sync: nothing to wait on instead
    finally:
        client.close()
    return primary, replica


def durability_rows(ctx: Context) -> list[Row]:
    """Submission latency (POST→202, and →committed) and sustained 1-worker rate per acceptance
    durability, each on a fresh deployment built the same way, next to an engine-only rate measured just
    before them (the host's load moves during a run: the section's first engine figure is minutes old)."""
    latency_n, per_wiki, engine_n = (40, 15, 60) if ctx.quick else (200, 150, 1000)
    engine_rate = _engine_only(ctx.workdir / "engine-durability", engine_n)
    rows: list[Row] = [
        Row(
            "queue.durability.engine_only_per_s",
            engine_rate,
            "batches/s",
            "engine + store alone, just before",
        )
    ]
    rates: dict[str, float] = {}
    for durability in ("none", "local", "replica"):
        root = ctx.workdir / f"durability-{durability}"
        servers: tuple[RedisServer, RedisServer] | None = None
        if durability == "replica":
            servers = _replicated(root / "redis")
        service = Service(
            root,
            redis=servers[0] if servers else None,
            WIKIQ_PARTITIONS="16",
            WIKIQ_LEASE_SECONDS="5",
            WIKIQ_ACCEPT_DURABILITY=durability,
        )
        workloads = {
            f"d{i}": Workload(LAYOUT, build_bare(service.data, f"d{i}", LAYOUT), seed=100 + i)
            for i in range(WIKIS)
        }
        try:
            service.start(workers=1)
            _wait_for_owners(service, 1)
            accepted, committed = measure_latency(service, workloads["d0"], "d0", latency_n)
            rate, failed = asyncio.run(_sustained(service, workloads, per_wiki))
        finally:
            service.stop()
            for server in servers or ():
                server.stop()
        rates[durability] = rate
        fsync = "everysec" if durability == "none" else "always"
        where = "primary + replica" if durability == "replica" else "one server"
        prefix = f"queue.durability.{durability}"
        rows += [
            Row(
                f"{prefix}.accept_p50_ms", _ms(accepted, 50), "ms", f"POST→202, appendfsync {fsync}, {where}"
            ),
            Row(f"{prefix}.accept_p95_ms", _ms(accepted, 95), "ms", f"{latency_n} sequential batches"),
            Row(f"{prefix}.committed_p50_ms", _ms(committed, 50), "ms", "POST→finished job (long-poll)"),
            Row(f"{prefix}.sustained_per_s", rate, "batches/s", f"1 worker, {WIKIS} wikis x {per_wiki}"),
            Row(f"{prefix}.sustained_over_engine", rate / engine_rate, "x", "target ≥ 0.6 (local)"),
            Row(f"{prefix}.failed_jobs", failed, "jobs", "must be 0"),
        ]
    rows.append(
        Row(
            "queue.durability.local_over_none",
            rates["local"] / rates["none"],
            "x",
            "sustained rate kept by local",
        )
    )
    return rows


def _await_deliveries(port: int, expected: int, timeout: float = 120) -> int:
    """How many webhooks the receiver got, once it has ``expected`` (or after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        try:
            got = int(httpx.get(f"http://127.0.0.1:{port}/count", timeout=5).text)
        except httpx.TransportError:
            got = 0
        if got >= expected:
            break
        time.sleep(0.2)  # polling the receiver's count: nothing to wait on instead
    return got


def _wait_for_owners(service: Service, workers: int) -> None:
    """Return once ``workers`` distinct workers hold all 16 partition leases (or after 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        owners = service_lease_owners(service)
        if all(owners) and len(set(owners)) == workers:
            return
        time.sleep(0.1)  # polling lease keys in Redis: nothing to wait on instead


def service_lease_owners(service: Service) -> list[bytes | None]:
    """Which worker holds each of the 16 partition leases."""
    import redis

    client = redis.Redis.from_url(service.redis.url)
    try:
        return [client.get(f"wikiq:lease:{p}") for p in range(16)]  # type: ignore[misc]
    finally:
        client.close()
