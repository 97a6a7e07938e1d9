"""The heading tree of a page and the section ops.

Headings are ATX (``#`` to ``######``; the closing ``#``s are dropped and the text trimmed) and setext
(text lines underlined by ``===`` or ``---``), at the top level of the page: never inside code blocks,
HTML blocks or the front matter, and headings nested in block quotes or lists are not section boundaries.
A heading's text has its inner runs of blanks made one space.

A **section** is its heading line(s) through the line before the next heading of the same or a higher
level (or the end of the page), subsections included; its **body** is everything after the heading
line(s). Its **version** is the git blob id of the section's exact text encoded as UTF-8.

A section is **addressed** by a ``heading`` string, whose blanks are normalised like heading texts:

1. every section whose text equals it; and, when it holds ``>``,
2. every section whose chain of ancestor texts ends with the ``>``-separated parts (``"B > C"`` finds
   the ``C`` under ``B`` under ``A``; ``"A > B > C"`` too).

One section found: that one. None: when the string ends with `` [n]`` (``"Notes [2]"``), the n-th (from
1, in page order) of the sections the string without it finds; else ``SECTION_NOT_FOUND`` naming the
closest headings. Several: ``SECTION_AMBIGUOUS`` listing an address of each. ``Section.address`` is
always an address that finds exactly that section (its shortest unique tail of ancestors, or a full path
with `` [n]`` when two sections have the same full path).

The ops return the page's new text; every byte outside the lines they change is kept. Line breaks they
add (after a heading at the end of the page, after content that does not end with one) copy the page's
own line ending (that of the addressed heading line, else the page's first, else ``\\n``); ``content``
is written as given. Each op edits a section ``locate`` found: ``locate`` takes the failing edit's
``index`` (carried by every error, the op's too) and an optional ``expected_section_version``
(``VERSION_MISMATCH`` when the addressed section's version differs).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any

from worker.engine.markdown.document import Document, line_ending, normalize_heading, parse, strip_ending
from worker.errors import BatchRejected

_ORDINAL = re.compile(r"(.*?)\s*\[([1-9][0-9]*)\]")
_ATX = re.compile(r"( {0,3})(#{1,6})([ \t]+|$)(.*?)((?:[ \t]+#+)?[ \t]*)")


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what ``git hash-object`` prints): a page's or a section's version."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Section:
    """One section: ``start``/``body_start``/``end`` are 0-based lines (``end`` exclusive)."""

    level: int
    text: str
    path: tuple[str, ...]
    address: str
    start: int
    body_start: int
    end: int
    version: str

    def to_dict(self) -> dict[str, Any]:
        """The read API's form: 1-based ``line`` and inclusive ``end_line``."""
        return {
            "level": self.level,
            "heading": self.text,
            "path": " > ".join(self.path),
            "address": self.address,
            "line": self.start + 1,
            "end_line": self.end,
            "version": self.version,
        }


def outline(text: str) -> list[Section]:
    """Every section of the page, in page order (the heading tree: ``path`` names the ancestors)."""
    return _sections(parse(text))


def _sections(doc: Document) -> list[Section]:
    drafts: list[tuple[int, str, tuple[str, ...], int, int]] = []
    ends: list[int] = [len(doc.lines)] * len(doc.headings)
    open_sections: list[int] = []  # the sections still running, by index into drafts, outermost first
    for number, heading in enumerate(doc.headings):
        while open_sections and drafts[open_sections[-1]][0] >= heading.level:
            ends[open_sections.pop()] = heading.start
        parent = drafts[open_sections[-1]][2] if open_sections else ()
        drafts.append((heading.level, heading.text, (*parent, heading.text), heading.start, heading.end))
        open_sections.append(number)
    sections = [
        Section(level, text, path, "", start, body, end, blob_id(doc.span_text(start, end).encode()))
        for (level, text, path, start, body), end in zip(drafts, ends, strict=True)
    ]
    lookup = _Lookup(sections)
    return [replace(section, address=_address(section, lookup)) for section in sections]


def _address(section: Section, lookup: _Lookup) -> str:
    for size in range(1, len(section.path) + 1):
        address = " > ".join(section.path[-size:])
        if lookup.matching(address) == [section]:
            return address
    full = " > ".join(section.path)
    return f"{full} [{lookup.position(full, section) + 1}]"


