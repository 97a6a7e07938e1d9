"""Scrubbing text that came from git (stderr, hook output) before it becomes a message or a log line.

``redact`` replaces with ``***``: every secret the remote's declared sources hold now, in the forms it
could travel in (as is, percent-encoded, base64 inside a Basic header), any extra secrets given, the
userinfo of any URL (``scheme://user:pw@host`` -> ``scheme://***@host``), the value of any
``Authorization:`` header, and any PEM private key block.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from worker.git.remote.config import TOKEN_USERNAME, Remote
from worker.git.remote.credentials import secrets_of

MASK = "***"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s'\"]+@")
_AUTHORIZATION = re.compile(r"(?i)\b((?:proxy-)?authorization:\s*)(?:[A-Za-z]+\s+)?\S+")
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
)


def redact(text: str, remote: Remote | None = None, secrets: Iterable[str] = ()) -> str:
    """``text`` without any secret of ``remote`` (read now) or of ``secrets``, URL userinfo or auth header."""
    values = [s for s in secrets if s]
    username = None
    if remote is not None:
        values.extend(secrets_of(remote))
        username = remote.username or (TOKEN_USERNAME if remote.credential_style == "token" else None)
    for form in sorted(_forms(values, username), key=len, reverse=True):
        text = text.replace(form, MASK)
    text = _PRIVATE_KEY.sub(MASK, text)
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + MASK, text)
    return _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)


def _forms(values: Iterable[str], username: str | None) -> set[str]:
    """Each secret as it may appear in text: raw, URL-encoded, and base64 alone or as ``user:secret``."""
    forms: set[str] = set()
    for value in values:
        forms.update({value, quote(value, safe=""), quote_plus(value, safe="")})
        forms.add(base64.b64encode(value.encode()).decode().rstrip("="))
        if username is not None:
            forms.add(base64.b64encode(f"{username}:{value}".encode()).decode().rstrip("="))
    return {f for f in forms if f}
