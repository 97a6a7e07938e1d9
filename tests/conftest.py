"""Shared fixtures: a real Redis-compatible server on a free port, and a fresh data directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis-compatible server for the whole session (tests use distinct key prefixes or flush), with
    the AOF fsynced on every write, as the default acceptance durability (``local``) needs."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=True, appendfsync="always").start()
    yield server
    server.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An empty wikiq data directory."""
    path = tmp_path / "data"
    path.mkdir()
    return path
