"""The block structure: line splitting that keeps every byte, front matter, headings, inline blocks."""

from __future__ import annotations

from worker.engine.markdown.document import front_matter_span, parse, split_lines


def test_split_lines_keeps_every_line_ending() -> None:
    """Lines end with \\n, \\r\\n or \\r and keep them; the last line may have none."""
    text = "a\nb\r\nc\rd"
    assert split_lines(text) == ["a\n", "b\r\n", "c\r", "d"]
    assert "".join(split_lines(text)) == text
    assert split_lines("") == []
    assert split_lines("\n\n") == ["\n", "\n"]


def test_front_matter_needs_an_exact_opening_and_a_closing_line() -> None:
    """``---`` first, closed by ``---`` or ``...``; no closing line or a longer opener means no block."""
    assert front_matter_span(split_lines("---\na: 1\n---\nbody\n")) == (0, 3)
    assert front_matter_span(split_lines("---  \r\na: 1\r\n...\r\nbody")) == (0, 3)
    assert front_matter_span(split_lines("---\na: 1\n")) is None
    assert front_matter_span(split_lines("----\na: 1\n----\n")) is None
    assert front_matter_span(split_lines("text\n---\na: 1\n---\n")) is None
    assert front_matter_span(split_lines("---\n---")) == (0, 2)


def test_front_matter_is_not_read_as_markdown() -> None:
    """A YAML block whose lines would make a setext heading is neither a heading nor an inline block."""
    doc = parse("---\ntitle: x\n---\n# Real\n")
    assert doc.front_matter == (0, 3)
    assert [(h.text, h.start) for h in doc.headings] == [("Real", 3)]
    assert doc.inlines == ((3, 4),)


def test_headings_atx_setext_and_nested() -> None:
    """ATX closing hashes are dropped, setext lines are joined; quoted or listed headings are not kept."""
    doc = parse("# One ##\nSetext\nheading\n===\n> # quoted\n- # listed\n\n## Two\n---\n")
    found = [(h.level, h.text, h.start, h.end, h.setext) for h in doc.headings]
    assert found == [(1, "One", 0, 1, False), (1, "Setext heading", 1, 4, True), (2, "Two", 7, 8, False)]


def test_code_and_html_blocks_hold_no_inline_block() -> None:
    """Only paragraphs and headings are inline blocks; fences, indented code and HTML blocks are not."""
    text = "para\n\n```\n[[a]]\n```\n\n    [[b]]\n\n<div>\n[[c]]\n</div>\n\n~~~\nx\n~~~\n"
    doc = parse(text)
    assert doc.inlines == ((0, 1),)
