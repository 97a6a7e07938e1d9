"""One version: pyproject.toml's, read through importlib.metadata by the API and the MCP server."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from api.mcp.tools import build_server
from api.server.app import create_app
from worker.schema.edits import Limits
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_version_is_pyprojects() -> None:
    """A stale install (pyproject bumped, not reinstalled) fails here: run make .venv/.installed."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert importlib.metadata.version("wikiq") == declared


def test_openapi_and_mcp_state_the_installed_version() -> None:
    """The OpenAPI document and the MCP server's handshake name the package's version."""
    version = importlib.metadata.version("wikiq")
    app = create_app(Settings())
    assert app.openapi()["info"]["version"] == version
    server = build_server(lambda _ctx: None, Limits())  # type: ignore[arg-type,return-value]
    assert server.version == version
