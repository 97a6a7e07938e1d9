"""Remote benchmark: publishing to a git remote whose pre-receive hook sleeps 50 ms (a stand-in for a forge's
push latency), through the real service (Redis, API, one worker; the remote a ``file://`` repository on this
machine: over ``git daemon`` every git connection costs ~45 ms more here, TCP on loopback).

- batches/s when 8 agents submit to one wiki at once, with coalescing (one push carries every batch queued
  behind the first) and with one push per batch (``WIKIQ_REMOTE_COALESCE_MAX=1``), in the same run;
- submit→published latency at light load (one batch at a time): from just before the POST to the
  long-poll answer of the job, which succeeds only once its commit is on the remote branch;
- beside it, the floor git itself sets: wikiq's ``push_cas`` alone (one ``git push`` of one small commit to
  the same kind of remote, no service around it), and what the service adds to it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.report import Context, Row
from tests.e2e.remotes import batch, create, deployment
from tests.e2e.service import Service
from tests.integration.remote import repos
from worker.git.remote import Accepted, Remote, clone_or_init_cache, push_cas

HOOK_SECONDS = 0.05
AGENTS = 8


def _served(root: Path) -> Remote:
    """An empty repository whose pre-receive hook sleeps ``HOOK_SECONDS``, declared as a remote."""
    served = root / "served"
    served.mkdir(parents=True)
    repo = repos.make_bare(served / "wiki.git")
    hook = repo / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nsleep {HOOK_SECONDS}\n")
    hook.chmod(0o755)
    return Remote(name="forge", url=f"file://{repo}")


async def _agents(service: Service, total: int) -> float:
    """``AGENTS`` agents submit ``total`` batches to one wiki at once, each then waiting for its last one
    (a wiki's batches land in order, so every earlier one is finished by then): batches/s until the last
    agent's last batch finished. Every batch is checked afterwards, off the clock."""
    per_agent = total // AGENTS
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=service.url, timeout=120, limits=limits) as client:

        async def finished(job_id: str) -> dict[str, Any]:
            while True:
                job: dict[str, Any] = (await client.get(f"/v1/jobs/{job_id}", params={"wait": 60})).json()
                if job["status"] not in ("queued", "running"):
                    return job

        async def agent(number: int) -> list[str]:
            ids = []
            for i in range(per_agent):
                body = batch(
                    f"agent {number} batch {i}", create(f"wiki/a{number}/b{i}-{time.monotonic_ns()}.md")
                )
                ids.append((await client.post("/v1/wikis/docs/batches", json=body)).json()["job_id"])
            await finished(ids[-1])
            return ids

        start = time.perf_counter()
        submitted = await asyncio.gather(*(agent(n) for n in range(AGENTS)))
        elapsed = time.perf_counter() - start
        for ids in submitted:
            for job_id in ids:
                job = await finished(job_id)
                if job["status"] != "succeeded":
                    raise AssertionError(f"bench batch failed: {job}")
        return (per_agent * AGENTS) / elapsed


def _latency(service: Service, count: int) -> list[float]:
    """Sequential batches: seconds from the POST to the answer of the published job."""
    samples = []
    with httpx.Client(base_url=service.url, timeout=70) as client:
        for i in range(count):
            body = batch(f"light {i}", create(f"wiki/light/{i}-{time.monotonic_ns()}.md"))
            start = time.perf_counter()
            job_id = client.post("/v1/wikis/docs/batches", json=body).json()["job_id"]
            job = client.get(f"/v1/jobs/{job_id}", params={"wait": 60}).json()
            samples.append(time.perf_counter() - start)
            if job["status"] != "succeeded":
                raise AssertionError(f"bench batch failed: {job}")
    return samples


def _push_floor(root: Path, count: int) -> list[float]:
    """Seconds of each of ``count`` ``push_cas`` calls, one new commit each, to a remote like the one the
    service publishes to: what git takes for a publish, before wikiq adds anything."""
    remote = _served(root)
    cache = root / "cache.git"
    head = clone_or_init_cache(cache, remote)
    samples = []
    for i in range(count):
        commit = repos.commit(cache, head, f"floor {i}", {f"page-{i}.md": f"page {i}\n"})
        start = time.perf_counter()
        result = push_cas(cache, remote, commit, head, built_on_expected=True)
        samples.append(time.perf_counter() - start)
        if not isinstance(result, Accepted):
            raise AssertionError(f"floor push {i}: {result}")
        head = commit
    return samples


def _run(ctx: Context, name: str, coalesce: int, total: int, light: int) -> tuple[float, list[float]]:
    remote = _served(ctx.workdir / name)
    service = deployment(
        ctx.workdir / name / "svc",
        remote,
        WIKIQ_REMOTE_COALESCE_MAX=str(coalesce),
        WIKIQ_RATE_LIMIT_SUBMISSIONS="0",
        WIKIQ_LOG_LEVEL="warning",
    )
    try:
        made = service.client.post("/v1/wikis", json={"id": "docs", "remote": "forge"})
        if made.status_code != 201:
            raise AssertionError(made.text)
        _latency(service, 2)  # warm up: the worker clones its cache on the first batch
        rate = asyncio.run(_agents(service, total))
        samples = _latency(service, light) if light else []
        return rate, samples
    finally:
        service.stop()


def section(ctx: Context) -> list[Row]:
    """The remote section's figures."""
    total = 64 if ctx.quick else 320
    one_total = 32 if ctx.quick else 96
    coalesced, samples = _run(ctx, "coalesced", 64, total, 10 if ctx.quick else 40)
    one_push, _ = _run(ctx, "one_push", 1, one_total, 0)
    floor = statistics.median(_push_floor(ctx.workdir / "floor", 10 if ctx.quick else 40)) * 1000
    p50 = statistics.median(samples) * 1000
    target = HOOK_SECONDS * 1000 + 25
    return [
        Row("remote.hook_ms", HOOK_SECONDS * 1000, "ms", "the remote's pre-receive hook sleeps this long"),
        Row(
            "remote.coalesced_per_s",
            coalesced,
            "batches/s",
            f"{AGENTS} agents, {total} batches, one wiki; target ≥ 150",
        ),
        Row("remote.one_push_per_s", one_push, "batches/s", "WIKIQ_REMOTE_COALESCE_MAX=1, same remote"),
        Row("remote.coalesced_over_one_push", coalesced / one_push, "x", "target ≥ 12"),
        Row("remote.publish_p50_ms", p50, "ms", f"one batch at a time; target ≤ hook + 25 = {target:.0f}"),
        Row("remote.publish_p95_ms", sorted(samples)[int(0.95 * (len(samples) - 1))] * 1000, "ms", ""),
        Row("remote.git_push_p50_ms", floor, "ms", "push_cas alone (one git push), same kind of remote"),
        Row("remote.publish_over_git_push_ms", p50 - floor, "ms", "what the service adds to that push"),
    ]
