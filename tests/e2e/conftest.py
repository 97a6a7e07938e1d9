"""Fixtures for end-to-end tests: a running deployment per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.service import Service


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
