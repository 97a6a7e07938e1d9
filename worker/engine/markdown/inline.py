"""Code spans and link syntax inside one inline block (a paragraph or a heading), as character spans.

Code spans follow CommonMark: a backtick run opens a span that the next run of exactly the same length
closes (across lines of the block); a run with no partner is literal text; outside code spans a backslash
escapes the ASCII punctuation character after it (so ``\\``` opens nothing). Code spans bind tighter than
links, so nothing inside one is ever read as a link.

Link syntax recognised outside code spans:

- wikilinks ``[[target#fragment|label]]`` and embeds ``![[...]]``: one line, no ``[`` or ``]`` inside,
  the target ends at the first ``#`` or ``|`` (or ``\\|``, the pipe escaped in a table row), the label
  at ``]]``;
- inline markdown links and images ``[label](dest "title")`` / ``![alt](dest)``: the label may hold
  balanced brackets and span lines; ``(dest "title")`` must be on one line; ``dest`` is ``<...>`` or a raw
  destination (balanced parentheses, no blanks); the title is ``"..."``, ``'...'`` or ``(...)``.
  Links inside a label (an image inside a link) are found too.

Not handled (deliberately): raw HTML (``<a href>``) and autolinks (a link inside an inline HTML comment
in a paragraph is found like any other), reference-style uses (``[text][id]``; their definitions are read
by ``links``), a destination on the line after ``(`` or nesting parentheses more than 32 deep.
"""

from __future__ import annotations

import bisect
import re
import string
from dataclasses import dataclass

from worker.engine.budget import Ticker

PUNCTUATION = frozenset(string.punctuation)
_MAX_NESTING = 32
# The only characters the scans act on; everything between them is skipped in one regex search.
_BRACKETS = re.compile(r"[\\`\[\]]")
_LINK_CHARS = re.compile(r"[\\`\[\]!]")


@dataclass(frozen=True)
class RawLink:
    """A link's syntax: spans are character offsets into the scanned text."""

    kind: str  # "wikilink" or "markdown"
    embed: bool
    start: int
    end: int
    target: tuple[int, int]  # wikilink: name (blanks trimmed); markdown: dest up to '#'
    fragment: tuple[int, int] | None  # after '#'
    label: tuple[int, int] | None  # wikilink: after '|'; markdown: inside [ ]
    title: tuple[int, int] | None  # markdown: the title with its quotes
    angle: bool


