"""``merge_pages``: several pages become one, and every link to them follows.

``path`` is the page they merge into. When it exists, its text is kept as it is and the pages are added
after it; when it does not, it is created as ``# <title>`` (default: the first page's first level-1
heading, else its file name) followed by them. Each page of ``pages``, in order, is added as
``markdown.sections.merged_part`` makes it: without its front matter, after a blank line, each heading
one level deeper (``headings: "demote"``, the default) or as it is (``"keep"``). Its relative markdown
links are respelled for ``path``'s folder; code is never touched. The pages are then deleted.

Links follow, in every page (``relink.rewrite_everywhere``; raw/ pages are never changed, reported
``NOT_REWRITTEN``), in the merged text too: a link to a merged page with a fragment keeps its fragment
and points to ``path`` (the heading moved along with its text); one without a fragment points to
``path#<its title>`` when the page had a level-1 heading that is the first of its text in the result,
else to ``path`` alone.

No version is needed: nothing written by anyone is lost (``path`` keeps its text, each page's text as the
check finds it moves whole). Refusals: a page or ``path`` that is not UTF-8 text is ``INVALID_ENCODING``;
a missing page ``NOT_FOUND``; ``title`` for a ``path`` that exists, ``INVALID_BATCH``; zones as ``delete``
for the pages and an in-place change for ``path``.

``applied``: ``{"op": "merge_pages", "path", "version"}``, one ``{"op": "delete", "path"}`` per page, then
a ``rewrite_links`` entry per other page whose links changed, in path order.
"""

from __future__ import annotations

import posixpath

from worker.engine.markdown import Link, outline
from worker.engine.markdown.anchors import same_heading
from worker.engine.markdown.rewrite import Aim, Aimer, repoint_links
from worker.engine.markdown.sections import merged_part
from worker.engine.plan import Applied
from worker.engine.relink import rewrite_everywhere
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import MergePages


def merge_pages(work: BatchState, index: int, edit: MergePages) -> None:
    """Apply a merge_pages edit (see the module docstring)."""
    into, pages = edit.path, list(edit.pages)
    texts = {page: work.text(index, page, work.existing(index, page)) for page in pages}
    current = work.current(into)
    if current is not None and edit.title is not None:
        raise BatchRejected(
            "INVALID_BATCH", f"{into!r} exists: title names a new page's heading; leave it out", index
        )
    titles = {page: _title(texts[page]) for page in pages}
    if current is not None:
        base = work.text(index, into, current).rstrip("\r\n") + "\n"
    else:
        first = pages[0]
        heading = edit.title or titles[first] or posixpath.splitext(posixpath.basename(first))[0]
        base = "# " + " ".join(heading.split()) + "\n"
    demote = edit.headings == "demote"
    # where each page's text lands (links are respelled within lines: the lines stay where they are)
    line = base.count("\n")
    spans: dict[str, tuple[int, int]] = {}
    layout = [base]
    for page in pages:
        part = merged_part(texts[page], demote)
        if part:
            spans[page] = (line + 1, line + 1 + part.count("\n"))
            line = spans[page][1]
            layout += ["\n", part]
    sections = outline("".join(layout))
    landing = {}  # a page's title, where a link to the page without fragment lands
    for page, title in titles.items():
        named = next((s for s in sections if title is not None and same_heading(s.text, title)), None)
        low, high = spans.get(page, (0, 0))
        if title is not None and named is not None and low <= named.start < high:
            landing[page] = title
    aim = _aimer(into, pages, landing)
    before = work.index()
    after = before.changed(removed=pages, added=[into])
    limit = work.limits.max_file_bytes

    def moved(link: Link, old: str) -> Aim | None:
        return aim(link, old) or Aim(old)  # the rest keep their target, respelled from the new place

    merged, _ = repoint_links(into, base, aim, before, after, max_size=limit)
    for page in pages:
        text, _ = repoint_links(page, texts[page], moved, before, after, page_after=into, max_size=limit)
        part = merged_part(text, demote)
        merged += "\n" + part if part else ""
        work.check_file_size(index, into, len(merged))
    data = merged.encode("utf-8")
    work.check_file_size(index, into, len(data))
    if current is None:
        work.check_zone("create", into, index)
        work.created.add(into)
        work.made.append(into)
    work.write(index, "merge_pages", into, data)
    for page in pages:
        work.put(index, page, None)
        work.applied.append(Applied(index, "delete", page, None))

    def rewrite(path: str, text: str) -> tuple[str, int]:
        return repoint_links(path, text, aim, before, after, max_size=limit)

    why = f"point to pages merged into {into!r}"
    rewrite_everywhere(work, index, pages, (), rewrite, why, skip=[into, *pages])


def _aimer(into: str, pages: list[str], landing: dict[str, str]) -> Aimer:
    """Where a link to one of ``pages`` points after the merge (see the module docstring)."""
    merged = set(pages)

    def aim(link: Link, old: str) -> Aim | None:
        if old not in merged:
            return None
        if link.fragment is not None:
            return Aim(into)  # the heading moved with its text: the fragment stays
        return Aim(into, landing.get(old), keep=False)

    return aim


def _title(text: str) -> str | None:
    """The text of the page's first level-1 heading, or None."""
    return next((section.text for section in outline(text) if section.level == 1), None)
