"""The block structure of a markdown page: its lines, its front matter, its headings and inline blocks.

``parse(text)`` reads a page once with markdown-it-py (CommonMark) and keeps only what the other modules
of this package need, as line ranges (0-based, end exclusive) into ``lines``:

- ``front_matter``: the YAML block at the very start (a ``---`` line, a closing ``---`` or ``...`` line),
- ``inlines``: every block whose content is inline markdown (paragraphs and headings, at any depth of
  block quotes and lists) — the only places where links exist; fenced and indented code blocks, HTML
  blocks and the front matter are never among them,
- ``definitions``: link reference definitions (``[id]: dest "title"``),
- ``code_blocks``: fenced and indented code blocks, at any depth (a fence's lines included),
- ``headings``: the top-level headings (ATX and setext; headings nested in block quotes or lists are not
  section boundaries and are left out).

Lines end with ``\\r\\n``, ``\\r`` or ``\\n`` (CommonMark's three line endings) and keep them, so joining
``lines`` gives ``text`` back byte for byte. The front matter is detected here, once, for the whole
package; it is blanked out (same number of lines) before markdown-it reads the rest, so a YAML block is
never read as markdown and line numbers stay aligned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt

from worker.engine.budget import current

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_FM_OPEN = re.compile(r"---[ \t]*(?:\r\n|\r|\n)")
_FM_CLOSE = re.compile(r"(?:---|\.\.\.)[ \t]*(?:\r\n|\r|\n)?")

_MD = MarkdownIt("commonmark", {"inline_definitions": True})
# Only the block structure is needed: inline parsing (emphasis, links...) is done where it matters.
_MD.disable("inline")


@dataclass(frozen=True)
class Heading:
    """A top-level heading: ``start``..``end`` are its lines (a setext heading has two or more)."""

    level: int
    text: str
    start: int
    end: int
    setext: bool


@dataclass(frozen=True)
class Document:
    """One parsed page; see the module docstring for what each field holds."""

    text: str
    lines: tuple[str, ...]
    offsets: tuple[int, ...]
    front_matter: tuple[int, int] | None
    inlines: tuple[tuple[int, int], ...]
    definitions: tuple[tuple[int, int], ...]
    headings: tuple[Heading, ...]
    code_blocks: tuple[tuple[int, int], ...]

    def line_at(self, offset: int) -> int:
        """The 0-based line holding character ``offset``."""
        lo, hi = 0, len(self.offsets) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.offsets[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def span_text(self, start: int, end: int) -> str:
        """The text of lines ``start``..``end`` (end exclusive), with their line endings."""
        return "".join(self.lines[start:end])


def split_lines(text: str) -> list[str]:
    """``text`` cut after each line ending (``\\r\\n``, ``\\r``, ``\\n``); the last line may have none."""
    return _LINE.findall(text)


def line_ending(line: str) -> str:
    """The line ending ``line`` finishes with, or ``""``."""
    if line.endswith("\r\n"):
        return "\r\n"
    if line.endswith(("\n", "\r")):
        return line[-1]
    return ""


def strip_ending(line: str) -> str:
    """``line`` without its line ending."""
    return line[: len(line) - len(line_ending(line))]


def front_matter_span(lines: list[str] | tuple[str, ...]) -> tuple[int, int] | None:
    """Lines ``(0, end)`` of the front matter block (both ``---`` lines included), or None.

    The first line must be exactly ``---`` (trailing blanks allowed); the block ends at the first later
    line that is ``---`` or ``...`` at column 0. Without a closing line there is no front matter.
    """
    if not lines or not _FM_OPEN.fullmatch(lines[0]):
        return None
    for number in range(1, len(lines)):
        if _FM_CLOSE.fullmatch(lines[number]):
            return (0, number + 1)
    return None


def parse(text: str) -> Document:
    """The block structure of ``text`` (cached for pages up to ``CACHE_CHARS``: links and sections of one
    page share one parse). Charged to the budget in force (``budget.current``): a page of more lines than
    it allows is ``OverBudget`` before markdown-it runs."""
    spend = current()
    lines = _line_count(text)
    if lines > spend.costs.parse_lines:
        spend.parse(lines, len(text), "a page")
    if len(text) > CACHE_CHARS:
        spend.parse(lines, len(text), "a page")
        document = _read(text)
    else:
        hits = _cached.cache_info().hits
        document = _cached(text)
        if _cached.cache_info().hits == hits:
            spend.parse(lines, len(text), "a page")
    spend.check("parsing markdown")
    return document


def _line_count(text: str) -> int:
    """How many lines ``split_lines`` cuts ``text`` into, at most (a CRLF counts twice)."""
    return text.count("\n") + text.count("\r") + 1


CACHE_CHARS = 256 * 1024  # longer pages are parsed anew each time, so the cache's memory stays small


@lru_cache(maxsize=32)
def _cached(text: str) -> Document:
    return _read(text)


def _read(text: str) -> Document:
    lines = tuple(split_lines(text))
    offsets: list[int] = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line)
    if not lines:
        offsets.append(0)
    front = front_matter_span(lines)
    source = text
    if front is not None:
        source = "".join(line_ending(line) or "\n" for line in lines[: front[1]]) + "".join(lines[front[1] :])
    inlines: list[tuple[int, int]] = []
    definitions: list[tuple[int, int]] = []
    code_blocks: list[tuple[int, int]] = []
    headings: list[Heading] = []
    tokens = _MD.parse(source)
    for number, token in enumerate(tokens):
        if token.map is None:
            continue
        start, end = token.map
        if token.type == "inline":
            inlines.append((start, end))
        elif token.type == "definition":
            definitions.append((start, end))
        elif token.type in ("fence", "code_block"):
            code_blocks.append((start, end))
        elif token.type == "heading_open" and token.level == 0:
            content = tokens[number + 1].content
            headings.append(
                Heading(
                    level=int(token.tag[1]),
                    text=normalize_heading(content),
                    start=start,
                    end=end,
                    setext=token.markup in ("=", "-"),
                )
            )
    return Document(
        text=text,
        lines=lines,
        offsets=tuple(offsets),
        front_matter=front,
        inlines=tuple(inlines),
        definitions=tuple(definitions),
        headings=tuple(headings),
        code_blocks=tuple(code_blocks),
    )


def normalize_heading(text: str) -> str:
    """A heading's text for display and addressing: surrounding blanks trimmed, inner runs of blanks
    (spaces, tabs, the line breaks of a setext heading) made one space."""
    return " ".join(text.split())
