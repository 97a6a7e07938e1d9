"""How a search finds lines in one page, without git: a pattern's match kept within its line, and only
the matches in prose with ``outside_code``, each against an independent reference (the lines one by one;
every start position in turn)."""

from __future__ import annotations

from typing import Any

import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.engine.budget import Budget, active
from worker.engine.markdown.prose import prose_spans
from worker.git.search import Mode, _page_hits, _prose_bytes, _prose_lines

# Patterns that read alike over a line alone and over the line inside its page (no \A, \z or \n): where
# the leftmost match of the page would run on past the line's end, the line's own matches still count.
PATTERNS = [r"a[^x]*b", r"a.*b", r"b$", r"^a", r"\bab", r"a\s*b", r"(a|b)+x", r"[^a]+a", r"ab|b\s+a"]
TEXT = st.lists(st.sampled_from(["a", "b", "x", " ", "ab", "\n", "\n\n"]), max_size=40).map("".join)
MARKDOWN = st.lists(
    st.sampled_from(
        [
            "ab",
            "Ab",
            "x",
            " ",
            "\n",
            "\n\n",
            "`",
            "```\n",
            "    ",
            "<div>\n",
            "---\n",
            "# ",
            "- ",
            "> ",
            "[ab](x)",
        ]
    ),
    max_size=40,
).map("".join)


def _hits(pattern: str, data: bytes, **options: Any) -> list[tuple[int, int]]:
    with active(Budget()):
        return [
            (h.line, h.column) for h in _page_hits(re2.compile(pattern), "p", "v", data, Budget(), **options)
        ]


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines  # after the last line feed there is no line


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(text=TEXT, pattern=st.sampled_from(PATTERNS))
def test_a_match_stays_within_its_line(text: str, pattern: str) -> None:
    """Without multiline, the lines found (and where the match starts) are those the pattern finds in
    each line searched alone."""
    compiled = re2.compile("(?m)" + pattern)
    expected = []
    for number, line in enumerate(_lines(text), 1):
        match = compiled.search(line)
        if match is not None:
            expected.append((number, match.start()))
    assert _hits("(?m)" + pattern, text.encode()) == expected


def test_multiline_lets_a_match_cross_lines() -> None:
    """With multiline, a match starting on a line and ending on a later one is found at its start."""
    data = b"alpha one\nnothing\nbeta two\n"
    assert _hits("(?m)alpha[^x]*beta", data) == []
    assert _hits("(?m)alpha[^x]*beta", data, multiline=True) == [(1, 0)]
    assert _hits("(?m)one\\nnot", data) == []
    assert _hits("(?m)one\\nnot", data, multiline=True) == [(1, 6)]


def _in_prose(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(low <= start and end <= high for low, high in spans)


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(text=MARKDOWN, needle=st.sampled_from(["ab", "b", "Ab", "a"]), case_sensitive=st.booleans())
def test_a_literal_outside_code_is_found_where_it_lies_in_prose(
    text: str, needle: str, case_sensitive: bool
) -> None:
    """With outside_code, a line is found at its first occurrence that lies wholly in prose (every
    occurrence tried, overlapping ones too), case folded as git grep folds it unless case_sensitive."""
    spans = prose_spans(text)
    hay, wanted = (text, needle) if case_sensitive else (text.lower(), needle.lower())
    expected = []
    offset = 0
    for number, line in enumerate(_lines(text), 1):
        for column in range(len(line)):
            at = offset + column
            inside = hay.startswith(wanted, at) and at + len(wanted) <= offset + len(line)
            if inside and _in_prose(at, at + len(wanted), spans):
                expected.append((number, line, column))
                break
        offset += len(line) + 1
    found = list(_prose_lines(text.encode(), needle, Mode(case_sensitive=case_sensitive, outside_code=True)))
    assert found == expected


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(text=MARKDOWN, pattern=st.sampled_from([r"a[^x]*b", r"ab", r"b\s*a", r"(?i)ab+", r"x|`a"]))
def test_a_pattern_outside_code_is_found_where_it_lies_in_prose(text: str, pattern: str) -> None:
    """With outside_code, a line is found at the first position where the pattern's match (within the
    line) lies wholly in prose."""
    compiled = re2.compile("(?m)" + pattern)
    data = text.encode()
    spans = prose_spans(text)  # the alphabet is ASCII: character offsets are byte offsets
    expected = []
    offset = 0
    for number, line in enumerate(_lines(text), 1):
        for column in range(len(line) + 1):
            match = compiled.match(data, offset + column, offset + len(line))
            if match is not None and _in_prose(*match.span(), spans):
                expected.append((number, column))
                break
        offset += len(line) + 1
    assert _hits("(?m)" + pattern, data, outside_code=True) == expected


def test_prose_spans_in_bytes_and_matches_past_other_characters() -> None:
    """The prose of a page with characters of several bytes (and a byte that is not UTF-8) maps to byte
    offsets that cut the same text; a pattern outside code is found after them, at its character column."""
    text = "Été `ça` ab\n```\nab\n```\n\u00e9\u00e9 ab\n\n"
    data = text.encode() + b"\xff ab\n"
    spans = _prose_bytes(data)
    assert [data[start:end] for start, end in spans] == [
        "Été ".encode(),
        b" ab\n",
        "\u00e9\u00e9 ab\n".encode(),
        b"\xff ab\n",
    ]
    assert _hits("(?m)ab|ça", data, outside_code=True) == [(1, 9), (5, 3), (7, 2)]
