"""The README's commands, run as they are written: ``make run`` starts the deployment, then the curl block,
the CLI block and both MCP host configurations are used against it.

Each tested block follows a ``<!-- readme-test: NAME -->`` line. Only what ties a block to this machine is
replaced: the API's address (the deployment listens on a free port, not 8080), the ``.venv/bin/`` the
README assumes (the test runs the same interpreter's scripts), and the placeholder checkout path.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.devproc import clean_env, running
from worker.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
README_URL = "http://127.0.0.1:8080"
MARKED = re.compile(r"<!-- readme-test: ([a-z-]+) -->\n```[a-z]*\n(.*?)```", re.S)
FENCED = re.compile(r"```[a-z]*\n(.*?)```", re.S)
# what makes a block one that starts the service or submits a batch
STARTS_OR_SUBMITS = re.compile(r"make run|wikiq dev|/batches|wikiq submit|mcpServers")


def marked_blocks() -> dict[str, str]:
    """The README's tested blocks by name."""
    found: dict[str, str] = {}
    for name, body in MARKED.findall(README.read_text(encoding="utf-8")):
        assert name not in found, f"two README blocks are marked {name}"
        found[name] = body
    return found


def test_every_block_that_starts_the_service_or_submits_a_batch_is_tested() -> None:
    """A new command block of that kind must carry a mark (and so be run below), or this fails."""
    marked = set(marked_blocks().values())
    untested = [
        body
        for body in FENCED.findall(README.read_text(encoding="utf-8"))
        if STARTS_OR_SUBMITS.search(body) and body not in marked
    ]
    assert untested == []
    assert set(marked_blocks()) == {"start", "curl", "cli", "mcp-stdio", "mcp-http"}


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Deployment:
    url: str
    client: httpx.Client

    def localise(self, text: str) -> str:
        """A README block with this deployment's address and this interpreter's scripts."""
        scripts = re.sub(r"(/path/to/wikiq/)?\.venv/bin/", lambda _: f"{BIN}/", text)
        return scripts.replace(README_URL, self.url)

    def run(self, block: str) -> subprocess.CompletedProcess[str]:
        """Run a shell block as bash would from the repository root, failing on its first error."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("WIKIQ_")}
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.localise(block)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The README's start block, run by make with a free port; stopped as Ctrl-C stops it."""
    assert marked_blocks()["start"].split() == ["make", "run"]
    data = tmp_path_factory.mktemp("readme") / "data"
    port = free_port()
    # a make of its own: not a child of the make that may run the tests (its flags and jobserver)
    env = clean_env("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    # -o: the install stamp is not rebuilt (this interpreter's environment is the one under test)
    command = ["make", "-s", "-o", ".venv/.installed", "run", f"BIN={BIN}"]
    command.append(f"ARGS=--port {port} --data-dir {data}")
    with running(command, port, cwd=ROOT, env=env, group=True, ready_seconds=90) as make:
        yield Deployment(f"http://127.0.0.1:{port}", make.client)
        output = make.interrupt(timeout=90)
    deadline = time.monotonic() + 60
    while _listening(port) or _children_of(data):
        assert time.monotonic() < deadline, f"make run left processes behind:\n{output}"
        time.sleep(0.1)  # the stopping processes release the port
    assert "wikiq dev: stopped" in output, output


def _children_of(data: Path) -> str:
    found = subprocess.run(["pgrep", "-f", str(data)], capture_output=True, text=True)
    return found.stdout.strip()


def test_the_curl_block_commits_a_batch(deployment: Deployment) -> None:
    """The curl block creates a wiki, submits a two-edit batch and its last answer is the succeeded job."""
    done = deployment.run(marked_blocks()["curl"])
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout.strip().splitlines()[-1])
    assert job["status"] == "succeeded", job
    assert re.fullmatch(r"[0-9a-f]{40}", job["result"]["commit"])
    assert [(a["op"], a["path"]) for a in job["result"]["applied"]] == [
        ("create", "wiki/redis.md"),
        ("replace", "index.md"),
    ]
    index = deployment.client.get("/v1/wikis/demo/pages/index.md").json()
    assert "- [[redis]]" in index["content"]


def test_the_cli_block_commits_a_batch(deployment: Deployment) -> None:
    """The CLI block creates a wiki, submits from stdin, reads the page back and shows the log."""
    done = deployment.run(marked_blocks()["cli"])
    assert done.returncode == 0, done.stderr
    assert "# Hello" in done.stdout
    commits = deployment.client.get("/v1/wikis/notes/commits").json()["commits"]
    assert commits[0]["message"].startswith("Hello\n")
    assert commits[0]["job_id"] in done.stdout


def _mcp_config(name: str, deployment: Deployment) -> dict[str, Any]:
    config = json.loads(deployment.localise(marked_blocks()[name]))
    return dict(config["mcpServers"]["wikiq"])


async def _write_through(client: Client, wiki: str) -> None:
    """One batch through the tools, as an agent writes one."""
    listed = await client.call_tool("list_wikis", {})
    assert wiki in [w["id"] for w in listed.structured_content["wikis"]]  # type: ignore[index]
    edit = {"op": "create", "path": "wiki/agent.md", "content": "# Written by an agent\n"}
    written = await client.call_tool("write_batch", {"wiki": wiki, "message": "Agent", "edits": [edit]})
    assert not written.is_error, written.content
    assert written.structured_content is not None and written.structured_content["status"] == "succeeded"


async def test_the_stdio_host_configuration(deployment: Deployment) -> None:
    """The stdio snippet's command, arguments and environment start a working MCP server (single-user:
    WIKIQ_TOKEN left out, as the README says)."""
    config = _mcp_config("mcp-stdio", deployment)
    env = {k: v for k, v in config["env"].items() if k != "WIKIQ_TOKEN"}
    assert deployment.client.post("/v1/wikis", json={"id": "stdio"}).status_code == 201
    server = StdioServerParameters(command=config["command"], args=config["args"], env=env)
    async with Client(server) as client:
        await _write_through(client, "stdio")
    assert deployment.client.get("/v1/wikis/stdio/pages/wiki/agent.md").status_code == 200


async def test_the_streamable_http_host_configuration(deployment: Deployment) -> None:
    """The HTTP snippet's URL and headers reach the API's own MCP endpoint."""
    config = _mcp_config("mcp-http", deployment)
    assert config["type"] == "http"
    assert deployment.client.post("/v1/wikis", json={"id": "http"}).status_code == 201
    async with (
        httpx2.AsyncClient(headers=config["headers"], timeout=90) as http,
        Client(streamable_http_client(config["url"], http_client=http)) as client,
    ):
        await _write_through(client, "http")
    assert deployment.client.get("/v1/wikis/http/pages/wiki/agent.md").status_code == 200
