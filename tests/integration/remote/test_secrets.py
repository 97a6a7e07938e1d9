"""Credentials never leak: a planted token goes through every operation against a real HTTP server (and a
hook that echoes it) and never shows up in an exception, a log record (DEBUG, every logger) or the argv of
any process alive while git talks to the server. Also: redaction, and credentials read at use time."""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.remote.repos import commit, make_bare, refuse_pushes
from tests.integration.remote.servers import HttpGitServer
from worker.git.remote import (
    Accepted,
    Rejected,
    Remote,
    RemoteUnavailable,
    clone_or_init_cache,
    fetch,
    gitcommand,
    push_cas,
    redact,
    remote_head,
)
from worker.git.remote.credentials import HttpCredentials, read_credentials
from worker.git.remote.gitcommand import ASKPASS_PASSWORD, askpass_helper, prepare

SECRET = "wikiq-planted-9f8e7d6c5b4a-token"
USER = "wiki-bot"
TOKEN_ENV = "WIKIQ_TEST_PLANTED_TOKEN"


def command_lines() -> list[str]:
    """The argv of every process visible in /proc, as text."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # the process ended meanwhile
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return lines


class ArgvWatch:
    """Called by the HTTP server on each request, while git waits for the answer: scans every argv."""

    def __init__(self) -> None:
        self.scans = 0
        self.saw_git_helper = False
        self.leaks: list[str] = []

    def __call__(self) -> None:
        lines = command_lines()
        self.scans += 1
        self.saw_git_helper |= any("remote-http" in line for line in lines)
        self.leaks += [line for line in lines if SECRET in line]


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HttpGitServer, ArgvWatch]]:
    """An HTTP git server whose password is the planted token, the token in our env, an argv watch."""
    root = tmp_path / "served"
    root.mkdir()
    server = HttpGitServer(root, USER, SECRET).start()
    watch = ArgvWatch()
    server.on_request = watch
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    yield server, watch
    server.stop()


def texts_of(error: BaseException) -> list[str]:
    """Everything an exception could show: str, repr, its contract body, its cause."""
    texts = [str(error), repr(error), str(getattr(error, "to_dict", dict)())]
    if error.__cause__ is not None:
        texts += texts_of(error.__cause__)
    return texts


def assert_not_leaked(texts: list[str]) -> None:
    """None of ``texts`` holds the secret in any of the forms it travels in."""
    forms = [
        SECRET,
        base64.b64encode(f"{USER}:{SECRET}".encode()).decode().rstrip("="),
        base64.b64encode(SECRET.encode()).decode().rstrip("="),
    ]
    for text in texts:
        for form in forms:
            assert form not in text, text


def test_planted_token_never_leaks(
    planted: tuple[HttpGitServer, ArgvWatch], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every operation, success or failure, leaves the token out of messages, logs and argv."""
    server, watch = planted
    caplog.set_level(logging.DEBUG)
    repo = make_bare(server.root / "wiki.git")
    remote = Remote(name="docs", url=server.url("wiki.git"), username=USER, token_env=TOKEN_ENV)
    cache = tmp_path / "cache.git"
    errors: list[BaseException] = []

    assert clone_or_init_cache(cache, remote) is None
    first = commit(cache, None, "first")
    assert push_cas(cache, remote, first, None) == Accepted(first)
    assert remote_head(cache, remote) == first
    assert fetch(cache, remote) == first

    refuse_pushes(
        repo, message=f"the server echoes Basic {base64.b64encode(f'{USER}:{SECRET}'.encode()).decode()}"
    )
    second = commit(cache, first, "second")
    rejected = push_cas(cache, remote, second, first)
    assert isinstance(rejected, Rejected)
    assert "***" in rejected.reason
    assert_not_leaked([rejected.reason, repr(rejected)])

    server.password = "rotated-on-the-server"
    for operation in (
        lambda: remote_head(cache, remote),
        lambda: fetch(cache, remote),
        lambda: push_cas(cache, remote, second, first),
    ):
        with pytest.raises(RemoteUnavailable) as raised:
            operation()
        assert raised.value.kind == "auth"
        errors.append(raised.value)

    assert watch.scans >= 8 and watch.saw_git_helper, "the argv watch did not see git at work"
    assert watch.leaks == []
    assert_not_leaked([text for error in errors for text in texts_of(error)])
    logged = [record.getMessage() + str(record.args) + (record.exc_text or "") for record in caplog.records]
    assert any("push" in line for line in logged), "expected debug lines about the pushes"
    assert_not_leaked(logged)


