"""Fixtures for end-to-end tests: a running deployment per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.service import Service

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def svc(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Redis, the API and workers shared by a module's tests (``WORKERS`` in the module, default 1)."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    service = Service(tmp_path_factory.mktemp(name)).start(workers=getattr(request.module, "WORKERS", 1))
    yield service
    service.stop()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """Redis, the API and one worker, as real processes."""
    svc = Service(tmp_path).start(workers=1)
    yield svc
    svc.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this package ``e2e`` (``-m "not e2e"`` leaves out the process-level tests)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)
