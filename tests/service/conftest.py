"""Fixtures of the in-process layer: a deployment per module (``dep``), or per test (``fresh``).

Every test of this package runs in its module's event loop (set below), so the module's deployment, its
worker tasks and the test share one loop. A module may set ``SETTINGS = {...}`` to override settings of
its deployment (e.g. a tokens file); ``fresh`` builds one with the overrides a test passes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.service.harness import Deployment, deployment, hosted
from worker.redis_server import RedisServer

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run every async test of this package in its module's event loop (where ``dep`` lives)."""
    for item in items:
        if item.path.is_relative_to(HERE) and pytest_asyncio.is_async_test(item):
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dep(
    request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Deployment]:
    """The API app, a worker and their Redis database and data directory, shared by a module's tests."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    root = tmp_path_factory.mktemp(name)
    settings = getattr(request.module, "SETTINGS", {})
    if callable(settings):
        settings = settings(root)
    async with hosted(deployment(redis_server, root, **settings)) as deployed:
        yield deployed


@pytest.fixture
def fresh(
    redis_server: RedisServer, tmp_path: Path
) -> Callable[..., AbstractAsyncContextManager[Deployment]]:
    """``async with fresh(**settings) as dep:`` a deployment of the test's own."""

    def build(**overrides: Any) -> AbstractAsyncContextManager[Deployment]:
        return deployment(redis_server, tmp_path, **overrides)

    return build
