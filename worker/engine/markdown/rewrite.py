"""Rewriting a page's links: after files moved (a rename, a folder rename: many moves at once), or to
point elsewhere (a page or a heading: ``repoint_links``, the walk every refactor op goes through).

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

``repoint_links(path, text, aim, before, after)`` is the general walk ``rewrite_links`` is one use of:
``aim`` says, for each link and the file it resolved to, where it must point (an ``Aim``: a page, and
the fragment kept or set to name a heading by ``anchors``' rule, or removed). Same-page links
(``[[#X]]``, ``[x](#x)``) resolve to their own page there, so they can be sent to another page (their
target is then written as above: a wikilink gets the shortest name, a markdown link the relative path
with ``.md``). A link whose fragment is removed keeps everything else; a same-page one gets a target.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from worker.engine.budget import checked
from worker.engine.markdown.anchors import fragment_for
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


@dataclass(frozen=True)
class Aim:
    """Where a link must point after a refactor: ``page``, and with ``keep`` its fragment as written;
    without ``keep``, a fragment naming ``heading`` (``anchors.fragment_for``), or none when that is
    None."""

    page: str
    heading: str | None = None
    keep: bool = True


# (a link, the file it resolved to before) -> where it must point after, or None to leave it as it is
Aimer = Callable[[Link, str], Aim | None]


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
    return repoint_links(
        path,
        text,
        lambda _, old: Aim(moves.get(old, old)),
        before,
        after,
        page_after=moves.get(path, path),
        max_size=max_size,
    )


def repoint_links(
    path: str,
    text: str,
    aim: Aimer,
    before: FileIndex,
    after: FileIndex,
    *,
    page_after: str | None = None,
    max_size: int | None = None,
) -> tuple[str, int]:
    """The one link walk of every refactor: ``text`` (the page that was at ``path`` and is at
    ``page_after``, default ``path``) with each link that resolved before (a same-page link resolves to
    its page) pointing where ``aim`` says, and how many links changed. A link that already resolves to
    its aim's page (from ``page_after``, against ``after``) and keeps its fragment is left exactly as
    written; else its target is respelled (``retarget``) where needed and its fragment replaced where the
    aim says. An aim at a file missing from ``after``, or one no spelling reaches, leaves the link as it
    is. ``max_size``: as for ``rewrite_links``."""
    page_after = path if page_after is None else page_after
    pieces: list[str] = []
    position = 0
    count = 0
    size = len(text)
    for link in checked(find_links(text), "rewriting links"):
        old = points_to(link, path, before)
        wanted = None if old is None else aim(link, old)
        if wanted is None or wanted.page not in after:
            continue
        assert old is not None
        fragment = link.fragment
        if not wanted.keep:
            fragment = None if wanted.heading is None else fragment_for(link, wanted.heading)
        target = link.target
        there = points_to(link, page_after, after) == wanted.page
        if not there or (not target and fragment is None):
            respelled = retarget(link, old, wanted.page, page_after, after)
            if respelled is None:
                continue
            target = respelled
        if target == link.target and fragment == link.fragment:
            continue
        end = link.target_end if link.fragment is None else _fragment_end(text, link)
        new = target if fragment is None else f"{target}#{fragment}"
        size += len(new) - (end - link.target_start)
        if max_size is not None and size > max_size:
            raise TooLarge(size)
        pieces.append(text[position : link.target_start])
        pieces.append(new)
        position = end
        count += 1
    pieces.append(text[position:])
    return "".join(pieces), count


def points_to(link: Link, page: str, files: FileIndex) -> str | None:
    """The file ``link`` (in the page at ``page``) resolves to: ``page`` itself for a same-page link
    (``[[#X]]``, ``[x](#x)``), else by the ``links`` rule; None when it is broken or not a page link."""
    if not link.target and link.fragment is not None:
        return page
    return resolve_target(link, page, files).path


def _fragment_end(text: str, link: Link) -> int:
    """The offset after ``link``'s fragment (wikilink: blanks may stand between the name and ``#``)."""
    assert link.fragment is not None
    hash_at = text.index("#", link.target_end) if link.kind == "wikilink" else link.target_end
    return hash_at + 1 + len(link.fragment)


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
    return _first_resolving(spellings, wanted, files)


def shortest_wikilink(wanted: str, files: FileIndex) -> str | None:
    """The wikilink target a new link to ``wanted`` is written with: the first spelling that resolves
    to it of those ``retarget`` tries for a bare-name link (file name, path under ``wiki/``, path from
    the root, ``/`` and the path, with ``.md`` last), or None."""
    return _first_resolving(
        [
            _without_md(wanted.rsplit("/", 1)[-1], False),
            *([wanted[len("wiki/") :].removesuffix(".md")] if wanted.startswith("wiki/") else []),
            _without_md(wanted, False),
            "/" + _without_md(wanted, False),
            "/" + wanted,
        ],
        wanted,
        files,
    )


def _first_resolving(spellings: list[str], wanted: str, files: FileIndex) -> str | None:
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
    # ``.md`` left out where the link left it out (a same-page link, which had no path, gets it)
    if link.path and not link.path.lower().endswith(".md") and base.endswith(".md"):
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
