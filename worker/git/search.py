"""Searching the pages of one commit: literal text with ``git grep``, RE2 patterns in process.

``search(repo, commit, query, regex=, case_sensitive=, prefix=, limit=, after=, outside_code=, multiline=)``
answers the hits in path order, then line order: every line holding the query (literal) or where a match of
the pattern starts (regex), at most ``limit``, only in files whose path starts with ``prefix`` and after the
``(path, line)`` ``after`` (a cursor). Files git takes for binary (a NUL byte in their first 8000 bytes) are
skipped.

- literal: ``git grep -F -n`` (``-i`` unless ``case_sensitive``; git folds ASCII letters; one thread, see
  ``grep.THREADS``): git reads the blobs in C, ~20-50 ms over 10 000 pages.
- regex: RE2 semantics, exactly (``re2``, linear time per search), never git's own regex engines (POSIX
  ERE and PCRE differ from RE2 in classes, ``\\b``, ``$`` and more). The pattern runs over each page's
  whole text with ``(?m)`` (``^``/``$`` at line ends) and ``(?i)`` unless ``case_sensitive``; a match is
  reported at the line where it starts, once per line. A match never crosses a line break unless
  ``multiline``: where the leftmost match would, the pattern is tried again within that line alone (the
  page stays its context, so ``^``, ``$`` and ``\\b`` read the same). Blobs come from one
  ``git cat-file --batch`` per search, streamed one at a time.
- ``outside_code``: only matches that lie wholly in prose (``markdown.prose``, the rule of
  ``replace_across``'s ``outside_code``: never in fenced or indented code blocks, code spans, HTML blocks
  or the front matter); a match that does not is passed over and the search goes on after its start. A
  literal is then looked for in process, in the pages the text index or ``git grep -l`` names.

``count_matches`` answers, page by page, how many matches ``replace_across`` would replace for the same
text or pattern (see it).

Cost: files over ``max_file_bytes`` (which wikiq never writes, but a person may push) are not searched;
every blob handed to RE2 or scanned for a literal is charged to the budget in force
(``worker.engine.budget``: bytes scanned, each RE2 search's worst case before it runs, the CPU time
between searches), so a costly search ends with ``OverBudget`` instead of running on. A line ``git grep``
reports is read up to ``GREP_LINE_BYTES``.

The interface is what an index-backed search would offer too; nothing here is specific to how hits are
found.
"""

from __future__ import annotations

import bisect
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from typing import IO, Any, NamedTuple, Protocol

from worker.engine.budget import Budget, current
from worker.engine.markdown import compile_pattern, count_and_replace
from worker.engine.markdown.prose import prose_spans, replace_in_prose
from worker.errors import BatchRejected
from worker.git.grep import SEARCH_FILE_BYTES, THREADS, iter_blobs
from worker.git.objects import TREE_MODE
from worker.git.reader import ObjectReader
from worker.git.snapshot import EXEC_MODE, FILE_MODE, Snapshot
from worker.git.textindex import TextIndex

GREP_LINE_BYTES = 64 * 1024  # of a line git grep reports, what is read (the answer shows far less)
BINARY_PROBE = 8000  # git's own heuristic: a NUL in the first 8000 bytes makes a file binary


class Searchable(ObjectReader, Protocol):
    """A repository that can be searched: its objects, its views of commits and its text index
    (``worker.git.repo.WikiRepo``)."""

    def snapshot(self, commit: str | None = None) -> Snapshot:
        """A view of ``commit``."""
        ...

    def text_index(self) -> TextIndex:
        """The text index of its pages (``worker.git.textindex``)."""
        ...


class SearchHit(NamedTuple):
    """One matching line: path, 1-based line number, the line's text (without its line feed), the page's
    version, and where the match starts in the text (character offset)."""

    path: str
    line: int
    text: str
    version: str
    column: int


