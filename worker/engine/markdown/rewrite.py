"""Rewriting a page's links after files moved (a rename, a folder rename: many moves at once).

``rewrite_links(path, text, moves, files_before, files_after)`` looks at every link of ``text``, the page
that was at ``path`` before the moves and is at ``moves.get(path, path)`` after them. A link that
resolved before to a file F (``links`` rule, against ``files_before`` and from ``path``) must resolve
after to F's new place ``moves.get(F, F)`` (against ``files_after``, from the page's new place). When it
still does, its text is left exactly as it is — so a bare ``[[name]]`` whose file kept its name in
another folder stays as written while the name is unambiguous. Otherwise only its target is rewritten,
keeping everything else of the link (``!``, ``#fragment``, ``|label``, ``[label]``, title, ``<...>``):

- wikilink: the first of these spellings that resolves to exactly the new place is written: the new file
  name (only if the link was a bare name); the path from the root (tried here only if the link spelled
  its old target's whole path from the root); the path under ``wiki/`` (for files in a folder below
  ``wiki/``); the path from the root; ``/`` and the path from the root. ``.md`` is left out of each
  unless the link spelled it; the very last try is ``/`` and the full path with ``.md``. A link written
  with a leading ``/`` only gets the ``/`` spellings. A spelling holding ``#``, ``|``, ``[``, ``]`` or a
  line break cannot be a wikilink target and is skipped (the link is then left as it is).
- markdown link or reference definition: the new place relative to the page's new folder (from the
  root with a leading ``/`` when the link was written that way; ``./`` kept when it was written;
  ``.md`` left out when it was and that still resolves). Percent-encoding follows the link: when its
  destination held percent-escapes, the new path is fully percent-encoded (``quote(path, safe="/")``);
  otherwise only what must be is (``%``, ``#``, ``\\``, ``<``, ``>``, controls, and for a destination
  outside ``<...>`` also blanks and parentheses).

So relative markdown links inside a page that itself moved are fixed even when their targets did not
move, and links that became ambiguous because another file moved next to their target are made
unambiguous. Links that were broken before are left alone. Nothing outside the rewritten targets
changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

from worker.engine.budget import checked
from worker.engine.markdown.bounds import TooLarge
from worker.engine.markdown.links import (
    FileIndex,
    Link,
    decode_destination,
    find_links,
    resolve_markdown,
    resolve_target,
    resolve_wikilink,
)

_ESCAPED = re.compile(r"%[0-9A-Fa-f]{2}")
_NOT_IN_WIKILINK = frozenset("#|[]\r\n")


def rewrite_links(
    path: str,
    text: str,
    moves: Mapping[str, str],
    files_before: FileIndex | Iterable[str],
    files_after: FileIndex | Iterable[str] | None = None,
    *,
    max_size: int | None = None,
) -> tuple[str, int]:
    """``text`` with every link whose target moved (or that the moves broke) pointing to the new place,
    and how many links were rewritten. ``path`` is the page's path before the moves; ``files_after``
    defaults to ``files_before`` with ``moves`` applied. With ``max_size``, ``TooLarge`` is raised as soon
    as the text built so far would make the result longer than that many characters."""
    before = FileIndex.of(files_before)
    after = (
        FileIndex.of(files_after)
        if files_after is not None
        else FileIndex(moves.get(file, file) for file in before.files)
    )
    page_after = moves.get(path, path)
    pieces: list[str] = []
    position = 0
    count = 0
    size = len(text)
    for link in checked(find_links(text), "rewriting links"):
        if not link.is_page_link:
            continue
        old = resolve_target(link, path, before).path
        if old is None:
            continue
        wanted = moves.get(old, old)
        if wanted not in after or resolve_target(link, page_after, after).path == wanted:
            continue
        new_target = retarget(link, old, wanted, page_after, after)
        if new_target is None or new_target == link.target:
            continue
        size += len(new_target) - (link.target_end - link.target_start)
        if max_size is not None and size > max_size:
            raise TooLarge(size)
        pieces.append(text[position : link.target_start])
        pieces.append(new_target)
        position = link.target_end
        count += 1
    pieces.append(text[position:])
    return "".join(pieces), count


def may_rewrite(path: str, text: str, moves: Mapping[str, str]) -> bool:
    """False only when ``rewrite_links(path, text, moves, ...)`` certainly changes nothing: the page did
    not move and its text (lowered, without backslashes, percent-decoded too) holds no file name, with or
    without ``.md``, of a moved file's old or new place. A cheap filter before parsing every page."""
    if path in moves:
        return True
    seen = text.lower().replace("\\", "")
    if "%" in seen:
        seen += "\n" + unquote(seen, errors="replace")
    for place in (*moves.keys(), *moves.values()):
        name = place.rsplit("/", 1)[-1].lower()
        if name.removesuffix(".md") in seen:
            return True
    return False


