"""Who is calling: a principal's identity, the name its commits carry, and its rights.

Rights per wiki (``*`` for every wiki): ``read``; ``propose`` (implies read: its batches become proposals,
which land only once someone with ``write`` approves them); ``write`` (implies both: its batches land, and
it may approve others' proposals); ``admin`` (implies all, creates wikis, and may cancel or redeliver
anyone's job on its wikis). ``prefixes`` narrows writes, proposals and approvals to path prefixes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from worker.errors import AccessDenied, WikiNotFound

RIGHTS = ("read", "propose", "write", "admin")
IMPLIED = {
    "read": {"read"},
    "propose": {"read", "propose"},
    "write": {"read", "propose", "write"},
    "admin": {"read", "propose", "write", "admin"},
}
SINGLE_USER_ID = "single-user"


@dataclass(frozen=True)
class Principal:
    """A caller: its identity, the name and email its commits carry, rights per wiki and write prefixes.

    ``id`` is what wikiq keys a caller's idempotency keys, rate limit, queued bytes and jobs by: derived from
    the token (never the display name, which two entries may share).
    """

    name: str
    email: str
    rights: Mapping[str, frozenset[str]] = field(default_factory=dict)
    prefixes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    id: str = SINGLE_USER_ID

    def may(self, wiki: str, right: str) -> bool:
        """True when the principal holds ``right`` (read, propose, write, admin) on ``wiki``."""
        granted = self.rights.get(wiki, frozenset()) | self.rights.get("*", frozenset())
        return right in granted

    def may_write_paths(self, wiki: str, paths: Iterable[str]) -> bool:
        """True when every path is under one of the principal's prefixes for ``wiki`` (or it has none)."""
        allowed = self.prefixes.get(wiki, self.prefixes.get("*"))
        if allowed is None:
            return True
        return all(any(path.startswith(prefix) for prefix in allowed) for path in paths)

    def require(self, wiki: str, right: str) -> None:
        """Refuse unless the principal holds ``right`` on ``wiki``: 404 when it may not read it, else 403.

        A caller that may not read a wiki gets the same answer as for a wiki that does not exist.
        """
        if not self.may(wiki, "read"):
            raise WikiNotFound(f"no wiki {wiki[:80]!r}; create it with POST /v1/wikis")
        if not self.may(wiki, right):
            raise AccessDenied(f"your token does not allow {right} on this wiki", code="FORBIDDEN")


def single_user(name: str, email: str) -> Principal:
    """The principal of single-user mode: the configured author with every right on every wiki."""
    return Principal(name, email, {"*": frozenset(RIGHTS)})