def code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The code spans of ``text[start:end]``, as ``(start, end)`` offsets including their backticks."""
    runs: dict[int, list[int]] = {}
    position = start
    while position < end:
        position = text.find("`", position, end)
        if position < 0:
            break
        run_end = position
        while run_end < end and text[run_end] == "`":
            run_end += 1
        runs.setdefault(run_end - position, []).append(position)
        position = run_end
    if not runs:
        return []
    spans: list[tuple[int, int]] = []
    position = start
    while position < end:
        char = text[position]
        if char == "\\" and position + 1 < end and text[position + 1] in PUNCTUATION:
            position += 2
            continue
        if char != "`":
            position += 1
            continue
        run_end = position
        while run_end < end and text[run_end] == "`":
            run_end += 1
        length = run_end - position
        candidates = runs.get(length, [])
        found = bisect.bisect_left(candidates, run_end)
        # A run of the same length starting right after ours cannot exist (runs are maximal), and a run
        # found in ``runs`` is maximal on both sides, as CommonMark's closing run must be.
        if found < len(candidates):
            close = candidates[found]
            spans.append((position, close + length))
            position = close + length
        else:
            position = run_end
    return spans


class _Scanner:
    """Finds links in ``text[start:end]``, skipping code spans, in one left-to-right pass."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.text = text
        self.end = end
        self.code = code_spans(text, start, end)
        self.code_starts = [span[0] for span in self.code]
        self.closing = self.match_brackets(start, end)
        self.links: list[RawLink] = []

    def code_at(self, position: int) -> int | None:
        """The end of the code span starting at ``position``, or None."""
        found = bisect.bisect_left(self.code_starts, position)
        if found < len(self.code) and self.code_starts[found] == position:
            return self.code[found][1]
        return None

    def skipped(self, position: int, end: int) -> int | None:
        """Where reading goes on past the code span or the backslash escape (of ASCII punctuation) that
        starts at ``position``; None when neither starts there."""
        code_end = self.code_at(position)
        if code_end is not None:
            return code_end
        text = self.text
        if text[position] == "\\" and position + 1 < end and text[position + 1] in PUNCTUATION:
            return position + 2
        return None

    def match_brackets(self, start: int, end: int) -> dict[int, int]:
        """For each ``[`` outside code spans and escapes, the ``]`` that balances it (if any)."""
        text = self.text
        closing: dict[int, int] = {}
        opened: list[int] = []
        position = start
        ticker = Ticker("reading links")
        while position < end:
            ticker.tick()
            next_char = _BRACKETS.search(text, position, end)
            if next_char is None:
                break
            position = next_char.start()
            past = self.skipped(position, end)
            if past is not None:
                position = past
                continue
            char = text[position]
            if char == "[":
                opened.append(position)
            elif char == "]" and opened:
                closing[opened.pop()] = position
            position += 1
        return closing

    def scan(self, position: int, end: int) -> None:
        text = self.text
        # A markdown link's label is scanned for nested links (an image inside a link); on reaching the
        # label's ``]``, scanning jumps past the link's ``(destination)``.
        resume: dict[int, int] = {}
        ticker = Ticker("reading links")
        while position < end:
            ticker.tick()
            if position in resume:
                position = resume.pop(position)
                continue
            next_char = _LINK_CHARS.search(text, position, end)
            if next_char is None:
                break
            if next_char.start() != position:
                # resume points are label ends (a "]"), which the search stops at too
                position = next_char.start()
                continue
            past = self.skipped(position, end)
            if past is not None:
                position = past
                continue
            char = text[position]
            embed = char == "!" and text.startswith("[", position + 1)
            if embed or char == "[":
                bracket = position + 1 if embed else position
                if text.startswith("[[", bracket):
                    found = self.wikilink(position, bracket, end, embed)
                    if found is not None:
                        position = found
                        continue
                label_end = self.markdown_link(position, bracket, end, embed)
                if label_end is not None:
                    resume[label_end] = self.links[-1].end
                    position = bracket + 1
                    continue
            position += 1

    def wikilink(self, start: int, position: int, end: int, embed: bool) -> int | None:
        """Read ``[[...]]`` at ``position``; return the offset after it, or None."""
        text = self.text
        inner = position + 2
        close = inner
        while close < end:
            char = text[close]
            if char in "[\n\r" or self.code_at(close) is not None:
                return None
            if char == "]":
                break
            close += 1
        if close >= end or not text.startswith("]]", close):
            return None
        body_end = close
        pipe = text.find("|", inner, body_end)
        label = None
        if pipe >= 0:
            label = (pipe + 1, body_end)
            # ``[[name\|label]]``: the pipe escaped for a table row, as Obsidian writes it.
            body_end = pipe - 1 if pipe > inner and text[pipe - 1] == "\\" else pipe
        hash_at = text.find("#", inner, body_end)
        fragment = None
        name_end = body_end
        if hash_at >= 0:
            fragment = (hash_at + 1, body_end)
            name_end = hash_at
        name_start = inner
        while name_start < name_end and text[name_start] in " \t":
            name_start += 1
        while name_end > name_start and text[name_end - 1] in " \t":
            name_end -= 1
        if name_start == name_end and fragment is None:
            return None
        self.links.append(
            RawLink("wikilink", embed, start, close + 2, (name_start, name_end), fragment, label, None, False)
        )
        return close + 2

    def markdown_link(self, start: int, position: int, end: int, embed: bool) -> int | None:
        """Read ``[label](dest "title")`` with ``[`` at ``position``; return the label's ``]``, or None."""
        text = self.text
        close = self.closing.get(position)
        if close is None or close >= end or not text.startswith("(", close + 1):
            return None
        parsed = _destination(text, close + 2, end)
        if parsed is None:
            return None
        target, fragment, title, angle, after = parsed
        self.links.append(
            RawLink("markdown", embed, start, after, target, fragment, (position + 1, close), title, angle)
        )
        return close


