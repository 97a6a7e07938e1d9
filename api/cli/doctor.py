"""``wikiq doctor``: check a deployment from the outside and say what to fix.

Each check yields one ``Finding``: ``ok``, ``warn`` (works, but look at it) or ``fail`` (wikiq will not
work, or will lose data). Checks: Redis reachable (by URL or through Sentinel), AOF persistence on and
fsynced as ``WIKIQ_ACCEPT_DURABILITY`` needs (and a replica connected when it asks for one), data directory
writable and with at least ``WIKIQ_MIN_FREE_BYTES`` free, git new enough, every partition leased by a live
worker, and no worker running with another partition count.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from worker import keys
from worker.git.remote import RemoteError, RemoteRegistry, remote_head
from worker.jobs.connection import client
from worker.jobs.registry import WikiRegistry
from worker.jobs.storage import free_bytes, human
from worker.settings import Settings, redacted_url

Level = Literal["ok", "warn", "fail"]
MIN_GIT = (2, 28)  # git init --initial-branch


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: its level, what was found and, unless ok, what to do."""

    check: str
    level: Level
    detail: str
    fix: str = ""


redacted = redacted_url  # ``url`` without its password, fit to print


def check_data_dir(settings: Settings) -> Finding:
    """The data directory exists (or can be made) and a file can be written in it."""
    path = settings.data_dir.resolve()
    if not path.exists() and not path.is_symlink():
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is not None and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
            return Finding(
                "data dir",
                "warn",
                f"{path} does not exist yet; wikiq will create it",
                "if that is not where the data lives, set WIKIQ_DATA_DIR",
            )
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Finding(
            "data dir",
            "fail",
            f"{path} is not writable: {os.strerror(exc.errno or 0) if exc.errno else exc}",
            "create it and give the wikiq user write access (chown/chmod), or set WIKIQ_DATA_DIR",
        )
    wikis = path / "wikis"
    count = len(list(wikis.glob("*.git"))) if wikis.is_dir() else 0
    free = free_bytes(path)
    if free is not None and free < settings.min_free_bytes:
        return Finding(
            "data dir",
            "warn",
            f"{path} has only {human(free)} free (under WIKIQ_MIN_FREE_BYTES={human(settings.min_free_bytes)}"
            f"); /readyz answers 503 and batches fail with STORAGE_UNAVAILABLE once it is full",
            "free space on that filesystem (other files; `git gc --prune=now` in the wikis) or grow it",
        )
    room = "" if free is None else f", {human(free)} free"
    return Finding("data dir", "ok", f"{path} is writable ({count} wikis{room})")


def check_git() -> Finding:
    """``git`` is on PATH and at least ``MIN_GIT``."""
    exe = shutil.which("git")
    want = ".".join(map(str, MIN_GIT))
    if exe is None:
        return Finding("git", "fail", "git is not on PATH", f"install git >= {want} (apt-get install git)")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return Finding("git", "fail", f"{exe} --version failed: {exc}", f"install a working git >= {want}")
    match = re.search(r"(\d+)\.(\d+)", out.stdout)
    version = out.stdout.strip()
    if match is None:
        return Finding("git", "warn", f"cannot read the version from {version!r}", f"use git >= {want}")
    if (int(match.group(1)), int(match.group(2))) < MIN_GIT:
        return Finding("git", "fail", f"{version} is too old", f"upgrade git to {want} or newer")
    return Finding("git", "ok", version)


async def check_redis(settings: Settings, redis: Redis) -> list[Finding]:
    """Redis answers, keeps an append-only file, and every partition is leased by a live worker."""
    where = settings.redis_where
    try:
        info = await redis.info("server")
    except (RedisError, OSError) as exc:
        return [
            Finding(
                "redis",
                "fail",
                f"{where} does not answer: {type(exc).__name__}: {exc}",
                "start Redis (or fix WIKIQ_REDIS_URL, or WIKIQ_REDIS_SENTINELS and "
                "WIKIQ_REDIS_SENTINEL_MASTER); compose.yaml runs one with AOF",
            )
        ]
    version = info.get("valkey_version") or info.get("redis_version") or "?"
    findings = [Finding("redis", "ok", f"{where} answers (version {version})")]
    findings.append(await _check_aof(redis))
    findings.append(await _check_fsync(settings, redis))
    if settings.accept_durability == "replica":
        findings.append(await _check_replicas(redis))
    findings.extend(await _check_partitions(settings, redis))
    return findings