def search(
    repo: Searchable,
    commit: str,
    query: str,
    *,
    regex: bool = False,
    case_sensitive: bool = False,
    prefix: str = "",
    limit: int = 100,
    after: tuple[str, int] | None = None,
    max_file_bytes: int = SEARCH_FILE_BYTES,
    outside_code: bool = False,
    multiline: bool = False,
) -> list[SearchHit]:
    """Up to ``limit`` lines at ``commit`` holding ``query`` (literal) or where a match of it starts (an
    RE2 pattern, with ``regex``; within one line unless ``multiline``), ASCII case ignored unless
    ``case_sensitive``, only in prose with ``outside_code``, in files under ``prefix``, after the
    ``(path, line)`` ``after``; in path then line order (see the module docstring)."""
    if limit <= 0:
        return []
    ask = _Ask(query, Mode(case_sensitive, outside_code, multiline), prefix, limit, after, max_file_bytes)
    return _regex(repo, commit, ask) if regex else _literal(repo, commit, ask)


class Mode(NamedTuple):
    """How a query matches: letter case, only in prose, across line breaks (a pattern)."""

    case_sensitive: bool = False
    outside_code: bool = False
    multiline: bool = False


class _Ask(NamedTuple):
    """One search as its helpers read it: what ``search`` was given, ``limit`` hits at most."""

    query: str
    mode: Mode
    prefix: str
    limit: int
    after: tuple[str, int] | None
    max_file_bytes: int


def count_matches(
    repo: Searchable,
    commit: str,
    query: str,
    *,
    regex: bool = False,
    prefix: str = "",
    outside_code: bool = False,
    changeable: Callable[[str], bool] = lambda path: True,
    max_file_bytes: int = SEARCH_FILE_BYTES,
) -> list[tuple[str, int]]:
    """``(path, count)`` of every page at ``commit`` where ``replace_across`` with ``old=query`` (with
    ``regex``: ``pattern=query``), ``prefix`` and ``outside_code`` would replace something, in path order,
    with the count it would replace there: its own counting (``markdown.count_and_replace``,
    ``markdown.prose.replace_in_prose``), so case-sensitive, every match over the whole page (a pattern as
    written: ``^`` is the page's start unless it says ``(?m)``, and a match may cross lines). Only UTF-8
    files whose path starts with ``prefix`` count, and only those ``changeable`` allows (the zones where
    ``replace_across`` may change a page: never ``raw/``); files over ``max_file_bytes`` are not read.
    ``outside_code`` takes a literal ``query`` (``INVALID_BATCH`` with ``regex``, as ``replace_across``
    refuses it); a pattern RE2 refuses is ``PATTERN_INVALID``."""
    if outside_code and regex:
        raise BatchRejected("INVALID_BATCH", "outside_code counts a literal query, not a pattern")
    if regex:
        compile_pattern(query)
        files = list(blobs_under(repo, repo.tree_of(commit), prefix))
    else:
        files = _mentioning(repo, commit, query, prefix, "")
    files = [(path, oid) for path, oid in files if changeable(path)]
    spend = current()
    found: list[tuple[str, int]] = []
    with closing(_pages(repo, files, max_file_bytes)) as pages:
        for path, _, data in pages:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            where = f"counting in {path!r}"
            if outside_code:
                spend.scan(len(data), where)
                count = replace_in_prose(text, query, query)[1]
            elif regex:
                count = count_and_replace(text, new="", pattern=query, where=where)[1]
            else:
                count = count_and_replace(text, new=query, old=query, where=where)[1]
            if count:
                found.append((path, count))
    return found


def _pages(
    repo: ObjectReader, files: list[tuple[str, str]], max_file_bytes: int
) -> Generator[tuple[str, str, bytes], None, None]:
    """``(path, blob id, bytes)`` of each of ``files`` (``(path, blob id)``) in turn, but those over
    ``max_file_bytes`` or missing, streamed from one ``git cat-file --batch`` that stops when the iteration
    ends or is closed."""
    blobs = iter_blobs(repo.path, [oid for _, oid in files], max_file_bytes)
    try:
        for (path, oid), data in zip(files, blobs, strict=False):
            if data is not None:
                yield path, oid, data
    finally:
        blobs.close()


