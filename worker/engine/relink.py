"""Rewriting links across the wiki (contract section 7): the page walk every link-aware op shares, and the
``retarget_links`` op.

``rewrite_everywhere`` runs one page rewrite (a ``markdown.repoint_links`` call, through a closure) over
every page that may hold an affected link, as the batch left it so far: the pages the batch changed
before, the pages it names, and the head pages that mention one of the named files (``HeadView.mentioning``
with ``mentions.link_needles``). Only UTF-8 ``.md`` pages are read. A page where the zone policy forbids
in-place changes (``raw/``, create-only) is never changed: it is reported as a ``NOT_REWRITTEN`` warning
instead. ``applied`` gets one ``{"op": "rewrite_links", "path", "version", "count"}`` entry per rewritten
page, in path order. rename's ``rewrite_links``, delete's ``redirect_links_to``, ``retarget_links`` and
``extract_section`` and rename_section's ``rewrite_links`` (``follow_renamed_section``) all walk the wiki
through it.

``retarget_links {from, to}``: every link that points to ``from`` is repointed to ``to``. ``from`` is a
page (every link to it, not the same-page links inside it) or ``page#heading`` (a link to that page whose
fragment names that heading by ``markdown.anchors``' rule, same-page links in that page included). Each
link's target is respelled in its own form where it no longer resolves there; its fragment is replaced by
``to``'s heading, removed when ``to`` names none but ``from`` did, kept when neither names a heading.
Both pages must exist at that point of the batch (``NOT_FOUND``), and a named heading must be a section
of its page (``SECTION_NOT_FOUND`` / ``SECTION_AMBIGUOUS``); ``to``'s heading must be the first of its
page with its text, since a link names the first (``SECTION_AMBIGUOUS`` otherwise). No link to ``from``
at all is no error: the edit then changes nothing and adds no ``applied`` entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from worker.engine.markdown import Link, outline
from worker.engine.markdown.anchors import named_section, same_heading
from worker.engine.markdown.rewrite import Aim, repoint_links
from worker.engine.markdown.sections import Section, find_section
from worker.engine.mentions import is_page, link_needles
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import RetargetLinks, split_anchor

PREFETCH = 512  # head pages read in one go

# (a page's path now, its text) -> its new text and how many links changed
PageRewrite = Callable[[str, str], tuple[str, int]]


def retarget_links(work: BatchState, index: int, edit: RetargetLinks) -> None:
    """Apply a retarget_links edit (see the module docstring)."""
    source, source_heading = split_anchor(edit.source)
    target, target_heading = split_anchor(edit.to)
    moved = _section(work, index, source, source_heading, "from")
    aimed = _section(work, index, target, target_heading, "to")
    if aimed is not None and first_named(_text(work, index, target), aimed) != aimed:
        raise BatchRejected(
            "SECTION_AMBIGUOUS",
            f"to {edit.to!r}: an earlier heading of {target!r} has the same text, and a link names the first;"
            " rename one of them first",
            index,
        )
    wanted = Aim(target, None if aimed is None else aimed.text, keep=aimed is None and moved is None)
    sections = outline(_text(work, index, source)) if moved is not None else []
    files = work.index()

    def aim(link: Link, old: str) -> Aim | None:
        if old != source:
            return None
        if moved is None:  # the page: its own same-page links stay where they are
            return wanted if link.target else None
        return wanted if named_section(link, sections) == moved else None

    def rewrite(page: str, text: str) -> tuple[str, int]:
        return repoint_links(page, text, aim, files, files, max_size=work.limits.max_file_bytes)

    rewrite_everywhere(work, index, [source], [source], rewrite, f"point to {edit.source!r}")


def follow_renamed_section(work: BatchState, index: int, page: str, before: str, heading: str) -> None:
    """After ``rename_section`` with ``rewrite_links``: every link that named the section in ``before``
    (the page's text before the rename, ``heading`` its address there) names its new heading, in every
    page, the page's own same-page links included. ``SECTION_AMBIGUOUS`` when an earlier heading of the
    page has the new text (a link would name that one)."""
    sections = outline(before)
    moved = find_section(before, heading, index)
    after = _text(work, index, page)
    renamed = next(section for section in outline(after) if section.start == moved.start)
    if first_named(after, renamed) != renamed:
        raise BatchRejected(
            "SECTION_AMBIGUOUS",
            f"new_heading {renamed.text!r}: an earlier heading of {page!r} has the same text, so a link "
            "would name that one; choose another heading, or leave rewrite_links out",
            index,
        )
    wanted = Aim(page, renamed.text, keep=False)
    files = work.index()

    def aim(link: Link, old: str) -> Aim | None:
        return wanted if old == page and named_section(link, sections) == moved else None

    def rewrite(path: str, text: str) -> tuple[str, int]:
        return repoint_links(path, text, aim, files, files, max_size=work.limits.max_file_bytes)

    rewrite_everywhere(work, index, [page], [page], rewrite, f"point to {page}#{moved.text}")


def first_named(text: str, section: Section) -> Section | None:
    """The first section of the page ``text`` that a link to ``section``'s heading names."""
    return next((s for s in outline(text) if same_heading(s.text, section.text)), None)


def _section(work: BatchState, index: int, path: str, heading: str | None, field: str) -> Section | None:
    """The section ``heading`` addresses in the page at ``path`` (None without a heading); the page must
    exist (``NOT_FOUND``)."""
    if work.current(path) is None:
        raise BatchRejected(
            "NOT_FOUND", f"{field} page {path!r} does not exist at this point of the batch", index
        )
    if heading is None:
        return None
    return find_section(_text(work, index, path), heading, index)


def _text(work: BatchState, index: int, path: str) -> str:
    file = work.current(path)
    assert file is not None
    return work.text(index, path, file)


def rewrite_everywhere(
    work: BatchState,
    index: int,
    names: Iterable[str],
    also: Iterable[str],
    rewrite: PageRewrite,
    why: str,
    skip: Iterable[str] = (),
) -> None:
    """Run ``rewrite`` on every page that may link to one of the files ``names`` (see the module
    docstring), ``also`` included and ``skip`` left out; ``why`` ends the NOT_REWRITTEN warning's "N
    link(s) in P ..."."""
    left_out = set(skip)
    pages = sorted(p for p in _candidates(work, names, also) if is_page(p) and p not in left_out)
    for start in range(0, len(pages), PREFETCH):
        chunk = pages[start : start + PREFETCH]
        work.prefetch(chunk)
        for page in chunk:
            _rewrite_page(work, index, page, rewrite, why)
        work.forget()


def _rewrite_page(work: BatchState, index: int, page: str, rewrite: PageRewrite, why: str) -> None:
    work.rewrite_page(
        index,
        "rewrite_links",
        page,
        rewrite,
        lambda page, count: (
            f"{count} link(s) in {page!r} {why}, but this zone allows no in-place change "
            "(raw/ is create-only): they are left as they are"
        ),
    )


def _candidates(work: BatchState, names: Iterable[str], also: Iterable[str]) -> set[str]:
    """``also``, the pages the batch changed before, and the head pages that mention a name of ``names``."""
    found = set(also)
    found |= {path for path, file in work.state.items() if file is not None}
    needles = link_needles(names)
    mentioned = work.head.mentioning(needles) if needles is not None else None
    heads = work.head.file_index().files if mentioned is None else mentioned
    found |= {path for path in heads if path not in work.state}
    return found
