"""``wikiq doctor`` against real deployments: all green, then each broken part named with its fix."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.e2e.service import Service
from worker.redis_server import free_port


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )


def test_healthy_deployment_passes(service: Service) -> None:
    """With Redis (AOF on), a writable data dir and a worker holding every partition: exit 0."""
    deadline = time.monotonic() + 20
    while True:
        done = _doctor(service.env)
        if done.returncode == 0:
            break
        assert time.monotonic() < deadline, done.stdout + done.stderr
        time.sleep(0.1)  # the worker is still taking its partition leases
    lines = done.stdout.splitlines()
    for check in ("data dir", "git", "redis", "aof", "workers", "partitions"):
        assert any(line.startswith("OK") and f" {check} " in line + " " for line in lines), done.stdout
    assert lines[-1] == "wikiq doctor: all checks passed"


def test_broken_deployment_is_named_with_fixes(tmp_path: Path) -> None:
    """AOF off, no worker, a data dir under a file and no Redis at all: each fails with a fix; exit 1."""
    service = Service(tmp_path / "svc").start(workers=0)
    try:
        client = redis.Redis.from_url(service.redis.url)
        client.config_set("appendonly", "no")
        client.close()
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory\n")
        done = _doctor({**service.env, "WIKIQ_DATA_DIR": str(blocker / "data")})
    finally:
        service.stop()
    assert done.returncode == 1, done.stdout
    text = done.stdout
    assert "FAIL  data dir" in text and "WIKIQ_DATA_DIR" in text
    assert "FAIL  aof" in text and "appendonly is no" in text and "--appendonly yes" in text
    assert "FAIL  workers" in text and "start workers: wikiq worker" in text
    assert any(
        line.startswith("FAIL  partitions")
        and line.endswith("4 of 4 partitions have no live owner (0-3); 0 jobs wait on them")
        for line in text.splitlines()
    ), text
    assert "OK    redis" in text and "OK    git" in text

    gone = _doctor({**service.env, "WIKIQ_REDIS_URL": f"redis://:pw-secret@127.0.0.1:{free_port()}/0"})
    assert gone.returncode == 1
    assert "FAIL  redis" in gone.stdout and "does not answer" in gone.stdout
    assert "pw-secret" not in gone.stdout + gone.stderr