def retarget(link: Link, old: str, wanted: str, page: str, files: FileIndex) -> str | None:
    """The new target text for ``link`` (which pointed to ``old``) in the page at ``page`` so that it
    resolves to ``wanted`` among ``files``, or None when no spelling does."""
    if link.kind == "wikilink":
        return _wikilink_target(link, old, wanted, files)
    return _markdown_target(link, wanted, page, files)


def _without_md(path: str, keep: bool) -> str:
    return path if keep or not path.endswith(".md") else path[:-3]


def _wikilink_target(link: Link, old: str, wanted: str, files: FileIndex) -> str | None:
    keep_md = link.path.lower().endswith(".md")
    name = wanted.rsplit("/", 1)[-1]
    spellings: list[str] = []
    if "/" not in link.path:
        spellings.append(_without_md(name, keep_md))
    if link.path in (old, _without_md(old, False)):
        # The link spelled its target's whole path from the root: keep doing so.
        spellings.append(_without_md(wanted, keep_md))
    if wanted.startswith("wiki/") and "/" in wanted[len("wiki/") :]:
        spellings.append(_without_md(wanted[len("wiki/") :], keep_md))
    spellings.append(_without_md(wanted, keep_md))
    spellings.append("/" + _without_md(wanted, keep_md))
    spellings.append("/" + wanted)
    if link.path.startswith("/"):
        spellings = [s for s in spellings if s.startswith("/")]
    for spelling in spellings:
        writable = _NOT_IN_WIKILINK.isdisjoint(spelling) and spelling == spelling.strip()
        if writable and resolve_wikilink(spelling, files).path == wanted:
            return spelling
    return None


def _markdown_target(link: Link, wanted: str, page: str, files: FileIndex) -> str | None:
    if link.path.startswith("/"):
        base = "/" + wanted
    else:
        folder = page.rsplit("/", 1)[0] if "/" in page else ""
        base = relative_path(wanted, folder)
        if link.target.startswith("./") and not base.startswith("../"):
            base = "./" + base
    spellings = [base]
    if not link.path.lower().endswith(".md") and base.endswith(".md"):
        spellings.insert(0, base[:-3])
    for spelling in spellings:
        written = encode_destination(spelling, link.target, link.angle)
        if resolve_markdown(decode_destination(written), page, files).path == wanted:
            return written
    return None


def relative_path(target: str, folder: str) -> str:
    """The path of ``target`` (from the root) relative to ``folder`` (from the root, "" for the root)."""
    parts = target.split("/")
    base = folder.split("/") if folder else []
    common = 0
    while common < min(len(parts) - 1, len(base)) and parts[common] == base[common]:
        common += 1
    return "/".join([".."] * (len(base) - common) + parts[common:])


def encode_destination(path: str, original: str, angle: bool) -> str:
    """``path`` written as a markdown destination in the percent-encoding style of ``original``."""
    if _ESCAPED.search(original):
        return quote(path, safe="/")
    out: list[str] = []
    for char in path:
        must = char in "%#\\<>" or ord(char) < 0x20 or char == "\x7f" or (not angle and char in " ()")
        out.append(quote(char, safe="") if must else char)
    return "".join(out)
