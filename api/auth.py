"""Who is calling: the principal behind a request and what it may do.

In single-user mode (no tokens file) every request acts as the configured author with every right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request


@dataclass(frozen=True)
class Principal:
    """A caller: the name and email its commits carry, and its rights per wiki (``*`` for all)."""

    name: str
    email: str
    rights: dict[str, frozenset[str]] = field(default_factory=dict)

    def may(self, wiki: str, right: str) -> bool:
        """True when the principal holds ``right`` (read, write, admin) on ``wiki``."""
        granted = self.rights.get(wiki, frozenset()) | self.rights.get("*", frozenset())
        return right in granted or "admin" in granted or (right == "read" and "write" in granted)


def principal(request: Request) -> Principal:
    """The caller of ``request`` (FastAPI dependency)."""
    settings = request.app.state.wikiq.settings
    return Principal(
        settings.author_name, settings.author_email, {"*": frozenset({"read", "write", "admin"})}
    )
