"""Fixtures for the remote tests: one ``Site`` per transport (git://, http with Basic auth, file://, ssh).

A ``Site`` serves the bare repositories under a folder with one real server (none for file://) and
declares a ``Remote`` for any of them, with the credentials that transport needs. Servers stop at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.remote.repos import make_bare
from tests.integration.remote.servers import (
    SSHD_INSTALL,
    GitDaemon,
    HttpGitServer,
    SshServer,
    sshd_binary,
)
from worker.git.remote import Remote

HTTP_USER = "wiki-bot"
HTTP_PASSWORD = "correct-horse-battery-staple"
HTTP_PASSWORD_ENV = "WIKIQ_TEST_HTTP_PASSWORD"
TRANSPORTS = ("git", "http", "file", "ssh")


@dataclass
class Site:
    """Bare repositories under ``root`` served over one transport; ``stop`` takes the server down."""

    transport: str
    root: Path
    declare: Callable[[str, Path], Remote]
    stop: Callable[[], None] = field(default=lambda: None)
    server: GitDaemon | HttpGitServer | SshServer | None = None

    def new_repo(self, name: str = "wiki.git") -> tuple[Path, Remote]:
        """A new empty bare repository served here, and a remote declared for it."""
        repo = make_bare(self.root / name)
        return repo, self.declare(name, repo)


def start_site(transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """Start the server for ``transport`` over ``tmp_path/served`` (the ssh one skips when sshd is absent)."""
    root = tmp_path / "served"
    root.mkdir()
    if transport == "git":
        daemon = GitDaemon(root).start()
        return Site(
            transport, root, lambda name, _: Remote(name="docs", url=daemon.url(name)), daemon.stop, daemon
        )
    if transport == "http":
        http = HttpGitServer(root, HTTP_USER, HTTP_PASSWORD).start()
        monkeypatch.setenv(HTTP_PASSWORD_ENV, HTTP_PASSWORD)
        return Site(
            transport,
            root,
            lambda name, _: Remote(
                name="docs", url=http.url(name), username=HTTP_USER, password_env=HTTP_PASSWORD_ENV
            ),
            http.stop,
            http,
        )
    if transport == "file":
        return Site(transport, root, lambda _, repo: Remote(name="docs", url=f"file://{repo}"))
    if transport == "ssh":
        if sshd_binary() is None:
            pytest.skip(f"sshd is not installed (openssh-server): {SSHD_INSTALL}")
        ssh = SshServer(tmp_path / "sshd").start()
        return Site(
            transport,
            root,
            lambda _, repo: Remote(
                name="docs",
                url=ssh.url(repo),
                ssh_key_file=ssh.key_file,
                known_hosts_file=ssh.known_hosts_file,
            ),
            ssh.stop,
            ssh,
        )
    raise AssertionError(transport)


@pytest.fixture(params=TRANSPORTS)
def site(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """A served site for each transport in turn."""
    started = start_site(request.param, tmp_path, monkeypatch)
    yield started
    started.stop()


@pytest.fixture
def http_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The http site alone (Basic auth), for credential tests."""
    started = start_site("http", tmp_path, monkeypatch)
    yield started
    started.stop()


@pytest.fixture
def ssh_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The ssh site alone (skipped without sshd)."""
    started = start_site("ssh", tmp_path, monkeypatch)
    yield started
    started.stop()


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """Where the local cache of a remote goes (not created: ``clone_or_init_cache`` makes it)."""
    return tmp_path / "cache" / "docs.git"
