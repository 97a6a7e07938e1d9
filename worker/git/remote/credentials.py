"""A remote's credentials, read at the moment they are used and held only as long as one git command runs.

A ``Remote`` names where its secret lives (an environment variable or a file); ``read_credentials``
reads it then, so a rotated token or file is picked up by the next command without a restart, and
nothing long-lived (the registry, a job, a log line) ever holds the secret. The password is a pydantic
``SecretStr``: its ``repr``/``str`` show ``**********``. A missing or unusable source raises
``RemoteUnavailable`` with kind ``credentials``, naming the variable or file, never a value.

``secrets_of`` is the best-effort variant for redaction: every secret value the remote's declared sources
hold right now, and never an error.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from worker.git.remote.config import TOKEN_USERNAME, Remote
from worker.git.remote.errors import RemoteUnavailable

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_SECRET_BYTES = 16 * 1024


@dataclass(frozen=True)
class HttpCredentials:
    """HTTP Basic credentials: a username and a password (or token) that never prints."""

    username: str
    password: SecretStr


@dataclass(frozen=True)
class SshIdentity:
    """An ssh private key file and the known_hosts file holding the only host keys trusted."""

    key_file: Path
    known_hosts_file: Path


def read_credentials(remote: Remote) -> HttpCredentials | SshIdentity | None:
    """The credentials ``remote`` declares, read now; None when it declares none."""
    style = remote.credential_style
    if style == "token":
        secret = _read_secret(remote, remote.token_env, remote.token_file)
        return HttpCredentials(remote.username or TOKEN_USERNAME, SecretStr(secret))
    if style == "password":
        assert remote.username is not None  # the model insists
        secret = _read_secret(remote, remote.password_env, remote.password_file)
        return HttpCredentials(remote.username, SecretStr(secret))
    if style == "ssh":
        assert remote.ssh_key_file is not None and remote.known_hosts_file is not None
        _check_key_file(remote, remote.ssh_key_file)
        if not os.access(remote.known_hosts_file, os.R_OK):
            raise _unusable(remote, f"known_hosts file {remote.known_hosts_file} cannot be read")
        return SshIdentity(remote.ssh_key_file, remote.known_hosts_file)
    return None


def secrets_of(remote: Remote) -> list[str]:
    """Every secret value ``remote``'s declared sources hold right now (for redaction); never raises."""
    found = []
    if remote.credential_style in ("token", "password"):
        env = remote.token_env or remote.password_env
        path = remote.token_file or remote.password_file
        if env is not None and os.environ.get(env):
            found.append(os.environ[env])
        if path is not None:
            with contextlib.suppress(OSError):
                found.append(path.read_bytes()[:_MAX_SECRET_BYTES].decode("utf-8", "replace"))
    variants = set()
    for secret in found:
        variants.add(secret)
        variants.add(secret.strip())
    return sorted((v for v in variants if v), key=len, reverse=True)


def _read_secret(remote: Remote, env: str | None, path: Path | None) -> str:
    if env is not None:
        value = os.environ.get(env, "")
        if not value:
            raise _unusable(remote, f"environment variable {env} is not set")
        where = f"environment variable {env}"
    else:
        assert path is not None
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise _unusable(remote, f"credentials file {path} cannot be read ({exc.strerror})") from None
        if len(raw) > _MAX_SECRET_BYTES:
            raise _unusable(remote, f"credentials file {path} is too large for a secret")
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise _unusable(remote, f"credentials file {path} is not UTF-8 text") from None
        if not value:
            raise _unusable(remote, f"credentials file {path} is empty")
        where = f"credentials file {path}"
    if _CONTROL.search(value):
        raise _unusable(remote, f"{where} holds more than one line or control characters")
    return value


def _check_key_file(remote: Remote, key_file: Path) -> None:
    """ssh refuses a private key others can read; say so plainly instead of a failed login."""
    try:
        mode = key_file.stat().st_mode
    except OSError as exc:
        raise _unusable(remote, f"ssh key file {key_file} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode) or not os.access(key_file, os.R_OK):
        raise _unusable(remote, f"ssh key file {key_file} cannot be read")
    if mode & 0o077:
        raise _unusable(
            remote, f"ssh key file {key_file} is accessible by other users; ssh refuses it (chmod 600)"
        )


def _unusable(remote: Remote, problem: str) -> RemoteUnavailable:
    return RemoteUnavailable(f"remote {remote.name!r}: credentials unusable: {problem}", kind="credentials")
