"""Who is calling: bearer tokens from ``WIKIQ_TOKENS_FILE``, the principal behind a request, its rights.

The tokens file (TOML or YAML) lists principals; a token is stored only as its SHA-256::

    [[principals]]
    name = "ada"
    email = "ada@example.org"
    token_sha256 = "<sha256 hex of the token>"
    rights = { homelab = "write", "*" = "read" }     # read, propose, write, admin (admin also creates wikis)
    prefixes = { homelab = ["wiki/team-a/"] }        # optional: writes narrowed to these path prefixes

Without a tokens file wikiq is single-user: every request acts as the configured author with every right
(and the API refuses to listen beyond loopback). The file is read again when it changes; a file that
disappears or no longer parses fails closed: every token is refused (one log line says why) until it is
fixed, rather than keeping grants the operator may have meant to revoke.

A principal is identified by its token (``Principal.id``, derived from the token's SHA-256), never by its
display name: two entries that share a name share no idempotency keys, rate limits or jobs.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import tomllib
from pathlib import Path
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from worker.errors import AccessDenied
from worker.service.caller import IMPLIED, RIGHTS, Principal, single_user
from worker.settings import Settings

__all__ = ["RIGHTS", "UI_COOKIE", "Authenticator", "Principal", "load_tokens", "new_token", "principal"]

log = logging.getLogger("wikiq.api")
UI_COOKIE = "wikiq_ui_session"


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
            rights[wiki] = frozenset(r for name in names for r in IMPLIED[name])
        prefixes = {w: tuple(p) for w, p in self.prefixes.items()}
        return Principal(self.name, self.email, rights, prefixes, id=principal_id(self.token_sha256))


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    principals: list[_Entry]


def load_tokens(path: Path) -> list[tuple[bytes, Principal]]:
    """``(sha256 digest, principal)`` per entry of a TOML or YAML tokens file; ``ValueError`` if malformed."""
    text = path.read_text()
    data: Any
    if path.suffix in (".yaml", ".yml"):
        import yaml  # type: ignore[import-untyped, unused-ignore]

        data = yaml.safe_load(text)
    else:
        data = tomllib.loads(text)
    parsed = _TokensFile.model_validate(data)
    return [(bytes.fromhex(e.token_sha256), e.principal()) for e in parsed.principals]


def principal_id(token_sha256_hex: str) -> str:
    """The identity of the principal holding a token: a digest of the token's SHA-256 (not reversible)."""
    return "p_" + hashlib.sha256(bytes.fromhex(token_sha256_hex)).hexdigest()[:32]


class Authenticator:
    """Maps bearer tokens to principals, reloading the tokens file when it changes; fails closed.

    The file is looked at (one ``stat``) on every call. When it is gone or does not parse, every token is
    refused until it is back and valid; the failure is logged once per change of the file.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = settings.tokens_file
        self.stamp: tuple[float, int] | None = None
        self.entries: list[tuple[bytes, Principal]] = []
        if self.path is not None:
            self.entries = load_tokens(self.path)  # a bad file at start-up stops the process
            self.stamp = self._stat()

    def _stat(self) -> tuple[float, int] | None:
        assert self.path is not None
        try:
            info = self.path.stat()
        except OSError:
            return None
        return info.st_mtime, info.st_size

    def _reload(self) -> None:
        stamp = self._stat()
        if stamp == self.stamp:
            return
        self.stamp = stamp
        if stamp is None:
            self.entries = []
            log.error("tokens file %s is gone: every token is refused until it is back", self.path)
            return
        assert self.path is not None
        try:
            self.entries = load_tokens(self.path)
        except (OSError, ValueError) as exc:
            self.entries = []
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.error(
                "tokens file %s does not parse (%s): every token is refused until it is fixed",
                self.path,
                first[:200],
            )

    def single_user(self) -> Principal:
        """The principal of single-user mode: the configured author with every right."""
        return single_user(self.settings.author_name, self.settings.author_email)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization`` header; ``UNAUTHORIZED`` when missing or unknown."""
        if self.path is None:
            return self.single_user()
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AccessDenied("send Authorization: Bearer <token>", code="UNAUTHORIZED")
        found = self.by_digest(hashlib.sha256(token.strip().encode()).digest())
        if found is None:
            raise AccessDenied("unknown token", code="UNAUTHORIZED")
        return found

    def by_digest(self, digest: bytes) -> Principal | None:
        """The principal whose token has SHA-256 ``digest`` in the current tokens file, or None."""
        if self.path is None:
            return self.single_user()
        self._reload()
        found: Principal | None = None
        for stored, principal in self.entries:  # compare with every entry, in constant time each
            if hmac.compare_digest(stored, digest):
                found = principal
        return found


async def principal(request: Request) -> Principal:
    """The caller of ``request`` (FastAPI dependency); ``401`` without a valid token.

    ``async`` though it does no I/O, so FastAPI runs it on the event loop instead of a thread hop.
    """
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, Principal):
        return cached
    authorization = request.headers.get("authorization")
    wikiq = request.app.state.wikiq  # api.server.deps.AppState
    found: Principal | None
    if authorization is None and request.method == "GET" and request.url.path.startswith("/ui"):
        # the browser's sign-in (api/ui_login.py): a server-side session that can only read /ui
        found = await wikiq.sessions.principal(request.cookies.get(UI_COOKIE), wikiq.auth)
        if found is None:
            found = wikiq.auth.authenticate(None)
    else:
        found = wikiq.auth.authenticate(authorization)
    request.state.principal = found
    return found


def new_token() -> tuple[str, str]:
    """A fresh random token and its SHA-256 hex (what the tokens file stores)."""
    token = "wkq_" + secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()
