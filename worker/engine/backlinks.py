"""Every link to one page, over a whole tree: the backlinks read (contract section 7), pure.

``find_backlinks(head, target, index, links_of)`` looks only at the pages ``HeadView.mentioning`` names for
the target's name (``mentions.link_needles``: a superset of the pages that can link to it), reads each
UTF-8 ``.md`` page's links outside code (``markdown.find_links``) and keeps those that resolve to
``target`` (``markdown.resolve``) from the page they are in. Callers may pass a prepared ``FileIndex`` of
the tree and a ``links_of(path, version)`` that caches parsed links by version (a version names exact
bytes, so such a cache never goes stale).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from worker.engine.markdown import FileIndex, Link, find_links, resolve_target
from worker.engine.mentions import is_page, link_needles
from worker.engine.state import HeadView

LinksOf = Callable[[str, str], list[Link]]


class Found(NamedTuple):
    """A link to the target: the linking page, its version, the link's 1-based line and source text."""

    path: str
    version: str
    line: int
    text: str


def page_links(head: HeadView, path: str) -> list[Link]:
    """The links of the page at ``path`` (none when it is not UTF-8)."""
    try:
        return find_links(head.read(path).decode("utf-8"))
    except UnicodeDecodeError:
        return []


def find_backlinks(
    head: HeadView,
    target: str,
    index: FileIndex | None = None,
    links_of: LinksOf | None = None,
) -> list[Found]:
    """Every link in the tree that resolves to ``target``, by linking page then position."""
    files = index if index is not None else FileIndex(head.paths())
    needles = link_needles([target])
    mentioned = head.mentioning(needles) if needles is not None else None
    pages = sorted(p for p in (files.files if mentioned is None else mentioned) if is_page(p) and p in files)
    found: list[Found] = []
    for page in pages:
        version = head.version(page)
        if version is None:
            continue
        links = links_of(page, version) if links_of is not None else page_links(head, page)
        for link in links:
            if link.is_page_link and resolve_target(link, page, files).path == target:
                found.append(Found(page, version, link.line, link.text))
    return found
