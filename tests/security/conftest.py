"""Fixtures of the security suite: deployments with a tokens file, seen from the attacker's side.

Principals (tokens are the dict's values):
- ``admin``: admin on every wiki;
- ``carol``: writer on ``sec`` limited to ``wiki/team-a/``;
- ``dave``: writer on ``sec`` without limits;
- ``reader``: read on ``sec``;
- ``twin-a`` and ``twin-b``: two writers on ``sec`` that share the display name "Twin".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.service import Service
from tests.gitutil import fsck
from tests.principals import tokens_toml

TOKENS = {
    "admin": "tok-admin-0123456789",
    "carol": "tok-carol-0123456789",
    "dave": "tok-dave-0123456789",
    "reader": "tok-reader-0123456789",
    "twin-a": "tok-twin-a-0123456789",
    "twin-b": "tok-twin-b-0123456789",
}
ENTRIES = {
    "admin": ("Admin", '{ "*" = "admin" }', ""),
    "carol": ("Carol", '{ "sec" = "write" }', 'prefixes = { "sec" = ["wiki/team-a/"] }'),
    "dave": ("Dave", '{ "sec" = "write" }', ""),
    "reader": ("Reader", '{ "sec" = "read" }', ""),
    "twin-a": ("Twin", '{ "sec" = "write" }', ""),
    "twin-b": ("Twin", '{ "sec" = "write" }', ""),
}


def as_(service: Service, who: str | None) -> httpx.Client:
    """A client of ``service`` acting as ``who`` (None: no token; an unknown name is used as the token)."""
    headers = {} if who is None else {"authorization": f"Bearer {TOKENS.get(who, who)}"}
    return httpx.Client(base_url=service.url, headers=headers, timeout=70)


def fsck_every_wiki(service: Service) -> None:
    """After a module's attacks: every wiki of ``service`` passes ``git fsck --strict`` (nothing a refused
    or accepted batch wrote is broken, missing or a name git flags)."""
    repos = sorted((service.data / "wikis").glob("*.git"))
    assert repos, "the deployment has no wiki"
    for repo in repos:
        fsck(repo)


def deployment(root: Path, workers: int, **env: str) -> Service:
    """A deployment with the suite's tokens file and a wiki ``sec``."""
    tokens = root / "tokens.toml"
    tokens.write_text(tokens_toml(TOKENS, ENTRIES))
    service = Service(root, WIKIQ_TOKENS_FILE=str(tokens), **env).start(workers=workers)
    service.client.headers["authorization"] = f"Bearer {TOKENS['admin']}"
    service.create_wiki("sec")
    return service


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with one worker: jobs run."""
    service = deployment(tmp_path_factory.mktemp("secured"), workers=1, WIKIQ_REDELIVER_INTERVAL_SECONDS="60")
    yield service
    service.stop()
    fsck_every_wiki(service)


@pytest.fixture(scope="module")
def stalled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with no worker: every accepted job stays queued."""
    service = deployment(
        tmp_path_factory.mktemp("stalled"),
        workers=0,
        WIKIQ_MAX_QUEUED_BYTES="200000",
        WIKIQ_MCP_MAX_CONCURRENT="1",
    )
    yield service
    service.stop()
    fsck_every_wiki(service)
