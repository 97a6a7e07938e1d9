"""Fixtures for end-to-end tests: a running deployment per test, a headless browser per module."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.e2e.service import Service

HERE = Path(__file__).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless chromium started by the tests themselves (never a downloaded browser build), one per
    module.

    Without a chromium on PATH the browser tests are skipped, naming the command that installs one
    (``make test`` runs it itself where it can: as root on Debian).
    """
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH: `apt-get install -y chromium` (as root, Debian) enables this test")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


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
