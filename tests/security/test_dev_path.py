"""Finding 8 (low), `wikiq dev`: its children were started with ``python -m api.cli``, which puts the current
directory first on ``sys.path``, so an ``mcp.py`` in the directory ``wikiq dev`` was started from was
imported by the API as code. Now the children run with ``-P``: the current directory is not searched."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.devproc import running
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
    data = str(tmp_path / "d")
    command = [sys.executable, "-P", "-m", "api.cli", "dev", "--port", str(port), "--data-dir", data]
    with running(command, port, cwd=cwd) as dev:
        headers = {"accept": "application/json, text/event-stream"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        assert dev.client.post("/mcp", json=init, headers=headers).status_code == 200
        output = dev.interrupt()
        assert dev.process.returncode == 0, output
    assert not (cwd / "ran").exists(), "the mcp.py of the current directory was imported"
