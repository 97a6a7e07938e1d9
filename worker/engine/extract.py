"""``extract_section``: a section, with its subsections, becomes a new page, and the links follow it.

The section is addressed as the section ops address it, with their version rule (``expected_version`` of
the page or ``expected_section_version``; one is required unless the batch created the page). ``new_path``
must not exist (``PATH_EXISTS``) and is checked as a create's path. The new page is ``# <title>`` (default:
the heading's text) then the section's body, its subsection headings raised so they keep their depth below
the title (``markdown.sections.extract``). The section leaves the source page; with ``leave_link`` a line
``[[<new page>]]`` (the shortest wikilink that resolves to it) takes its place.

Then the links follow, by ``markdown.anchors``' rule of which heading a fragment names (the first heading
of the page with that text or slug):

- a link anywhere (same-page links of the source included) whose fragment names the extracted heading
  points to the new page, without a fragment; one naming a heading of a moved subsection points to the
  new page with its fragment as written;
- inside the extracted text, relative markdown links are fixed for the new folder, and same-page links to
  headings that stayed become links to the source page;
- every other link resolves where it did (one the new page made ambiguous is respelled). Block references
  (``#^id``) keep pointing to the source page. Code and raw/ pages never change (``NOT_REWRITTEN``).

``applied``: ``{"op": "extract_section", "path", "new_path", "version"}`` (the source's new version), then
``{"op": "create", "path": new_path, "version"}``, then one ``rewrite_links`` entry per other page whose
links changed, in path order.
"""

from __future__ import annotations

from worker.engine.inplace import check_section_versions, section_guard
from worker.engine.markdown import Link, outline
from worker.engine.markdown.anchors import named_section
from worker.engine.markdown.rewrite import Aim, repoint_links, shortest_wikilink
from worker.engine.markdown.sections import extract, locate
from worker.engine.relink import rewrite_everywhere
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import ExtractSection


def extract_section(work: BatchState, index: int, edit: ExtractSection) -> None:
    """Apply an extract_section edit (see the module docstring)."""
    source, new_path = edit.path, edit.new_path
    file = check_section_versions(work, index, edit)
    if work.current(new_path) is not None:
        raise BatchRejected(
            "PATH_EXISTS", f"new_path {new_path!r} already exists; choose another path", index
        )
    text = work.text(index, source, file)
    before = work.index()
    after = before.changed(added=[new_path])
    link = None
    if edit.leave_link:
        spelling = shortest_wikilink(new_path, after)
        if spelling is None:
            raise BatchRejected(
                "INVALID_BATCH", f"no wikilink can name {new_path!r}; drop leave_link or choose a path", index
            )
        link = f"[[{spelling}]]"
    with section_guard(work, edit, text, index):
        at = locate(text, edit.heading, index=index, expected_section_version=edit.expected_section_version)
        cut = extract(at, edit.title, link)
    sections = outline(text)
    moved = set(cut.moved)

    def aim(found: Link, old: str) -> Aim | None:
        if old != source:
            return Aim(old)
        named = named_section(found, sections)
        if named == cut.section:
            return Aim(new_path, None, keep=False)
        return Aim(new_path if named in moved else source)

    limit = work.limits.max_file_bytes
    rest, _ = repoint_links(
        source,
        cut.rest,
        lambda found, old: (
            None if cut.link_at and cut.link_at[0] <= found.start < cut.link_at[1] else aim(found, old)
        ),
        before,
        after,
        max_size=limit,
    )
    page, _ = repoint_links(source, cut.page, aim, before, after, page_after=new_path, max_size=limit)
    work.write(index, "extract_section", source, rest.encode("utf-8"), new_path=new_path)
    work.write(index, "create", new_path, page.encode("utf-8"))
    work.created.add(new_path)
    work.made.append(new_path)

    def rewrite(path: str, page_text: str) -> tuple[str, int]:
        return repoint_links(path, page_text, aim, before, after, max_size=limit)

    why = f"point to the section {cut.section.address!r} of {source!r}, now at {new_path!r}"
    rewrite_everywhere(work, index, [source, new_path], (), rewrite, why, skip=[source, new_path])
