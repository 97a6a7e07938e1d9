"""``wikiq doctor`` on durability and space: appendfsync against WIKIQ_ACCEPT_DURABILITY, a replica when
``replica`` is asked for, and free space under WIKIQ_MIN_FREE_BYTES."""

from __future__ import annotations

import subprocess
import sys
import time

import redis

from tests.e2e.service import Service


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )


def test_doctor_names_fsync_replica_and_space_problems(service: Service) -> None:
    """OK with appendfsync always; WARN with everysec; FAIL without a replica for ``replica``; WARN
    (exit 0) when the data directory has less free space than WIKIQ_MIN_FREE_BYTES."""
    deadline = time.monotonic() + 20
    while (done := _doctor(service.env)).returncode != 0:
        assert time.monotonic() < deadline, done.stdout + done.stderr
        time.sleep(0.1)  # the worker is still taking its partition leases
    assert "OK    fsync" in done.stdout and "appendfsync is always" in done.stdout, done.stdout

    client = redis.Redis.from_url(service.redis.url)
    client.config_set("appendfsync", "everysec")
    client.close()
    slow = _doctor(service.env)
    assert slow.returncode == 0, slow.stdout
    assert "WARN  fsync" in slow.stdout and "up to 1 s" in slow.stdout, slow.stdout
    assert "--appendfsync always" in slow.stdout

    lonely = _doctor({**service.env, "WIKIQ_ACCEPT_DURABILITY": "replica"})
    assert lonely.returncode == 1
    assert "FAIL  replicas" in lonely.stdout and "no connected replica" in lonely.stdout, lonely.stdout

    cramped = _doctor({**service.env, "WIKIQ_MIN_FREE_BYTES": str(10**18)})
    assert "WARN  data dir" in cramped.stdout and "STORAGE_UNAVAILABLE" in cramped.stdout, cramped.stdout
