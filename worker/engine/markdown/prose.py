"""Prose: the parts of a page where links live, for edits that must leave code alone.

A page's prose is the text of its paragraphs and headings (at any depth of lists and quotes) minus the
inline code spans in them: never fenced or indented code blocks, HTML blocks, the front matter or code
spans. These are the places ``find_links`` reads links from, so an edit restricted to prose changes
exactly the text a link rewrite may change.
"""

from __future__ import annotations

from worker.engine.markdown.document import parse
from worker.engine.markdown.inline import code_spans


def prose_spans(text: str) -> list[tuple[int, int]]:
    """The prose of ``text`` as sorted, disjoint ``(start, end)`` character offsets."""
    doc = parse(text)
    spans: list[tuple[int, int]] = []
    for start_line, end_line in doc.inlines:
        start = doc.offsets[start_line]
        end = doc.offsets[end_line] if end_line < len(doc.lines) else len(text)
        position = start
        for code_start, code_end in code_spans(text, start, end):
            if code_start > position:
                spans.append((position, code_start))
            position = max(position, code_end)
        if end > position:
            spans.append((position, end))
    return sorted(spans)


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