class _Lookup:
    """The sections by text and by every tail of their path, so that addressing every section of a
    page costs time linear in the page (answers are kept: many sections may share one heading)."""

    def __init__(self, sections: list[Section]) -> None:
        self.order = {id(section): number for number, section in enumerate(sections)}
        self.by_text: dict[str, list[Section]] = {}
        self.by_tail: dict[tuple[str, ...], list[Section]] = {}
        self.answers: dict[str, list[Section]] = {}
        self.positions: dict[str, dict[int, int]] = {}
        for section in sections:
            self.by_text.setdefault(section.text, []).append(section)
            for size in range(1, len(section.path) + 1):
                self.by_tail.setdefault(section.path[-size:], []).append(section)

    def matching(self, address: str) -> list[Section]:
        """The sections ``address`` finds (rules 1 and 2 of the module docstring), in page order."""
        wanted = normalize_heading(address)
        if wanted not in self.answers:
            found = {id(section): section for section in self.by_text.get(wanted, ())}
            if ">" in wanted:
                parts = tuple(normalize_heading(part) for part in wanted.split(">"))
                if all(parts):
                    found.update({id(section): section for section in self.by_tail.get(parts, ())})
            self.answers[wanted] = sorted(found.values(), key=lambda section: self.order[id(section)])
        return self.answers[wanted]

    def position(self, address: str, section: Section) -> int:
        """Where ``section`` is among the sections ``address`` finds."""
        if address not in self.positions:
            self.positions[address] = {id(s): n for n, s in enumerate(self.matching(address))}
        return self.positions[address][id(section)]


def find_section(text: str, heading: str, index: int | None = None) -> Section:
    """The section ``heading`` addresses in ``text``, or ``SECTION_NOT_FOUND`` / ``SECTION_AMBIGUOUS``."""
    return _find(_sections(parse(text)), heading, index)


def _find(sections: list[Section], heading: str, index: int | None) -> Section:
    lookup = _Lookup(sections)
    found = lookup.matching(heading)
    if not found:
        ordinal = _ORDINAL.fullmatch(normalize_heading(heading))
        if ordinal is not None:
            among = lookup.matching(ordinal.group(1))
            number = int(ordinal.group(2))
            if number <= len(among):
                return among[number - 1]
    if len(found) == 1:
        return found[0]
    if found:
        addresses = ", ".join(repr(section.address) for section in found)
        raise BatchRejected(
            "SECTION_AMBIGUOUS",
            f"heading {heading!r} matches {len(found)} sections; address one of: {addresses}",
            index,
        )
    raise BatchRejected("SECTION_NOT_FOUND", _not_found(sections, heading), index)


def _not_found(sections: list[Section], heading: str) -> str:
    if not sections:
        return f"no heading {heading!r}: the page has no headings (headings inside code do not count)"
    names = {section.address: section for section in sections}
    names.update({" > ".join(section.path): section for section in sections})
    wanted = normalize_heading(heading)
    close = difflib.get_close_matches(wanted, list(names), n=3, cutoff=0.5)
    close += [name for name in names if name.lower() == wanted.lower() and name not in close]
    if not close:
        close = [section.address for section in sections[:5]]
        return f"no heading {heading!r}; the page's headings include: " + ", ".join(map(repr, close))
    return f"no heading {heading!r}; the closest are: " + ", ".join(map(repr, close[:3]))


@dataclass(frozen=True)
class Located:
    """The section an address found in a page (``locate``): the parsed page, the section, and the index
    of the edit that addressed it (every refusal of an op on it names that edit)."""

    doc: Document
    section: Section
    index: int | None = None


def locate(
    text: str, heading: str, *, index: int | None = None, expected_section_version: str | None = None
) -> Located:
    """The section ``heading`` addresses in ``text`` (``SECTION_NOT_FOUND``, ``SECTION_AMBIGUOUS``), for an
    op to edit; ``VERSION_MISMATCH`` when ``expected_section_version`` is given and is not its version."""
    doc = parse(text)
    section = _find(_sections(doc), heading, index)
    if expected_section_version is not None and expected_section_version != section.version:
        raise BatchRejected(
            "VERSION_MISMATCH",
            f"section {section.address!r} changed since you read it (expected {expected_section_version},"
            f" now {section.version}); read the page's sections again (?sections=true)",
            index,
        )
    return Located(doc, section, index)