def scan_definition(text: str, start: int, end: int) -> RawLink | None:
    """The destination of the link reference definition ``[id]: dest "title"`` whose first line is
    ``text[start:end]`` (after any block quote or list marker), or None when the destination is not on
    that line."""
    bracket = text.find("[", start, end)
    if bracket < 0:
        return None
    position = bracket + 1
    while position < end and text[position] != "]":
        position += 2 if text[position] == "\\" else 1
    if position >= end or not text.startswith(":", position + 1):
        return None
    dest = _skip_blanks(text, position + 2, end)
    if dest >= end:
        return None
    if text[dest] == "<":
        dest_end = text.find(">", dest + 1, end)
        if dest_end < 0:
            return None
        span, after, angle = (dest + 1, dest_end), dest_end + 1, True
    else:
        dest_end = dest
        while dest_end < end and text[dest_end] not in " \t":
            dest_end += 1
        span, after, angle = (dest, dest_end), dest_end, False
    rest = _skip_blanks(text, after, end)
    title = None
    if rest < end:
        if rest == after or text[rest] not in "\"'(":
            return None
        title = (rest, end)
    hash_at = text.find("#", span[0], span[1])
    fragment = None
    if hash_at >= 0:
        span, fragment = (span[0], hash_at), (hash_at + 1, span[1])
    return RawLink("definition", False, bracket, end, span, fragment, (bracket + 1, position), title, angle)


def _destination(
    text: str, position: int, end: int
) -> tuple[tuple[int, int], tuple[int, int] | None, tuple[int, int] | None, bool, int] | None:
    """Parse ``dest "title")`` from ``position`` (just after ``(``), on one line, before ``end``.

    Returns (path span, fragment span, title span, angle, offset after ``)``), or None when it is not an
    inline link's destination. Like markdown-it, a raw destination nests parentheses at most 32 deep:
    this also bounds how far the scans of many unclosed ``[a](`` on one line can overlap (linear time).
    """
    position = _skip_blanks(text, position, end)
    angle = text.startswith("<", position)
    if angle:
        dest_start = position + 1
        dest_end = dest_start
        while dest_end < end and text[dest_end] != ">":
            if text[dest_end] in "<\r\n":
                return None
            if text[dest_end] == "\\" and dest_end + 1 < end and text[dest_end + 1] in PUNCTUATION:
                dest_end += 2
                continue
            dest_end += 1
        if dest_end >= end:
            return None
        after_dest = dest_end + 1
    else:
        dest_start = dest_end = position
        depth = 0
        while dest_end < end:
            char = text[dest_end]
            if char == "\\" and dest_end + 1 < end and text[dest_end + 1] in PUNCTUATION:
                dest_end += 2
                continue
            if char in " \t" or ord(char) < 0x20 or char == "\x7f":
                break
            if char == "(":
                depth += 1
                if depth > _MAX_NESTING:
                    return None
            elif char == ")":
                if depth == 0:
                    break
                depth -= 1
            dest_end += 1
        if depth != 0:
            return None
        after_dest = dest_end
    position = _skip_blanks(text, after_dest, end)
    title = None
    if position < end and text[position] in "\"'(" and position > after_dest:
        closer = ")" if text[position] == "(" else text[position]
        title_end = position + 1
        while title_end < end and text[title_end] != closer:
            if text[title_end] == "\\" and title_end + 1 < end:
                title_end += 1
            elif text[title_end] in "\r\n" or (closer == ")" and text[title_end] == "("):
                return None
            title_end += 1
        if title_end >= end:
            return None
        title = (position, title_end + 1)
        position = _skip_blanks(text, title_end + 1, end)
    if position >= end or text[position] != ")":
        return None
    hash_at = text.find("#", dest_start, dest_end)
    if hash_at >= 0:
        return (dest_start, hash_at), (hash_at + 1, dest_end), title, angle, position + 1
    return (dest_start, dest_end), None, title, angle, position + 1


def _skip_blanks(text: str, position: int, end: int) -> int:
    while position < end and text[position] in " \t":
        position += 1
    return position


def scan_links(text: str, start: int, end: int) -> list[RawLink]:
    """Every wikilink and inline markdown link in ``text[start:end]`` outside code spans, in order."""
    if text.find("[", start, end) < 0:  # every link has one
        return []
    scanner = _Scanner(text, start, end)
    scanner.scan(start, end)
    return sorted(scanner.links, key=lambda link: link.start)
