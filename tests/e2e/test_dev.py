"""`wikiq dev` (what `make run` runs): everything starts, serves, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.devproc import running
from worker.redis_server import free_port


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_dev_serves_a_batch_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """dev starts Redis, API and worker; a batch commits; SIGINT stops all of them and exits 0."""
    port = free_port()
    data = tmp_path / "data"
    command = [sys.executable, "-m", "api.cli", "dev", "--port", str(port), "--data-dir", str(data)]
    with running(command, port) as dev:
        assert dev.client.post("/v1/wikis", json={"id": "dev"}).status_code == 201
        batch = {"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "a"}]}
        job_id = dev.client.post("/v1/wikis/dev/batches", json=batch).json()["job_id"]
        assert dev.client.get(f"/v1/jobs/{job_id}", params={"wait": 20}).json()["status"] == "succeeded"
        output = dev.interrupt()
        assert dev.process.returncode == 0, output
    assert "stopped" in output
    assert not _listening(port)
    leftover = subprocess.run(["pgrep", "-f", str(data)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "a child of wikiq dev is still running"
    assert (data / "redis" / "appendonlydir").exists()  # AOF persistence in the data dir
    assert (data / "wikis" / "dev.git").is_dir()


def test_bad_setting_stops_start_up_with_one_line(tmp_path: Path) -> None:
    """A malformed WIKIQ_ variable stops `wikiq dev` at once with one line naming it."""
    env = {"WIKIQ_PARTITIONS": "many", "WIKIQ_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "dev"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "WIKIQ_PARTITIONS" in done.stderr