def _binary(data: bytes) -> bool:
    """True for a file git takes for binary (and never searches)."""
    return b"\x00" in data[:BINARY_PROBE]


def _after(hit: tuple[str, int], after: tuple[str, int] | None) -> bool:
    return after is None or hit > after


def _pathspec(prefix: str) -> list[str]:
    """A pathspec narrowing git to the folder the prefix is in (the rest is filtered here)."""
    folder = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
    return [f":(literal){folder}"] if folder else []


def _literal(repo: Searchable, commit: str, ask: _Ask) -> list[SearchHit]:
    """Literal hits: from the pages the text index names when it can (``worker.git.textindex``), else by
    grepping every page (with ``outside_code``: from the pages ``git grep -l`` names)."""
    query, prefix, after = ask.query, ask.prefix, ask.after
    start = after[0] if after else ""
    if ask.mode.outside_code:
        candidates: list[str] | None = [path for path, _ in _mentioning(repo, commit, query, prefix, start)]
    else:
        candidates = repo.text_index().candidates(commit, query, prefix, start)
    if candidates is not None:
        return _scan(repo, commit, candidates, ask)
    return _grep(repo, commit, query, ask.mode.case_sensitive, prefix, ask.limit, after)


def _mentioning(repo: Searchable, commit: str, query: str, prefix: str, start: str) -> list[tuple[str, str]]:
    """``(path, blob id)`` of the files under ``prefix``, from ``start`` on, that may hold ``query`` (ASCII
    case ignored; more are fine, fewer are not), in path order: those the text index names, else those
    ``git grep -l`` names, else every file."""
    snapshot = repo.snapshot(commit)
    paths = repo.text_index().candidates(commit, query, prefix, start)
    if paths is None:
        paths = snapshot.mentioning([query])
    if paths is None:
        return [(path, oid) for path, oid in blobs_under(repo, repo.tree_of(commit), prefix) if path >= start]
    kept = sorted(path for path in paths if path.startswith(prefix) and path >= start)
    return [(path, oid) for path in kept if (oid := snapshot.version(path)) is not None]


def _scan(repo: Searchable, commit: str, paths: list[str], ask: _Ask) -> list[SearchHit]:
    """The lines of ``paths`` (in order) holding the query, as ``git grep -F`` would report them (with
    ``outside_code``, only those holding it in prose)."""
    snapshot = repo.snapshot(commit)
    spend = current()
    present = [(path, oid) for path in paths if (oid := snapshot.version(path)) is not None]
    query, mode = ask.query, ask.mode
    hits: list[SearchHit] = []
    with closing(_pages(repo, present, ask.max_file_bytes)) as pages:
        for path, oid, data in pages:
            if _binary(data):
                continue
            spend.scan(len(data), "the search")
            lines = _prose_lines(data, query, mode) if mode.outside_code else _lines(data, query, mode)
            for number, text, column in lines:
                if not _after((path, number), ask.after):
                    continue
                hits.append(SearchHit(path, number, text, oid, column))
                if len(hits) >= ask.limit:
                    return hits
    return hits


def _lines(data: bytes, query: str, mode: Mode) -> Iterator[tuple[int, str, int]]:
    """``(line number, text, column)`` of each line of ``data`` holding ``query``."""
    wanted = query if mode.case_sensitive else _fold(query)
    for number, raw in enumerate(data.split(b"\n"), 1):
        text = raw.decode("utf-8", "replace")
        column = (text if mode.case_sensitive else _fold(text)).find(wanted)
        if column >= 0:
            yield number, text, column


def _prose_lines(data: bytes, query: str, mode: Mode) -> Iterator[tuple[int, str, int]]:
    """``(line number, text, column)`` of each line of ``data`` holding ``query`` wholly inside prose (the
    occurrences ``replace_in_prose`` finds, in any letter case unless ``case_sensitive``), at its first
    such occurrence."""
    page = data.decode("utf-8", "replace")
    hay = page if mode.case_sensitive else _fold(page)
    wanted = query if mode.case_sensitive else _fold(query)
    line, counted, done = 1, 0, -1  # done: where the last reported line ends
    for start, end in prose_spans(page):
        found = hay.find(wanted, max(start, done + 1), end)
        while found != -1:
            line += page.count("\n", counted, found)
            counted = found
            line_start = page.rfind("\n", 0, found) + 1
            done = page.find("\n", found)
            done = len(page) if done < 0 else done
            yield line, page[line_start:done], found - line_start
            found = hay.find(wanted, done + 1, end) if done < end else -1


