"""Searching the pages of one commit: literal text with ``git grep``, RE2 patterns in process.

``search(repo, commit, query, regex=, case_sensitive=, prefix=, limit=, after=)`` answers the hits in path
order, then line order: every line holding the query (literal) or where a match of the pattern starts
(regex), at most ``limit``, only in files whose path starts with ``prefix`` and after the ``(path, line)``
``after`` (a cursor). Files git takes for binary (a NUL byte in their first 8000 bytes) are skipped.

- literal: ``git grep -F -n`` (``-i`` unless ``case_sensitive``; git folds ASCII letters; one thread, see
  ``grep.THREADS``): git reads the blobs in C, ~20-50 ms over 10 000 pages.
- regex: RE2 semantics, exactly (``re2``, linear time per search), never git's own regex engines (POSIX
  ERE and PCRE differ from RE2 in classes, ``\\b``, ``$`` and more). The pattern runs over each page's
  whole text with ``(?m)`` (``^``/``$`` at line ends) and ``(?i)`` unless ``case_sensitive``; a match is
  reported at the line where it starts, once per line. Blobs come from one ``git cat-file --batch`` per
  search, streamed one at a time.

Cost: files over ``max_file_bytes`` (which wikiq never writes, but a person may push) are not searched;
every blob handed to RE2 or scanned for a literal is charged to the budget in force
(``worker.engine.budget``: bytes scanned, each RE2 search's worst case before it runs, the CPU time
between searches), so a costly search ends with ``OverBudget`` instead of running on. A line ``git grep``
reports is read up to ``GREP_LINE_BYTES``.

The interface is what an index-backed search would offer too; nothing here is specific to how hits are
found.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import IO, Any, NamedTuple, Protocol

from worker.engine.budget import Budget, current
from worker.engine.markdown import compile_pattern
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
) -> list[SearchHit]:
    """Up to ``limit`` hits of ``query`` at ``commit`` (see the module docstring)."""
    if limit <= 0:
        return []
    if regex:
        return _regex(repo, commit, query, case_sensitive, prefix, limit, after, max_file_bytes)
    return _literal(repo, commit, query, case_sensitive, prefix, limit, after, max_file_bytes)


def _after(hit: tuple[str, int], after: tuple[str, int] | None) -> bool:
    return after is None or hit > after


def _pathspec(prefix: str) -> list[str]:
    """A pathspec narrowing git to the folder the prefix is in (the rest is filtered here)."""
    folder = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
    return [f":(literal){folder}"] if folder else []


def _literal(
    repo: Searchable,
    commit: str,
    query: str,
    case_sensitive: bool,
    prefix: str,
    limit: int,
    after: tuple[str, int] | None,
    max_file_bytes: int,
) -> list[SearchHit]:
    """Literal hits: from the pages the text index names when it can (``worker.git.textindex``), else by
    grepping every page."""
    candidates = repo.text_index().candidates(commit, query, prefix, after[0] if after else "")
    if candidates is not None:
        return _scan(repo, commit, candidates, query, case_sensitive, limit, after, max_file_bytes)
    return _grep(repo, commit, query, case_sensitive, prefix, limit, after)


def _scan(
    repo: Searchable,
    commit: str,
    paths: list[str],
    query: str,
    case_sensitive: bool,
    limit: int,
    after: tuple[str, int] | None,
    max_file_bytes: int,
) -> list[SearchHit]:
    """The lines of ``paths`` (in order) holding ``query``, as ``git grep -F`` would report them."""
    snapshot = repo.snapshot(commit)
    wanted = query if case_sensitive else _fold(query)
    spend = current()
    present = [(path, oid) for path in paths if (oid := snapshot.version(path)) is not None]
    hits: list[SearchHit] = []
    blobs = iter_blobs(repo.path, [oid for _, oid in present], max_file_bytes)
    try:
        for (path, oid), data in zip(present, blobs, strict=False):
            if data is None or b"\x00" in data[:BINARY_PROBE]:
                continue
            spend.scan(len(data), "the search")
            for number, raw in enumerate(data.split(b"\n"), 1):
                text = raw.decode("utf-8", "replace")
                column = (text if case_sensitive else _fold(text)).find(wanted)
                if column < 0 or not _after((path, number), after):
                    continue
                hits.append(SearchHit(path, number, text, oid, column))
                if len(hits) >= limit:
                    return hits
    finally:
        blobs.close()
    return hits


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


def _regex(
    repo: ObjectReader,
    commit: str,
    query: str,
    case_sensitive: bool,
    prefix: str,
    limit: int,
    after: tuple[str, int] | None,
    max_file_bytes: int,
) -> list[SearchHit]:
    flags = "(?m)" if case_sensitive else "(?mi)"
    pattern = compile_pattern(flags + query)
    files = [(path, oid) for path, oid in blobs_under(repo, repo.tree_of(commit), prefix)]
    if after is not None:
        files = [(path, oid) for path, oid in files if path >= after[0]]
    spend = current()
    hits: list[SearchHit] = []
    blobs = iter_blobs(repo.path, [oid for _, oid in files], max_file_bytes)
    try:
        for (path, oid), data in zip(files, blobs, strict=False):
            if data is None or b"\x00" in data[:BINARY_PROBE]:
                continue
            for hit in _page_hits(pattern, path, oid, data, spend):
                if _after((hit.path, hit.line), after):
                    hits.append(hit)
                    if len(hits) >= limit:
                        return hits
    finally:
        blobs.close()
    return hits


def _page_hits(pattern: Any, path: str, oid: str, data: bytes, spend: Budget) -> Iterator[SearchHit]:
    """The lines of one page where a match starts, in order, once each; every search is charged to
    ``spend`` before it runs (its worst case) and after (the bytes it went over)."""
    position = 0
    line = 1
    counted = 0  # offset up to which line feeds are counted into ``line``
    where = f"the search in {path!r}"
    while position <= len(data):
        spend.regex(pattern.programsize, len(data) - position, where)
        match = pattern.search(data, position)
        spend.scan((len(data) if match is None else match.end()) - position, where)
        if match is None:
            return
        begin = match.start()
        if begin == len(data) and data.endswith(b"\n"):
            return  # after the last line feed there is no line
        line += data.count(b"\n", counted, begin)
        counted = begin
        line_start = data.rfind(b"\n", 0, begin) + 1
        line_end = data.find(b"\n", begin)
        line_end = len(data) if line_end < 0 else line_end
        text = data[line_start:line_end].decode("utf-8", "replace")
        column = len(data[line_start:begin].decode("utf-8", "replace"))
        yield SearchHit(path, line, text, oid, column)
        position = line_end + 1  # the next line: one hit per line


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
