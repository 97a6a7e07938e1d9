"""Every link to one page, over a whole tree: the backlinks read (contract section 7), pure.

``find_backlinks(head, target, cache)`` looks only at the pages ``HeadView.mentioning`` names for the
target's name (``mentions.link_needles``: a superset of the pages that can link to it), reads the links
outside code of each UTF-8 ``.md`` page (``markdown.find_links``; the pages not in ``cache`` are read in one
``read_many``) and keeps those that resolve to ``target`` (``markdown.resolve``) from the page they are in.
``cache`` keeps parsed links by page version: a version names exact bytes, so it never goes stale.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from worker.engine.markdown import Link, find_links, resolve_target
from worker.engine.mentions import is_page, link_needles
from worker.engine.plan import HeadView

READ_AT_ONCE = 512  # pages read in one read_many


class Found(NamedTuple):
    """A link to the target: the linking page, its version, the link's 1-based line and source text."""

    path: str
    version: str
    line: int
    text: str


class LinkCache(Protocol):
    """Parsed page links by page version."""

    def get(self, version: str) -> list[Link] | None:
        """The links of the page with this version, if known."""

    def put(self, version: str, links: list[Link]) -> None:
        """Remember the links of the page with this version."""


class _NoCache:
    def get(self, version: str) -> list[Link] | None:
        return None

    def put(self, version: str, links: list[Link]) -> None:
        return None


def parse_links(data: bytes) -> list[Link]:
    """The page links of a page's bytes (none when they are not UTF-8)."""
    try:
        return [link for link in find_links(data.decode("utf-8")) if link.is_page_link]
    except UnicodeDecodeError:
        return []


def find_backlinks(head: HeadView, target: str, cache: LinkCache | None = None) -> list[Found]:
    """Every link in the tree that resolves to ``target``, by linking page then position."""
    cache = cache if cache is not None else _NoCache()
    files = head.file_index()
    needles = link_needles([target])
    mentioned = head.mentioning(needles) if needles is not None else None
    pages = sorted(p for p in (files.files if mentioned is None else mentioned) if is_page(p) and p in files)
    versions = {page: head.version(page) or "" for page in pages}
    links: dict[str, list[Link]] = {}
    missing = []
    for page in pages:
        known = cache.get(versions[page])
        if known is None:
            missing.append(page)
        else:
            links[page] = known
    for start in range(0, len(missing), READ_AT_ONCE):
        for page, data in head.read_many(missing[start : start + READ_AT_ONCE]).items():
            links[page] = parse_links(data)
            cache.put(versions[page], links[page])
    return [
        Found(page, versions[page], link.line, link.text)
        for page in pages
        for link in links[page]
        if resolve_target(link, page, files).path == target
    ]