def _fold(text: str) -> str:
    """``text`` with ASCII letters lowered, as ``git grep -i`` folds them (and nothing else)."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _grep(
    repo: Searchable,
    commit: str,
    query: str,
    case_sensitive: bool,
    prefix: str,
    limit: int,
    after: tuple[str, int] | None,
) -> list[SearchHit]:
    args = ["git", "--git-dir", str(repo.path), "grep", "-I", "-F", "-n", "--column", "-z", "--no-color"]
    args.append(THREADS)
    if not case_sensitive:
        args.append("-i")
    process = subprocess.Popen(
        [*args, "-e", query, commit, "--", *_pathspec(prefix)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    snapshot = repo.snapshot(commit)
    hits: list[SearchHit] = []
    head = commit.encode() + b":"
    spend = current()
    try:
        for path_bytes, number, column, text_bytes, size in _grep_lines(process.stdout):
            spend.scan(size, "the search")
            path = path_bytes.removeprefix(head).decode("utf-8", "replace")
            if not path.startswith(prefix) or not _after((path, number), after):
                continue
            text = text_bytes.decode("utf-8", "replace")
            shown = len(text_bytes[:column].decode("utf-8", "replace"))
            hits.append(SearchHit(path, number, text, snapshot.version(path) or "", shown))
            if len(hits) >= limit:
                break
    finally:
        process.kill()
        process.wait()
    return hits


def _grep_lines(stream: IO[bytes]) -> Iterator[tuple[bytes, int, int, bytes, int]]:
    """``git grep -n --column -z`` records: path, line number, the match's byte offset in the text, the
    text (a line over ``GREP_LINE_BYTES`` is kept only around the match, the offset then counting from
    where it is kept) and the line's whole size. One long line never sits whole in memory."""
    while True:
        chunk = stream.readline(GREP_LINE_BYTES)
        if not chunk:
            return
        path, number, column, text = chunk.split(b"\x00", 3)
        at = int(column) - 1
        size = len(chunk)
        if text.endswith(b"\n"):
            yield path, int(number), at, text[:-1], size
            continue
        keep_from = max(0, at - GREP_LINE_BYTES // 4)
        keep_to = at + GREP_LINE_BYTES // 2
        kept = [text[keep_from:keep_to]]
        position = len(text)
        while not text.endswith(b"\n"):
            text = stream.readline(GREP_LINE_BYTES)
            if not text:
                break
            size += len(text)
            piece = text.rstrip(b"\n")
            low, high = max(keep_from - position, 0), max(keep_to - position, 0)
            kept.append(piece[low:high])
            position += len(piece)
        yield path, int(number), at - keep_from, b"".join(kept), size


def _regex(repo: ObjectReader, commit: str, ask: _Ask) -> list[SearchHit]:
    """Pattern hits: every page under the prefix from the cursor's on, read in process."""
    mode, after = ask.mode, ask.after
    flags = "(?m)" if mode.case_sensitive else "(?mi)"
    pattern = compile_pattern(flags + ask.query)
    files = [(path, oid) for path, oid in blobs_under(repo, repo.tree_of(commit), ask.prefix)]
    if after is not None:
        files = [(path, oid) for path, oid in files if path >= after[0]]
    spend = current()
    hits: list[SearchHit] = []
    with closing(_pages(repo, files, ask.max_file_bytes)) as pages:
        for path, oid, data in pages:
            if _binary(data):
                continue
            for hit in _page_hits(pattern, path, oid, data, spend, mode.multiline, mode.outside_code):
                if _after((hit.path, hit.line), after):
                    hits.append(hit)
                    if len(hits) >= ask.limit:
                        return hits
    return hits


def _page_hits(
    pattern: Any,
    path: str,
    oid: str,
    data: bytes,
    spend: Budget,
    multiline: bool = False,
    outside_code: bool = False,
) -> Iterator[SearchHit]:
    """The lines of one page where a match starts, in order, once each: a match within its line unless
    ``multiline``, and wholly inside the page's prose with ``outside_code`` (read once the page has a
    match). Every search is charged to ``spend`` before it runs (its worst case) and after (the bytes it
    went over)."""
    prose: list[tuple[int, int]] | None = None
    position = 0
    line = 1
    counted = 0  # offset up to which line feeds are counted into ``line``
    where = f"the search in {path!r}"
    while position <= len(data):
        match = _search(pattern, data, position, len(data), spend, where)
        if match is None:
            return
        begin = match.start()
        if begin == len(data) and data.endswith(b"\n"):
            return  # after the last line feed there is no line
        line_end = data.find(b"\n", begin)
        line_end = len(data) if line_end < 0 else line_end
        if not multiline and match.end() > line_end:  # it crosses a line: try this line alone
            match = _search(pattern, data, begin, line_end, spend, where)
            if match is None:
                position = line_end + 1
                continue
            begin = match.start()
        if outside_code:
            prose = _prose_bytes(data) if prose is None else prose
            if not _inside(match.span(), prose):
                position = _next_char(data, begin)
                continue
        line += data.count(b"\n", counted, begin)
        counted = begin
        line_start = data.rfind(b"\n", 0, begin) + 1
        text = data[line_start:line_end].decode("utf-8", "replace")
        column = len(data[line_start:begin].decode("utf-8", "replace"))
        yield SearchHit(path, line, text, oid, column)
        position = line_end + 1  # the next line: one hit per line


def _search(pattern: Any, data: bytes, start: int, end: int, spend: Budget, where: str) -> Any:
    """The leftmost match of ``pattern`` within ``data[start:end]`` (the whole page its context), charged."""
    spend.regex(pattern.programsize, end - start, where)
    match = pattern.search(data, start, end)
    spend.scan((end if match is None else match.end()) - start, where)
    return match


def _prose_bytes(data: bytes) -> list[tuple[int, int]]:
    """The prose of a page (``markdown.prose.prose_spans``) as byte offsets into ``data``."""
    text = data.decode("utf-8", "surrogateescape")  # one character per byte that is not UTF-8: offsets map
    spans = []
    chars = size = 0
    for start, end in prose_spans(text):
        size += len(text[chars:start].encode("utf-8", "surrogateescape"))
        begin = size
        size += len(text[start:end].encode("utf-8", "surrogateescape"))
        chars = end
        spans.append((begin, size))
    return spans


def _inside(span: tuple[int, int], prose: list[tuple[int, int]]) -> bool:
    """True when ``span`` lies wholly inside one of the sorted, disjoint spans ``prose``."""
    at = bisect.bisect_right(prose, span[0], key=lambda each: each[0]) - 1
    return at >= 0 and prose[at][0] <= span[0] and span[1] <= prose[at][1]


def _next_char(data: bytes, at: int) -> int:
    """The offset of the character after the one at ``at`` (UTF-8 continuation bytes skipped)."""
    at += 1
    while at < len(data) and 0x80 <= data[at] < 0xC0:
        at += 1
    return at


def blobs_under(repo: ObjectReader, tree: str, prefix: str, folder: str = "") -> Iterator[tuple[str, str]]:
    """``(path, blob id)`` of every file of ``tree`` whose path starts with ``prefix``, in path order."""
    for name, (mode, oid) in repo.tree(tree).items():
        path = folder + name
        if mode == TREE_MODE:
            below = path + "/"
            if below.startswith(prefix) or prefix.startswith(below):
                yield from blobs_under(repo, oid, prefix, below)
        elif mode in (FILE_MODE, EXEC_MODE) and path.startswith(prefix):
            yield path, oid
