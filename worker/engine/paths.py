"""Path shapes and zones: which paths a batch may name, and which ops each zone allows.

``check_path`` refuses every path shape of contract rule 5 with ``INVALID_PATH``. A ``ZonePolicy`` is data
(JSON-loadable, overridable per wiki): an ordered list of zones, the first whose pattern matches decides.
The default is the contract's: ``wiki/**`` any op, ``raw/**`` create-only, the root ``index.md``,
``log.md`` and ``schema.md`` never deleted or renamed, everything else ``ZONE_FORBIDDEN``.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

from pydantic import BaseModel, ConfigDict

from worker.errors import BatchRejected

MAX_PATH_BYTES = 4096
MAX_SEGMENT_BYTES = 255
OpName = Literal["create", "overwrite", "replace", "delete", "rename"]
ALL_OPS: frozenset[OpName] = frozenset({"create", "overwrite", "replace", "delete", "rename"})


def path_problem(path: str) -> str | None:
    """Why ``path`` is not an acceptable relative POSIX path, or None when it is."""
    if not path:
        return "the path is empty"
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        return "the path is not valid UTF-8"
    if len(raw) > MAX_PATH_BYTES:
        return f"the path is {len(raw)} bytes, over the limit of {MAX_PATH_BYTES}"
    if any(unicodedata.category(ch) == "Cc" for ch in path):
        return "the path contains a control character"
    if "\\" in path:
        return "the path contains a backslash; use '/' between folders"
    if path.startswith("/"):
        return "the path is absolute; give it relative to the wiki root, e.g. wiki/page.md"
    if path.endswith("/"):
        return "the path ends with '/'; name a file, not a folder"
    for segment in path.split("/"):
        if segment == "":
            return "the path has an empty segment ('//')"
        if segment in (".", ".."):
            return f"the path has a '{segment}' segment"
        if _is_git_name(segment):
            return "the path has a '.git' segment, which git reserves"
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return f"a segment of the path is over {MAX_SEGMENT_BYTES} bytes"
    return None


def _is_git_name(segment: str) -> bool:
    # Any case, and the spellings other file systems fold into ".git" (trailing dots/spaces, 8.3 name).
    folded = segment.lower().rstrip(". ")
    return folded == ".git" or folded == "git~1"


def check_path(path: str, index: int | None) -> None:
    """Raise ``INVALID_PATH`` naming the edit when ``path`` has a refused shape."""
    problem = path_problem(path)
    if problem is not None:
        raise BatchRejected("INVALID_PATH", f"{problem}: {path[:200]!r}", index)


class Zone(BaseModel):
    """Paths equal to ``pattern`` (or under it, if it ends with '/') allow ``ops``; others get ``refusal``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str
    ops: frozenset[OpName]
    refusal: Literal["ZONE_FORBIDDEN", "PROTECTED_PATH"] = "ZONE_FORBIDDEN"

    def matches(self, path: str) -> bool:
        """True when ``path`` is in this zone."""
        if self.pattern.endswith("/"):
            return path.startswith(self.pattern)
        return path == self.pattern


class ZonePolicy(BaseModel):
    """Ordered zones; the first match decides, no match is ``ZONE_FORBIDDEN``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    zones: tuple[Zone, ...]

    def check(self, op: OpName, path: str, index: int | None) -> None:
        """Raise ``ZONE_FORBIDDEN`` or ``PROTECTED_PATH`` when ``op`` may not touch ``path``."""
        for zone in self.zones:
            if zone.matches(path):
                if op in zone.ops:
                    return
                allowed = ", ".join(sorted(zone.ops))
                raise BatchRejected(
                    zone.refusal, f"{op} is not allowed on {path!r} (this zone allows: {allowed})", index
                )
        raise BatchRejected(
            "ZONE_FORBIDDEN",
            f"{path!r} is outside the wiki's zones; write under wiki/, raw/ (create only), "
            "or to index.md, log.md, schema.md",
            index,
        )


_ROOT_FILE_OPS: frozenset[OpName] = frozenset({"create", "overwrite", "replace"})

DEFAULT_POLICY = ZonePolicy(
    zones=(
        Zone(pattern="wiki/", ops=ALL_OPS),
        Zone(pattern="raw/", ops=frozenset({"create"})),
        Zone(pattern="index.md", ops=_ROOT_FILE_OPS, refusal="PROTECTED_PATH"),
        Zone(pattern="log.md", ops=_ROOT_FILE_OPS, refusal="PROTECTED_PATH"),
        Zone(pattern="schema.md", ops=_ROOT_FILE_OPS, refusal="PROTECTED_PATH"),
    )
)
