"""Who is calling: bearer tokens from ``WIKIQ_TOKENS_FILE``, the principal behind a request, its rights.

The tokens file (TOML or YAML) lists principals; a token is stored only as its SHA-256::

    [[principals]]
    name = "ada"
    email = "ada@example.org"
    token_sha256 = "<sha256 hex of the token>"
    rights = { homelab = "write", "*" = "read" }     # read, write, admin (admin also creates wikis)
    prefixes = { homelab = ["wiki/team-a/"] }        # optional: writes narrowed to these path prefixes

Without a tokens file wikiq is single-user: every request acts as the configured author with every right
(and the API refuses to listen beyond loopback). The file is read again when it changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from worker.errors import AccessDenied
from worker.settings import Settings

RIGHTS = ("read", "write", "admin")
UI_COOKIE = "wikiq_ui_token"
_IMPLIED = {"read": {"read"}, "write": {"read", "write"}, "admin": {"read", "write", "admin"}}


@dataclass(frozen=True)
class Principal:
    """A caller: the name and email its commits carry, its rights per wiki (``*`` for all) and prefixes."""

    name: str
    email: str
    rights: Mapping[str, frozenset[str]] = field(default_factory=dict)
    prefixes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def may(self, wiki: str, right: str) -> bool:
        """True when the principal holds ``right`` (read, write, admin) on ``wiki``."""
        granted = self.rights.get(wiki, frozenset()) | self.rights.get("*", frozenset())
        return right in granted

    def may_write_paths(self, wiki: str, paths: Iterable[str]) -> bool:
        """True when every path is under one of the principal's prefixes for ``wiki`` (or it has none)."""
        allowed = self.prefixes.get(wiki, self.prefixes.get("*"))
        if allowed is None:
            return True
        return all(any(path.startswith(prefix) for prefix in allowed) for path in paths)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    email: str = Field(min_length=1, max_length=320)
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    rights: dict[str, str | list[str]] = Field(default_factory=dict)
    prefixes: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("rights")
    @classmethod
    def _known_rights(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        for wiki, rights in value.items():
            for right in [rights] if isinstance(rights, str) else rights:
                if right not in RIGHTS:
                    raise ValueError(f"unknown right {right!r} for {wiki!r}; use read, write or admin")
        return value

    def principal(self) -> Principal:
        rights: dict[str, frozenset[str]] = {}
        for wiki, given in self.rights.items():
            names = [given] if isinstance(given, str) else given
            rights[wiki] = frozenset(r for name in names for r in _IMPLIED[name])
        return Principal(self.name, self.email, rights, {w: tuple(p) for w, p in self.prefixes.items()})


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    principals: list[_Entry]


def load_tokens(path: Path) -> list[tuple[bytes, Principal]]:
    """``(sha256 digest, principal)`` per entry of a TOML or YAML tokens file; ``ValueError`` if malformed."""
    text = path.read_text()
    data: Any
    if path.suffix in (".yaml", ".yml"):
        import yaml  # type: ignore[import-untyped]

        data = yaml.safe_load(text)
    else:
        data = tomllib.loads(text)
    parsed = _TokensFile.model_validate(data)
    return [(bytes.fromhex(e.token_sha256), e.principal()) for e in parsed.principals]


class Authenticator:
    """Maps bearer tokens to principals, reloading the tokens file when it changes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = settings.tokens_file
        self.stamp: float | None = None
        self.entries: list[tuple[bytes, Principal]] = []
        if self.path is not None:
            self._reload()

    def _reload(self) -> None:
        assert self.path is not None
        stamp = self.path.stat().st_mtime
        if stamp != self.stamp:
            self.entries = load_tokens(self.path)
            self.stamp = stamp

    def single_user(self) -> Principal:
        """The principal of single-user mode: the configured author with every right."""
        return Principal(self.settings.author_name, self.settings.author_email, {"*": frozenset(RIGHTS)})

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization`` header; ``UNAUTHORIZED`` when missing or unknown."""
        if self.path is None:
            return self.single_user()
        with contextlib.suppress(OSError, ValueError):  # a broken edit must not lock everyone out
            self._reload()
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AccessDenied("send Authorization: Bearer <token>", code="UNAUTHORIZED")
        digest = hashlib.sha256(token.strip().encode()).digest()
        found: Principal | None = None
        for stored, principal in self.entries:  # compare with every entry, in constant time each
            if hmac.compare_digest(stored, digest):
                found = principal
        if found is None:
            raise AccessDenied("unknown token", code="UNAUTHORIZED")
        return found


async def principal(request: Request) -> Principal:
    """The caller of ``request`` (FastAPI dependency); ``401`` without a valid token.

    ``async`` though it does no I/O, so FastAPI runs it on the event loop instead of a thread hop.
    """
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, Principal):
        return cached
    authorization = request.headers.get("authorization")
    if authorization is None and request.method == "GET" and request.url.path.startswith("/ui"):
        cookie = request.cookies.get(UI_COOKIE)  # the browser's sign-in (api/ui_login.py): reads only
        authorization = None if cookie is None else f"Bearer {cookie}"
    found: Principal = request.app.state.wikiq.auth.authenticate(authorization)
    request.state.principal = found
    return found


def new_token() -> tuple[str, str]:
    """A fresh random token and its SHA-256 hex (what the tokens file stores)."""
    token = "wkq_" + secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()
