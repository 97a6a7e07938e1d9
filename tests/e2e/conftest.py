"""Fixtures for end-to-end tests: a running deployment per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.service import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """Redis, the API and one worker, as real processes."""
    svc = Service(tmp_path).start(workers=1)
    yield svc
    svc.stop()
