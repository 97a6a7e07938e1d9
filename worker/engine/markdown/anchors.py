"""Which heading a link's fragment names, and how a link is made to name one (contract section 7).

The rule, for a link to page P with a fragment (the text after ``#``):

- a wikilink fragment (``[[P#Redis failover]]``) names a heading whose text equals it, compared as
  Obsidian does: blanks trimmed and inner runs made one space, case ignored, and the characters a
  wikilink cannot hold (``# | [ ] ^``) read as blanks in the heading. Of a nested ``[[P#A#B]]`` the last
  part counts. A fragment starting with ``^`` is a block reference and names no heading;
- a markdown fragment (``[x](p.md#redis-failover)``), percent-decoded, names a heading whose slug it
  equals (GitHub's: lower case, every character that is not a letter, digit, ``_``, ``-`` or blank
  dropped, blanks made ``-``), or whose text it equals by the wikilink comparison (Obsidian writes
  ``[x](p.md#Redis%20failover)``).

When several headings of P match, the fragment names the first, in page order (as a browser or Obsidian
jumps to the first). A same-page link (``[[#X]]``, ``[x](#x)``) names a heading of its own page.

A link is made to name heading H (``fragment_for``): a wikilink gets H's text (the characters it cannot
hold made blanks); a markdown link gets H's slug, or H's text percent-encoded when its old fragment was
not a slug (it named its heading by text).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote, unquote

from worker.engine.markdown.document import normalize_heading
from worker.engine.markdown.links import Link
from worker.engine.markdown.sections import Section

_NOT_WIKI = re.compile(r"[#|\[\]^]")
_NOT_SLUG = re.compile(r"[^\w\- ]")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text: lower case, punctuation dropped, blanks made ``-``."""
    return _NOT_SLUG.sub("", normalize_heading(heading).lower()).replace(" ", "-")


def _key(text: str) -> str:
    return normalize_heading(_NOT_WIKI.sub(" ", text)).casefold()


def same_heading(one: str, other: str) -> bool:
    """True when a wikilink fragment naming heading text ``one`` names ``other`` too."""
    return _key(one) == _key(other)


def names(link: Link, heading: str) -> bool:
    """True when ``link``'s fragment names a heading with text ``heading`` (the module's rule)."""
    fragment = link.fragment
    if fragment is None:
        return False
    if link.kind == "wikilink":
        part = fragment.rsplit("#", 1)[-1].strip()
        return bool(part) and not part.startswith("^") and _key(part) == _key(heading)
    decoded = unquote(fragment, errors="replace")
    return bool(decoded) and (decoded == slug(heading) or _key(decoded) == _key(heading))


def named_section(link: Link, sections: Sequence[Section]) -> Section | None:
    """The first of ``sections`` (a page's outline) whose heading ``link``'s fragment names, or None."""
    if link.fragment is None:
        return None
    return next((section for section in sections if names(link, section.text)), None)


def fragment_for(link: Link, heading: str) -> str:
    """The fragment (without ``#``) that makes ``link`` name ``heading``, in the link's own form."""
    if link.kind == "wikilink":
        return normalize_heading(_NOT_WIKI.sub(" ", heading))
    old = unquote(link.fragment or "", errors="replace")
    if old and slug(old) != old:  # the old fragment named its heading by text, not by slug
        return quote(normalize_heading(heading), safe="")
    return slug(heading)