def _newline(doc: Document, section: Section) -> str:
    for line in (doc.lines[section.start], *doc.lines):
        ending = line_ending(line)
        if ending:
            return ending
    return "\n"


def _ended(text: str, newline: str) -> str:
    """``text`` with a line break at its end unless it is empty or has one."""
    return text if not text or text.endswith(("\n", "\r")) else text + newline


def _is_blank(line: str) -> bool:
    return not line.strip()


def _content_end(doc: Document, section: Section) -> int:
    """The line where the blank lines that end ``section`` begin (its end when none do); never before its
    body."""
    end = section.end
    while end > section.body_start and _is_blank(doc.lines[end - 1]):
        end -= 1
    return end


def replace_section(at: Located, content: str) -> str:
    """The page with the located section's body (subsections included) replaced by ``content``; the
    heading line stays. A line break follows ``content`` when more of the page follows."""
    doc, section = at.doc, at.section
    newline = _newline(doc, section)
    head = doc.span_text(0, section.body_start)
    if content:
        head = _ended(head, newline)
    body = _ended(content, newline) if section.end < len(doc.lines) else content
    return head + body + doc.span_text(section.end, len(doc.lines))


def append_section(at: Located, content: str) -> str:
    """The page with ``content`` added at the end of the located section, after its subsections and
    before the blank lines that end it (those stay between it and the next heading). A line break is put
    before ``content`` when the line it follows has none, and after it when more of the page follows."""
    doc, section = at.doc, at.section
    if not content:
        return doc.text
    newline = _newline(doc, section)
    end = _content_end(doc, section)
    before = _ended(doc.span_text(0, end), newline)
    piece = _ended(content, newline) if end < len(doc.lines) else content
    return before + piece + doc.span_text(end, len(doc.lines))


def insert_section_after(at: Located, new_heading: str, level: int, content: str) -> str:
    """The page with a new section (``"#" * level + " " + new_heading``, then ``content``) right after the
    whole located section, subsections included. The blank lines that ended the located section end the
    new one too, so the page keeps its spacing."""
    doc, section = at.doc, at.section
    _check_new_heading(new_heading, level, at.index)
    newline = _newline(doc, section)
    blanks = _content_end(doc, section)
    trailing = "".join(strip_ending(line) + newline for line in doc.lines[blanks : section.end])
    new = "#" * level + " " + new_heading.strip() + newline + content
    if trailing or section.end < len(doc.lines):
        new = _ended(new, newline) + trailing
    before = _ended(doc.span_text(0, section.end), newline)
    return before + new + doc.span_text(section.end, len(doc.lines))


def remove_section(at: Located) -> str:
    """The page without the located section: its heading line(s), body and subsections."""
    doc, section = at.doc, at.section
    return doc.span_text(0, section.start) + doc.span_text(section.end, len(doc.lines))


def rename_section(at: Located, new_heading: str) -> str:
    """The page with the located heading's text replaced by ``new_heading``, keeping its level and style
    (ATX markers and closing sequence, or the setext underline)."""
    doc, section, index = at.doc, at.section, at.index
    _check_single_line(new_heading, index)
    lines = list(doc.lines)
    first = lines[section.start]
    if section.body_start - section.start == 1:
        atx = _ATX.fullmatch(strip_ending(first))
        assert atx is not None, first
        indent, marks, space, _, closing = atx.groups()
        lines[section.start] = (
            indent + marks + (space or " ") + new_heading.strip() + closing + line_ending(first)
        )
    else:
        last_text = lines[section.body_start - 2]
        indent = first[: len(first) - len(first.lstrip(" \t"))]
        lines[section.start : section.body_start - 1] = [
            indent + new_heading.strip() + line_ending(last_text)
        ]
    renamed = "".join(lines)
    heads = parse(renamed).headings
    if not any(
        h.start == section.start and h.level == section.level and h.text == normalize_heading(new_heading)
        for h in heads
    ):
        raise BatchRejected(
            "INVALID_BATCH",
            f"new_heading {new_heading!r} would not read back as that heading (markdown syntax in it?)",
            index,
        )
    return renamed


