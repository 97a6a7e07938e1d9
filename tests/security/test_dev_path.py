"""Finding 8 (low), `wikiq dev`: its children were started with ``python -m api.cli``, which puts the current
directory first on ``sys.path``, so an ``mcp.py`` in the directory ``wikiq dev`` was started from was
imported by the API as code. Now the children run with ``-P``: the current directory is not searched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from worker.redis_server import free_port

HOSTILE = """
from pathlib import Path
Path(__file__).with_name("ran").write_text("imported from the current directory")
raise SystemExit("a hostile mcp.py ran")
"""


def test_a_module_in_the_current_directory_is_not_imported_by_the_children(tmp_path: Path) -> None:
    """From a directory holding a hostile ``mcp.py``, `wikiq dev` serves (the API imports the real MCP
    SDK) and the file never runs."""
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    (cwd / "mcp.py").write_text(HOSTILE)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIKIQ_")}
    command = [
        sys.executable,
        "-P",
        "-m",
        "api.cli",
        "dev",
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path / "d"),
    ]
    dev = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
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
            headers = {"accept": "application/json, text/event-stream"}
            init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            assert client.post("/mcp", json=init, headers=headers).status_code == 200
        dev.send_signal(signal.SIGINT)
        output, _ = dev.communicate(timeout=60)
        assert dev.returncode == 0, output
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
    assert not (cwd / "ran").exists(), "the mcp.py of the current directory was imported"
