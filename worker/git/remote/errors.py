"""The errors of remote-backed wikis, members of wikiq's one error family (``worker.errors.WikiqError``).

    WikiqError
    └── RemoteError            something about a declared git remote
        ├── RemoteNotFound     REMOTE_NOT_FOUND    no remote of that name is declared
        ├── RemoteUnavailable  REMOTE_UNAVAILABLE  unreachable, timed out, or credentials missing/refused
        └── RemoteRejected     REMOTE_REJECTED     the remote refuses a push (a hook, a protected branch)

Every message is safe to show to a caller: it names the remote, never its URL's userinfo nor a credential,
and any text that came from git has gone through ``worker.git.remote.redact`` first.
"""

from __future__ import annotations

from typing import Literal

from worker.errors import WikiqError

UnavailableKind = Literal["unreachable", "timeout", "auth", "not_found", "credentials"]


class RemoteError(WikiqError):
    """A refusal about a declared git remote; the message never holds a credential."""

    code = "REMOTE_UNAVAILABLE"


class RemoteNotFound(RemoteError):
    """No remote of that name is declared in the operator's remotes file."""

    code = "REMOTE_NOT_FOUND"


class RemoteUnavailable(RemoteError):
    """The remote could not be used right now; ``kind`` says why, so a caller can decide to wait or give up.

    ``unreachable`` (connection refused, DNS, TLS, hung up), ``timeout`` (the git command ran out of time),
    ``auth`` (the server refused our credentials or the ssh host key), ``not_found`` (no such repository
    there), ``credentials`` (our own credential source, an env variable or a file, is missing or unusable).
    """

    code = "REMOTE_UNAVAILABLE"

    def __init__(self, message: str, *, kind: UnavailableKind) -> None:
        super().__init__(message)
        self.kind: UnavailableKind = kind


class RemoteRejected(RemoteError):
    """The remote refused a push for a reason of its own (a hook, a protected branch)."""

    code = "REMOTE_REJECTED"