def _check_single_line(new_heading: str, index: int | None) -> None:
    if not new_heading.strip() or any(char in new_heading for char in "\r\n"):
        raise BatchRejected("INVALID_BATCH", "new_heading must be one non-empty line of text", index)


def _check_new_heading(new_heading: str, level: int, index: int | None) -> None:
    _check_single_line(new_heading, index)
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 6:
        raise BatchRejected("INVALID_BATCH", f"level must be 1 to 6, not {level!r}", index)
    heads = parse("#" * level + " " + new_heading.strip() + "\n").headings
    if len(heads) != 1 or heads[0].text != normalize_heading(new_heading):
        raise BatchRejected(
            "INVALID_BATCH",
            f"new_heading {new_heading!r} would not read back as a heading (markdown syntax in it?)",
            index,
        )


@dataclass(frozen=True)
class Extraction:
    """A section cut out of its page (``extract``): ``section`` and ``moved`` (it and its subsections)
    as they were in the page; ``page`` the new page's text; ``rest`` the page without the section, and
    ``link_at`` the offsets of the link line put in its place (None without one)."""

    section: Section
    moved: tuple[Section, ...]
    page: str
    rest: str
    link_at: tuple[int, int] | None


def extract(at: Located, title: str | None, link: str | None) -> Extraction:
    """Cut the located section out of its page. The new page is ``# <title>`` (default: the heading's
    text) then the section's body without its trailing blank lines, each subsection heading (ATX) raised
    so that its depth below the title is its depth below the section's heading. The rest is the page
    without the section's lines; with ``link`` (a line's text), that line and the section's trailing blank
    lines take its place."""
    doc, section = at.doc, at.section
    title = section.text if title is None else title
    _check_new_heading(title, 1, at.index)
    newline = _newline(doc, section)
    moved = tuple(s for s in _sections(doc) if section.start <= s.start < section.end)
    end = _content_end(doc, section)
    lines = list(doc.lines[section.body_start : end])
    for sub in moved[1:]:
        if sub.body_start - sub.start == 1 and section.level > 1:
            line = lines[sub.start - section.body_start]
            atx = _ATX.fullmatch(strip_ending(line))
            assert atx is not None, line
            indent, _, space, words, closing = atx.groups()
            level = sub.level - section.level + 1
            lines[sub.start - section.body_start] = (
                indent + "#" * level + space + words + closing + line_ending(line)
            )
    page = _ended("# " + title.strip() + newline + "".join(lines), newline)
    head = doc.span_text(0, section.start)
    tail = doc.span_text(section.end, len(doc.lines))
    if link is None:
        return Extraction(section, moved, page, head + tail, None)
    head = _ended(head, newline)
    placed = link + newline
    trailing = doc.span_text(end, section.end)
    rest = head + placed + trailing + tail
    return Extraction(section, moved, page, rest, (len(head), len(head) + len(placed)))


def merged_part(text: str, demote: bool) -> str:
    """The page ``text`` as one part of a merged page: without its front matter and its leading and
    trailing blank lines, ending with a line break; with ``demote``, each heading one level deeper (at
    most 6; a setext heading becomes an ATX one, since setext has only two levels). Code is never
    touched: headings in code are not headings."""
    doc = parse(text)
    lines = list(doc.lines)
    if demote:
        for heading in reversed(doc.headings):  # from the end: a setext heading shrinks to one line
            level = min(heading.level + 1, 6)
            first = lines[heading.start]
            newline = line_ending(lines[heading.end - 1]) or "\n"
            if heading.setext:
                indent = first[: len(first) - len(first.lstrip(" \t"))]
                lines[heading.start : heading.end] = [indent + "#" * level + " " + heading.text + newline]
                continue
            atx = _ATX.fullmatch(strip_ending(first))
            assert atx is not None, first
            indent, _, space, words, closing = atx.groups()
            lines[heading.start] = (
                indent + "#" * level + (space or " ") + words + closing + line_ending(first)
            )
    start = doc.front_matter[1] if doc.front_matter else 0
    end = len(lines)
    while start < end and _is_blank(lines[start]):
        start += 1
    while end > start and _is_blank(lines[end - 1]):
        end -= 1
    body = "".join(lines[start:end])
    return body if not body or line_ending(body) else body + "\n"