async def _check_aof(redis: Redis) -> Finding:
    try:
        config: dict[str, Any] = await redis.config_get("appendonly")
    except ResponseError as exc:
        return Finding(
            "aof",
            "warn",
            f"cannot read the appendonly setting ({exc})",
            "make sure the server runs with appendonly yes: accepted jobs must survive a restart",
        )
    value = str(config.get("appendonly", "")).lower()
    if value != "yes":
        return Finding(
            "aof",
            "fail",
            f"appendonly is {value or 'unset'}: a Redis restart loses queued jobs and their records",
            "run the server with --appendonly yes (or CONFIG SET appendonly yes, then CONFIG REWRITE)",
        )
    return Finding("aof", "ok", "appendonly is yes")


async def _check_fsync(settings: Settings, redis: Redis) -> Finding:
    """``appendfsync`` fits ``WIKIQ_ACCEPT_DURABILITY``: ``always`` for local/replica, anything for none."""
    durability = settings.accept_durability
    try:
        config: dict[str, Any] = await redis.config_get("appendfsync")
    except ResponseError as exc:
        return Finding("fsync", "warn", f"cannot read the appendfsync setting ({exc})", "")
    value = str(config.get("appendfsync", "")).lower()
    said = f"appendfsync is {value or 'unset'} with WIKIQ_ACCEPT_DURABILITY={durability}"
    if durability == "none":
        return Finding(
            "fsync", "ok", f"{said}: a 202 is in Redis' memory (a power cut may lose up to a second)"
        )
    if value == "no":
        return Finding(
            "fsync",
            "fail",
            f"{said}: Redis leaves fsync to the OS, so submissions wait WIKIQ_ACCEPT_TIMEOUT_SECONDS and "
            "answer 503",
            "run Redis with --appendfsync always (CONFIG SET appendfsync always, then CONFIG REWRITE)",
        )
    if value != "always":
        return Finding(
            "fsync",
            "warn",
            f"{said}: every submission waits for the next once-a-second fsync (up to 1 s)",
            "run Redis with --appendfsync always (one fsync per event-loop turn, shared by every client)",
        )
    return Finding("fsync", "ok", f"{said}: a 202 is fsynced in the AOF first")


async def _check_replicas(redis: Redis) -> Finding:
    """With ``replica`` durability, at least one replica is connected to the primary."""
    try:
        info = await redis.info("replication")
    except ResponseError as exc:
        return Finding("replicas", "warn", f"cannot read INFO replication ({exc})", "")
    count = int(info.get("connected_slaves", 0))
    if count < 1:
        return Finding(
            "replicas",
            "fail",
            "WIKIQ_ACCEPT_DURABILITY=replica but the primary has no connected replica: every submission "
            "answers 503",
            "start a replica (replicaof <primary>), or set WIKIQ_ACCEPT_DURABILITY=local",
        )
    return Finding("replicas", "ok", f"{count} connected to the primary")


