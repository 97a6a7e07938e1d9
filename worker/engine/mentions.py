"""Which pages could hold a link to a given file: the needles a cheap text search needs.

A link that resolves to a file spells the file's name (``links`` rule: a wikilink names it, with or
without ``.md``; a markdown link's path ends with it), possibly in another letter case (resolution also
tries ignoring case), with percent-escapes (markdown destinations are percent-decoded), or with backslash
escapes before ASCII punctuation. So every such page contains, ignoring ASCII case:

- the longest run of ASCII letters and digits of the file's name without ``.md`` (no escape can split
  it: backslashes only escape punctuation), or
- a ``%`` (a percent-escape could spell anything), or
- one of the two characters whose lower case is ASCII (``İ``, the Kelvin sign ``K``), which the
  case-folding resolution would read as ASCII letters.

``link_needles`` gives those needles for a set of files, for ``HeadView.mentioning`` (``git grep -F -i``
on a repository): a superset of the pages to look at, never fewer. A name without ASCII letters or digits
gives no needle (None: look at every page).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RUN = re.compile(r"[A-Za-z0-9]+")
ALWAYS = ("%", "\u0130", "\u212a")
MAX_NEEDLES = 512  # beyond this many names a search is no cheaper than reading every page


def name_stem(path: str) -> str:
    """The file name of ``path`` without a final ``.md`` (any case)."""
    name = path.rsplit("/", 1)[-1]
    return name[:-3] if name.lower().endswith(".md") else name


def link_needles(paths: Iterable[str]) -> list[str] | None:
    """Needles such that any page holding a link to one of ``paths`` contains one of them (ASCII case
    ignored), or None when some name has no ASCII letter or digit (then every page must be read)."""
    needles: set[str] = set(ALWAYS)
    for path in paths:
        runs = _RUN.findall(name_stem(path))
        if not runs:
            return None
        needles.add(max(runs, key=len).lower())
        if len(needles) > MAX_NEEDLES:
            return None
    return sorted(needles)


def is_page(path: str) -> bool:
    """True for a markdown page (``.md``, any case): the only files links are read in."""
    return path.lower().endswith(".md")
