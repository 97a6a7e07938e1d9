"""Backlinks of a page: every link to it in the wiki at the head (``engine.backlinks``), cached by content.

From the repository's link index when it holds one (``worker.git.linkindex``: on disk, kept at the head,
so a new process answers without parsing the linking pages); otherwise as follows.

Caches per process, all keyed by git ids, so they never go stale: the file index of a tree (by tree id,
``Snapshot.file_index``), the parsed links of a page (by blob id, shared by every commit that holds the
same bytes; bounded by the number of links kept), and whole answers (by commit and path). The pages to
parse are found with ``git grep`` for the page's name (``HeadView.mentioning``), so a backlinks read costs
one grep of the tree plus the parsing of the pages that mention the name, the first time.
"""

from __future__ import annotations

import base64
import json

from worker.engine.backlinks import find_backlinks
from worker.engine.markdown import Link
from worker.engine.paths import path_problem
from worker.errors import BatchRejected
from worker.git.linkindex import link_index
from worker.git.snapshot import Snapshot
from worker.lru import Lru
from worker.schema.answers import Backlink, BacklinkList
from worker.service.caller import Principal
from worker.service.reads import Reads, decode_cursor, in_thread, view

LINKS = 400_000  # parsed links kept, all pages together
ANSWERS = 256  # whole answers kept, by commit, path and limit


class LinkReads:
    """The backlinks read, with its caches (one per service)."""

    def __init__(self, reads: Reads) -> None:
        self.reads = reads
        self.links: Lru[object] = Lru(LINKS, lambda value: 1 + len(value) if isinstance(value, list) else 1)
        self.answers: Lru[object] = Lru(ANSWERS)

    async def backlinks(
        self, caller: Principal, wiki: str, path: str, limit: int = 1000, cursor: str | None = None
    ) -> BacklinkList:
        """Every link (outside code) at the head that resolves to ``path``, by linking page then line;
        ``limit`` at a time after ``cursor`` (``truncated`` and ``next_cursor`` when there are more)."""
        problem = path_problem(path)
        if problem is not None:
            raise BatchRejected("INVALID_PATH", f"{problem}: {path[:200]!r}")
        after = decode_backlinks_cursor(cursor)
        at = await self.reads.at(caller, wiki)
        return await in_thread(
            lambda: self.collect(view(at.repo, at.commit), path, limit, after), self.reads.settings.costs
        )

    def collect(
        self, snapshot: Snapshot, path: str, limit: int, after: tuple[str, int, int] | None = None
    ) -> BacklinkList:
        """The backlinks answer for ``path`` in ``snapshot`` (the head; blocking), resuming ``after``."""
        version = snapshot.version(path)
        if version is None:
            raise BatchRejected("NOT_FOUND", f"no file {path[:200]!r} at the head; find it with list_pages")
        key = f"{snapshot.commit}\x00{path}\x00{limit}\x00{after}"
        known = self.answers.get(key)
        if isinstance(known, BacklinkList):
            return known
        links = link_index(snapshot.repo).backlinks(snapshot, path)
        if links is None:  # no link index yet: parse the pages that mention the name
            links = find_backlinks(snapshot, path, self)
        found = [Backlink(path=f.path, line=f.line, text=f.text, version=f.version) for f in links]
        rest = _resumed(found, after)
        page = rest[:limit]
        answer = BacklinkList(
            path=path, version=version, commit=snapshot.commit, backlinks=page, truncated=len(rest) > limit
        )
        if len(rest) > limit:
            answer.next_cursor = encode_backlinks_cursor(page, after)
        self.answers.put(key, answer)
        return answer

    def get(self, version: str) -> list[Link] | None:
        """The parsed links of the page with ``version``, if kept (``engine.backlinks.LinkCache``)."""
        found = self.links.get(version)
        return found if isinstance(found, list) else None

    def put(self, version: str, links: list[Link]) -> None:
        """Keep the parsed links of the page with ``version``."""
        self.links.put(version, links)


def _resumed(found: list[Backlink], after: tuple[str, int, int] | None) -> list[Backlink]:
    """The links of ``found`` (by page, then line) after the cursor position ``after``: past its
    ``(path, line)``, or on that line from its ``n``-th link on."""
    if after is None:
        return found
    path, line, n = after
    out = []
    seen = 0
    for link in found:
        if (link.path, link.line) == (path, line):
            seen += 1
            if seen > n:
                out.append(link)
        elif (link.path, link.line) > (path, line):
            out.append(link)
    return out


def encode_backlinks_cursor(page: list[Backlink], after: tuple[str, int, int] | None) -> str:
    """The cursor resuming after the last link of ``page`` (answered after the cursor position
    ``after``): its path, line, and how many links of that line were answered so far."""
    last = page[-1]
    n = sum(1 for link in page if (link.path, link.line) == (last.path, last.line))
    if after is not None and after[:2] == (last.path, last.line):
        n += after[2]
    return base64.urlsafe_b64encode(json.dumps([last.path, last.line, n]).encode()).decode()


def decode_backlinks_cursor(cursor: str | None) -> tuple[str, int, int] | None:
    """The ``(path, line, n)`` a backlinks cursor resumes after; ``INVALID_BATCH`` for one that is not
    base64url. A made-up base64url cursor resumes after the path its text names (like a listing's)."""
    if not cursor:
        return None
    text = decode_cursor(cursor)
    try:
        path, line, n = json.loads(text)
        if isinstance(path, str) and isinstance(line, int) and isinstance(n, int):
            return path, line, n
    except (ValueError, TypeError):
        pass
    return text, 0, 0
