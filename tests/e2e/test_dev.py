"""`wikiq dev` (what `make run` runs): everything starts, serves, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from worker.redis_server import free_port


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_dev_serves_a_batch_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """dev starts Redis, API and worker; a batch commits; SIGINT stops all of them and exits 0."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIKIQ_")}
    dev = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "dev", "--port", str(port), "--data-dir", str(tmp_path / "data")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and dev.poll() is None, "wikiq dev did not start"
                time.sleep(0.1)  # waiting for the child processes to listen
            assert client.post("/v1/wikis", json={"id": "dev"}).status_code == 201
            batch = {"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "a"}]}
            job_id = client.post("/v1/wikis/dev/batches", json=batch).json()["job_id"]
            assert client.get(f"/v1/jobs/{job_id}", params={"wait": 20}).json()["status"] == "succeeded"
        dev.send_signal(signal.SIGINT)
        output, _ = dev.communicate(timeout=60)
        assert dev.returncode == 0, output
        assert "stopped" in output
        assert not _listening(port)
        leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "data")], capture_output=True, text=True)
        assert leftover.stdout.strip() == "", "a child of wikiq dev is still running"
        assert (tmp_path / "data" / "redis" / "appendonlydir").exists()  # AOF persistence in the data dir
        assert (tmp_path / "data" / "wikis" / "dev.git").is_dir()
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()


def test_bad_setting_stops_start_up_with_one_line(tmp_path: Path) -> None:
    """A malformed WIKIQ_ variable stops `wikiq dev` at once with one line naming it."""
    env = {"WIKIQ_PARTITIONS": "many", "WIKIQ_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "dev"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "WIKIQ_PARTITIONS" in done.stderr
