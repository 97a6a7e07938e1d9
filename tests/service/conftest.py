"""Fixtures of the in-process layer: a deployment per module (``dep``), or per test (``fresh``).

Every test of this package runs in its module's event loop (set below), so the module's deployment, its
worker tasks and the test share one loop. A module may set ``SETTINGS = {...}`` to override settings of
its deployment (e.g. a tokens file); ``fresh`` builds one with the overrides a test passes.

A test marked ``both`` runs twice: over the in-process deployment and over real processes (an API, two
workers and a Redis of their own, reached over loopback HTTP, shared by the modules with the same settings;
that variant carries the ``e2e`` marker). Mark so what only a real server shows: uvicorn's handling of a
request, bodies over a socket, work split between worker processes, a long-poll woken from another process.
A ``both`` test uses only what either has: HTTP, ``redis``, ``settings``, ``worker.paused()``; not ``app``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.service.harness import Deployment, Services, deployment, hosted, process_deployment
from worker.redis_server import RedisServer

HERE = Path(__file__).parent
IN_PROCESS, PROCESSES = "in-process", "processes"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run every async test of this package in its module's event loop (where ``dep`` lives)."""
    for item in items:
        if item.path.is_relative_to(HERE) and pytest_asyncio.is_async_test(item):
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test marked ``both`` over either deployment (``dep``'s parameter)."""
    if "dep" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both"):
        variants = [
            pytest.param(IN_PROCESS, id=IN_PROCESS),
            pytest.param(PROCESSES, id=PROCESSES, marks=pytest.mark.e2e),
        ]
        metafunc.parametrize("dep", variants, indirect=True, scope="module")


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """The deployments of real processes of the session, started on first use (one per distinct settings)."""
    started = Services(tmp_path_factory.mktemp("services"))
    yield started
    started.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dep(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    services: Services,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Deployment]:
    """The API app, a worker and their Redis database and data directory, shared by a module's tests; or,
    as the ``processes`` parameter, those as real processes."""
    variant = getattr(request, "param", IN_PROCESS)
    name = request.module.__name__.rsplit(".", 1)[-1]
    root = tmp_path_factory.mktemp(f"{name}-{variant}")
    settings = getattr(request.module, "SETTINGS", {})
    if callable(settings):
        settings = settings(root)
    built = (
        process_deployment(services, **settings)
        if variant == PROCESSES
        else deployment(redis_server, root, **settings)
    )
    async with hosted(built) as deployed:
        yield deployed


@pytest.fixture
def fresh(
    redis_server: RedisServer, tmp_path: Path
) -> Callable[..., AbstractAsyncContextManager[Deployment]]:
    """``async with fresh(**settings) as dep:`` a deployment of the test's own."""

    def build(**overrides: Any) -> AbstractAsyncContextManager[Deployment]:
        return deployment(redis_server, tmp_path, **overrides)

    return build