async def _check_partitions(settings: Settings, redis: Redis) -> list[Finding]:
    now_ms = int(time.time() * 1000)
    lease_ms = int(settings.lease_seconds * 1000)
    count = settings.partitions
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrangebyscore(keys.WORKERS, now_ms - lease_ms, "+inf")
        for partition in range(count):
            pipe.get(keys.lease(partition))
            pipe.zcard(keys.queue(partition))
        replies = await pipe.execute()
    live = {_text(w) for w in replies[0]}
    owners = [_text(o) if o is not None else None for o in replies[1::2]]
    depths = [int(d) for d in replies[2::2]]
    findings: list[Finding] = []
    if not live:
        waiting = sum(depths)
        findings.append(
            Finding(
                "workers",
                "fail",
                f"no live worker (none sent a heartbeat in the last {settings.lease_seconds:g} s); "
                f"{waiting} jobs waiting",
                "start workers: wikiq worker (same WIKIQ_REDIS_URL, WIKIQ_DATA_DIR and WIKIQ_PARTITIONS)",
            )
        )
    else:
        findings.append(Finding("workers", "ok", f"{len(live)} live: {', '.join(sorted(live))}"))
    orphaned = [p for p, owner in enumerate(owners) if owner is None or owner not in live]
    if orphaned:
        stuck = sum(depths[p] for p in orphaned)
        findings.append(
            Finding(
                "partitions",
                "fail",
                f"{len(orphaned)} of {count} partitions have no live owner ({_ranges(orphaned)}); "
                f"{stuck} jobs wait on them",
                "start a worker, or wait a lease period for the live ones to take them over",
            )
        )
    else:
        findings.append(Finding("partitions", "ok", f"all {count} partitions leased by live workers"))
    extra = [
        key
        async for key in redis.scan_iter(match=keys.lease(0)[:-1] + "*", count=1000)
        if int(_text(key).rsplit(":", 1)[1]) >= count
    ]
    if extra:
        findings.append(
            Finding(
                "partition count",
                "fail",
                f"a worker leases partitions beyond WIKIQ_PARTITIONS={count} ({len(extra)} leases)",
                "give every API and worker process the same WIKIQ_PARTITIONS",
            )
        )
    return findings


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(out)


async def check_remotes(settings: Settings, redis: Redis) -> list[Finding]:
    """The remotes file parses; every remote-backed wiki's remote is declared and answers; problems in
    the trees of attached remotes (paths wikiq would refuse) are shown."""
    try:
        remotes = RemoteRegistry(settings.remotes_file)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [Finding("remotes", "fail", first, "fix the file WIKIQ_REMOTES_FILE names")]
    try:
        entries = await WikiRegistry(redis).all()
    except (RedisError, OSError):
        return []  # the Redis check says what is wrong
    findings = []
    if settings.remotes_file is not None:
        findings.append(
            Finding("remotes", "ok", f"{len(remotes.remotes())} declared in {settings.remotes_file}")
        )
    with tempfile.TemporaryDirectory(prefix="wikiq-doctor-") as scratch:
        probe = Path(scratch) / "probe.git"
        subprocess.run(["git", "init", "-q", "--bare", str(probe)], check=False, capture_output=True)
        for wiki, entry in sorted(entries.items()):
            check = f"wiki {wiki}"
            try:
                remote = remotes.lookup(entry.remote)
                head = await asyncio.to_thread(remote_head, probe, remote)
            except RemoteError as exc:
                findings.append(
                    Finding(check, "fail", exc.message, "declare the remote again or fix its access")
                )
                continue
            detail = f"remote {entry.remote} answers; branch at {(head or 'nothing')[:12]}"
            findings.append(Finding(check, "ok", detail))
            if entry.problems:
                shown = "; ".join(entry.problems[:3]) + ("; ..." if len(entry.problems) > 3 else "")
                findings.append(
                    Finding(
                        check,
                        "warn",
                        f"{len(entry.problems)} problems in its tree: {shown}",
                        "rename or remove those paths in the remote (wikiq refuses to write them)",
                    )
                )
    return findings


async def diagnose(settings: Settings) -> list[Finding]:
    """Every check of a deployment configured by ``settings``."""
    findings = [check_data_dir(settings), check_git()]
    redis = client(settings, decode=True, timeout=5)
    try:
        findings.extend(await check_redis(settings, redis))
        findings.extend(await check_remotes(settings, redis))
    finally:
        await redis.aclose()
    return findings


def report(findings: list[Finding]) -> tuple[str, int]:
    """The text to print and the exit code: 1 when any check failed, else 0."""
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{f.level.upper():<4}  {f.check:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {f.fix}")
    failed = sum(f.level == "fail" for f in findings)
    warned = sum(f.level == "warn" for f in findings)
    lines.append(
        "wikiq doctor: all checks passed"
        if not failed and not warned
        else f"wikiq doctor: {failed} failed, {warned} warnings"
    )
    return "\n".join(lines), 1 if failed else 0


def run(settings: Settings) -> tuple[str, int]:
    """Run ``diagnose`` and ``report`` (the ``wikiq doctor`` command)."""
    return report(asyncio.run(diagnose(settings)))
