"""Tokens files for tests: principals by a short name, each with a display name, rights and prefixes."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def digest(token: str) -> str:
    """The ``token_sha256`` of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_toml(tokens: Mapping[str, str], entries: Mapping[str, tuple[str, ...]]) -> str:
    """The tokens file of ``entries`` (who -> (display name, rights as a TOML inline table[, more TOML
    lines such as ``prefixes = {...}``])), each principal with the token ``tokens[who]`` (only its SHA-256
    is written) and the email ``<who>@example.org``."""
    blocks = []
    for who, (name, rights, *extra) in entries.items():
        blocks.append(
            f'[[principals]]\nname = "{name}"\nemail = "{who}@example.org"\n'
            f'token_sha256 = "{digest(tokens[who])}"\nrights = {rights}\n'
            + "".join(f"{line}\n" for line in extra)
        )
    return "\n".join(blocks)
