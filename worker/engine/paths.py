"""Path shapes and zones: which paths a batch may name, and which ops each zone allows.

``check_path`` refuses every path shape of contract rule 5 with ``INVALID_PATH``, and with it every name
git itself refuses or flags: what Windows (NTFS) or macOS (HFS+) read as ``.git``, and git's own
``.gitmodules`` and ``.gitattributes`` in any spelling (``git fsck`` checks their content; see
``segment_problem``). A ``ZonePolicy`` is data (JSON-loadable, overridable per wiki): an ordered list of
zones, the first whose pattern matches decides. The default is the contract's: ``wiki/**`` any op,
``raw/**`` create-only, the root ``index.md``, ``log.md`` and ``schema.md`` never deleted or renamed,
everything else ``ZONE_FORBIDDEN``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from worker.errors import BatchRejected

MAX_PATH_BYTES = 4096
MAX_SEGMENT_BYTES = 255
# Unicode category Cc, exactly: C0 controls, DEL and C1 controls (a regex, not a category lookup per char)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# The shape almost every path has: ASCII segments of letters, digits, '_', '-' and '.', none starting with
# '.', none over 255 bytes. Every check of ``path_problem`` passes for such a path, so it skips them.
_PLAIN = re.compile(r"(?:[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}/)*[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")
OpName = Literal["create", "overwrite", "replace", "delete", "rename"]
ALL_OPS: frozenset[OpName] = frozenset({"create", "overwrite", "replace", "delete", "rename"})


def path_problem(path: str) -> str | None:
    """Why ``path`` is not an acceptable relative POSIX path, or None when it is."""
    if len(path) <= MAX_PATH_BYTES and _PLAIN.fullmatch(path):
        return None
    return checked_path_problem(path)


def checked_path_problem(path: str) -> str | None:
    """``path_problem`` for any path, each rule checked in turn (``path_problem`` skips plain paths)."""
    if not path:
        return "the path is empty"
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        return "the path is not valid UTF-8"
    if len(raw) > MAX_PATH_BYTES:
        return f"the path is {len(raw)} bytes, over the limit of {MAX_PATH_BYTES}"
    if _CONTROL.search(path):
        return "the path contains a control character"
    if "\\" in path:
        return "the path contains a backslash; use '/' between folders"
    if path.startswith("/"):
        return "the path is absolute; give it relative to the wiki root, e.g. wiki/page.md"
    if path.endswith("/"):
        return "the path ends with '/'; name a file, not a folder"
    for segment in path.split("/"):
        problem = segment_problem(segment)
        if problem is not None:
            return problem
    return None


def segment_problem(segment: str) -> str | None:
    """Why ``segment`` (one name between slashes) is refused, or None when it is acceptable.

    Refused, besides empty, ``.``, ``..`` and over 255 bytes: every name git's ``verify_path`` refuses with
    ``core.protectNTFS`` and ``core.protectHFS`` on (a checkout of it fails), and every name for which
    ``git fsck --strict`` (so ``transfer.fsckObjects``, and every forge that checks pushes) flags a tree.
    """
    if segment == "":
        return "the path has an empty segment ('//')"
    if segment in (".", ".."):  # verify_dotfile; fsck: hasDot, hasDotdot
        return f"the path has a '{segment}' segment"
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        return f"a segment of the path is over {MAX_SEGMENT_BYTES} bytes"
    if not may_spell_a_dotfile(segment):
        return None
    # verify_path_internal (checkout, add) with protectHFS/protectNTFS, and fsck_tree's hasDotgit, both ask
    # is_hfs_dotgit || is_ntfs_dotgit; plain ".git" in any case is also verify_dotfile's.
    if is_hfs_dot(segment, "git") or is_ntfs_dotgit(segment):
        if segment.lower() == ".git":
            return "the path has a '.git' segment, which git reserves for itself; rename it"
        return (
            f"the segment {segment!r} is what git reads as '.git' on Windows or macOS, and git refuses it; "
            "rename it"
        )
    # fsck_tree: is_hfs_dotgitmodules || is_ntfs_dotgitmodules (and the same for .gitattributes).
    for name, short in _CHECKED_DOTFILES:
        if is_hfs_dot(segment, name) or is_ntfs_dot(segment, name, short):
            what = (
                f"the path has a '.{name}' segment"
                if segment.lower() == f".{name}"
                else f"the segment {segment!r} is what git reads as '.{name}' on Windows or macOS"
            )
            return f"{what}, a file git fsck checks (and refuses as a folder): clones could fail; rename it"
    return None


# -- git's own checks, ported ----------------------------------------------------------------------------
#
# Ported from git's path.c and utf8.c (read at v2.55; tests/security checks the port against the installed
# git) and used the way read-cache.c verify_path_internal and fsck.c fsck_tree use them, on one tree entry
# name at a time. The NTFS checks work on the UTF-8 bytes and compare ASCII only, as git does (strncasecmp,
# tolower on bytes below 0x80); the HFS check works on code points.

# fsck_tree collects entries with these names (in any NTFS or HFS+ spelling, as file or folder) and fsck
# then checks them: a folder is gitmodulesBlob/gitattributesBlob, a file's content gitmodulesUrl/Name/Path/
# Update or gitattributesLineLength. wikiq takes any content, so the name is where to stop it. The other two
# names git special-cases, .gitignore and .mailmap, are flagged only as symlinks, which wikiq never writes.
# (name after the dot, the fallback 8.3 short-name prefix git computed for it)
_CHECKED_DOTFILES = (("gitmodules", "gi7eba"), ("gitattributes", "gi7d29"))

# utf8.c next_hfs_char: code points HFS+ ignores in names, so ".g\u200cit" is ".git" there.
_HFS_IGNORED = frozenset(
    [0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def may_spell_a_dotfile(segment: str) -> bool:
    """False when no check below can match ``segment`` (most names: the checks cost ~30 us a name).

    Every spelling they look for starts with ``.`` (on HFS+ once the code points it ignores are skipped)
    or holds a ``~`` (NTFS 8.3 short names).
    """
    return segment[:1] == "." or "~" in segment or (segment != "" and ord(segment[0]) in _HFS_IGNORED)


def is_hfs_dot(segment: str, needle: str) -> bool:
    """True when HFS+ reads ``segment`` as ``.<needle>`` (git's ``is_hfs_dot_generic``, utf8.c).

    Ignorable code points are skipped anywhere, ASCII letters compare without case; nothing may follow.
    """
    chars = [ch for ch in segment if ord(ch) not in _HFS_IGNORED]
    if len(chars) != len(needle) + 1 or chars[0] != ".":
        return False
    return all(ord(ch) < 128 and ch.lower() == want for ch, want in zip(chars[1:], needle, strict=True))


def is_ntfs_dotgit(segment: str) -> bool:
    """True when NTFS reads ``segment`` as ``.git`` (git's ``is_ntfs_dotgit``, path.c).

    ``.git`` or its 8.3 short name ``git~1`` (any case), then only dots and spaces (which Windows trims),
    then the end or a ``:`` (an alternate data stream such as ``.git::$INDEX_ALLOCATION``).
    """
    raw = segment.encode("utf-8")
    low = raw.lower()  # ASCII only, like git's 'g' || 'G'
    if low.startswith(b".git"):
        rest = raw[4:]
    elif low.startswith(b"git~1"):
        rest = raw[5:]
    else:
        return False
    # git also stops at '/' and '\\' (it checks whole paths); a segment has no '/' and '\\' is refused.
    return _only_dots_and_spaces_then_end(rest, b":/\\")


def is_ntfs_dot(segment: str, name: str, short_prefix: str) -> bool:
    """True when NTFS reads ``segment`` as ``.<name>`` (git's ``is_ntfs_dot_generic``, path.c).

    Three spellings, each followed by only dots and spaces, then the end or a ``:`` stream: ``.<name>``;
    the 8.3 short name of the first six letters and ``~1`` to ``~4``; and git's fall-back short name, up to
    six letters of ``short_prefix`` then ``~`` and digits (the first 1-9), eight characters in all.
    """
    raw = segment.encode("utf-8")
    low = raw.lower()
    needle = name.encode()
    if low[:1] == b"." and low[1 : 1 + len(needle)] == needle:
        return _only_dots_and_spaces_then_end(raw[1 + len(needle) :], b":")
    if low[:6] == needle[:6] and raw[6:7] == b"~" and raw[7:8] in (b"1", b"2", b"3", b"4"):
        return _only_dots_and_spaces_then_end(raw[8:], b":")
    prefix = short_prefix.encode()
    at, saw_tilde = 0, False
    while at < 8:
        if at >= len(raw):
            return False
        byte = raw[at]
        if saw_tilde:
            if not 0x30 <= byte <= 0x39:  # '0'..'9'
                return False
        elif byte == 0x7E:  # '~', then '1'..'9'
            at += 1
            if at >= len(raw) or not 0x31 <= raw[at] <= 0x39:
                return False
            saw_tilde = True
        elif at >= 6 or byte >= 0x80 or low[at] != prefix[at]:
            return False
        at += 1
    return _only_dots_and_spaces_then_end(raw[at:], b":")


def _only_dots_and_spaces_then_end(rest: bytes, stops: bytes) -> bool:
    # path.c: the loop after a match; Windows drops trailing dots and spaces, and "name:stream" is name.
    trimmed = rest.lstrip(b". ")
    return not trimmed or trimmed[0] in stops


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