def test_the_token_travels_only_in_the_askpass_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prepared command has the token in one environment variable only: not in argv, repr or script."""
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    remote = Remote(name="docs", url="https://git.example.org/docs.git", token_env=TOKEN_ENV)
    command = prepare(Path("/srv/cache.git"), remote, ["ls-remote", remote.url, remote.ref])

    assert_not_leaked([" ".join(command.argv), repr(command)])
    assert [name for name, value in command.env.items() if SECRET in value] == [ASKPASS_PASSWORD]
    helper = askpass_helper()
    assert command.env["GIT_ASKPASS"] == str(helper)
    assert SECRET not in helper.read_text()
    assert stat.S_IMODE(helper.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(helper.stat().st_mode) == 0o700
    assert command.env["GIT_TERMINAL_PROMPT"] == "0"
    assert command.env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert command.env["GIT_CONFIG_GLOBAL"] == os.devnull
    assert "credential.helper=" in command.argv
    assert TOKEN_ENV not in command.env  # our own copy of the variable is not passed on
    assert command.env["HOME"] == str(helper.parent)  # no ~/.netrc or dotfile of the user applies


def test_the_askpass_directory_is_one_per_user_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper lives in ``<tmp>/wikiq-askpass-<uid>`` (one per user, not one per process: a process
    killed before its exit handlers left its own behind), is rewritten if removed, and a directory there
    that is not this user's private one (mode 0755 here) is not used."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(gitcommand, "_askpass_path", None)
    helper = askpass_helper()
    assert helper.parent == tmp_path / f"wikiq-askpass-{os.getuid()}"
    assert stat.S_IMODE(helper.parent.stat().st_mode) == 0o700
    monkeypatch.setattr(gitcommand, "_askpass_path", None)  # another process of the same user
    assert askpass_helper() == helper
    helper.unlink()
    assert askpass_helper() == helper and os.access(helper, os.X_OK)
    assert [p.name for p in helper.parent.iterdir()] == ["askpass"]

    helper.unlink()
    helper.parent.rmdir()
    helper.parent.mkdir(mode=0o755)
    helper.parent.chmod(0o755)
    monkeypatch.setattr(gitcommand, "_askpass_path", None)
    own = askpass_helper()
    assert own.parent != helper.parent and own.parent.name.startswith("wikiq-askpass-")
    assert stat.S_IMODE(own.parent.stat().st_mode) == 0o700
    assert list(helper.parent.iterdir()) == []


def test_credentials_are_read_when_used(
    planted: tuple[HttpGitServer, ArgvWatch], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token rotated in the environment or its file is used by the next command, without reloading."""
    server, _ = planted
    make_bare(server.root / "wiki.git")
    cache = tmp_path / "cache.git"
    remote = Remote(name="docs", url=server.url("wiki.git"), username=USER, token_env=TOKEN_ENV)
    clone_or_init_cache(cache, remote)

    server.password = "second-token"
    with pytest.raises(RemoteUnavailable):
        remote_head(cache, remote)
    monkeypatch.setenv(TOKEN_ENV, "second-token")
    assert remote_head(cache, remote) is None

    token_file = tmp_path / "token"
    token_file.write_text("third-token\n")
    from_file = Remote(name="docs", url=server.url("wiki.git"), username=USER, token_file=token_file)
    server.password = "third-token"
    assert remote_head(cache, from_file) is None


def test_token_username_defaults_to_x_access_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token without a username is sent as x-access-token's password; ``username`` overrides it."""
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    plain = Remote(name="docs", url="https://h/x.git", token_env=TOKEN_ENV)
    gitlab = Remote(name="docs", url="https://h/x.git", token_env=TOKEN_ENV, username="oauth2")
    credentials = read_credentials(plain)
    assert isinstance(credentials, HttpCredentials)
    assert credentials.username == "x-access-token"
    assert SECRET not in repr(credentials)
    assert credentials.password.get_secret_value() == SECRET
    assert isinstance(other := read_credentials(gitlab), HttpCredentials) and other.username == "oauth2"


def test_unusable_credential_sources_are_named_not_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing variable or file, or a key others can read, is RemoteUnavailable (credentials)."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    cases = [
        (Remote(name="docs", url="https://h/x.git", token_env=TOKEN_ENV), TOKEN_ENV),
        (Remote(name="docs", url="https://h/x.git", token_file=tmp_path / "none"), "cannot be read"),
    ]
    two_lines = tmp_path / "two-lines"
    two_lines.write_text(f"{SECRET}\nmore\n")
    cases.append((Remote(name="docs", url="https://h/x.git", token_file=two_lines), "more than one line"))
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o644)
    hosts = tmp_path / "known_hosts"
    hosts.write_text("")
    cases.append(
        (
            Remote(name="docs", url="ssh://git@h/x.git", ssh_key_file=key, known_hosts_file=hosts),
            "chmod 600",
        )
    )
    for remote, problem in cases:
        with pytest.raises(RemoteUnavailable) as raised:
            read_credentials(remote)
        assert raised.value.kind == "credentials"
        assert problem in raised.value.message
        assert_not_leaked(texts_of(raised.value))


def test_redact_removes_every_form_of_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raw, URL-encoded and Basic-encoded secrets, URL userinfo, auth headers and private keys go."""
    monkeypatch.setenv(TOKEN_ENV, "t0k/en+with spaces")
    remote = Remote(name="docs", url="https://h/x.git", username=USER, token_env=TOKEN_ENV)
    basic = base64.b64encode(f"{USER}:t0k/en+with spaces".encode()).decode()
    text = "\n".join(
        [
            "raw t0k/en+with spaces here",
            "encoded t0k%2Fen%2Bwith%20spaces and t0k%2Fen%2Bwith+spaces",
            f"header Basic {basic}",
            "url https://someone:hunter2@git.example.org/x.git",
            "Authorization: Bearer abc.def.ghi",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkt\n-----END OPENSSH PRIVATE KEY-----",
        ]
    )
    cleaned = redact(text, remote, secrets=["extra-secret"]) + redact(
        "extra-secret", secrets=["extra-secret"]
    )
    for gone in (
        "t0k",
        "spaces",
        basic.rstrip("="),
        "hunter2",
        "someone",
        "abc.def",
        "b3BlbnNz",
        "extra-secret",
    ):
        assert gone not in cleaned, gone
    assert "https://***@git.example.org/x.git" in cleaned
