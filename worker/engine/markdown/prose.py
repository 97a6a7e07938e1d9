"""Prose: the text of a page that reads as text, for edits that must leave code and link targets alone.

A page's prose is the text of its paragraphs and headings (at any depth of lists and quotes) minus the
inline code spans in them and the destinations of the links in them: never fenced or indented code
blocks, HTML blocks, the front matter, link reference definitions or code spans, and never a link's
target and ``#fragment`` (``[[target#Heading|label]]``, ``[label](target.md#slug "title")``). A link's
label and title are prose. So an edit restricted to prose (a typo fixed across the wiki) never breaks a
link: moving a link's target is what ``rename``, ``retarget_links`` and ``rewrite_links`` do.
"""

from __future__ import annotations

from collections.abc import Iterator

from worker.engine.markdown.document import parse
from worker.engine.markdown.inline import code_spans, scan_links


def prose_spans(text: str) -> list[tuple[int, int]]:
    """The prose of ``text`` as sorted, disjoint ``(start, end)`` character offsets."""
    doc = parse(text)
    spans: list[tuple[int, int]] = []
    for start_line, end_line in doc.inlines:
        start = doc.offsets[start_line]
        end = doc.offsets[end_line] if end_line < len(doc.lines) else len(text)
        position = start
        for cut_start, cut_end in sorted([*code_spans(text, start, end), *_destinations(text, start, end)]):
            if cut_start > position:
                spans.append((position, cut_start))
            position = max(position, cut_end)
        if end > position:
            spans.append((position, end))
    return sorted(spans)


def _destinations(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The target and ``#fragment`` of each link in ``text[start:end]``, as one span each."""
    for link in scan_links(text, start, end):
        yield link.target[0], link.fragment[1] if link.fragment is not None else link.target[1]


def replace_in_prose(text: str, old: str, new: str) -> tuple[str, int]:
    """``text`` with every occurrence of ``old`` that lies wholly inside one prose span replaced by
    ``new``, and how many there were; code and everything else stays byte for byte."""
    if not old:
        raise ValueError("old must not be empty")
    out: list[str] = []
    kept = 0
    count = 0
    for start, end in prose_spans(text):
        found = text.find(old, start, end)
        while found != -1:
            out += [text[kept:found], new]
            kept = found + len(old)
            count += 1
            found = text.find(old, kept, end)
    out.append(text[kept:])
    return "".join(out), count
