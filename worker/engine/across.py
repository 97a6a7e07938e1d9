"""``replace_across``: one replace (literal ``old`` or RE2 ``pattern``) over every page under a prefix.

The pages are the files whose path starts with ``prefix`` (and, with ``select``, pass its tests as an
``each`` edit's selector does: ``each.narrow``), as the batch left them so far, in path order;
files that are not UTF-8 text are skipped. Pages where the zone policy allows no in-place change
(``raw/``) are never changed: one that would have matched is reported as a ``NOT_REWRITTEN`` warning.
Every match is replaced (``markdown.count_and_replace``: RE2, ``new`` may use ``\\1``/``\\g<name>``); with
``outside_code``, only the occurrences of ``old`` in prose (``markdown.prose``: never in code blocks, code
spans, HTML blocks or the front matter). Each changed page gets one ``applied`` entry
``{"op": "replace_across", "path", "version", "count"}``.

Refusals: no match on any page is ``OLD_NOT_FOUND``; a total that differs from ``expected_count`` is
``COUNT_MISMATCH`` (after every page was looked at, so the message gives the real total); a page over
``max_file_bytes`` or all new bytes over ``max_output_bytes`` is ``BATCH_TOO_LARGE`` (a literal
replacement's size is known before it is built, a pattern's is checked as it grows); the matching is
charged to the batch's budget (``budget``), and crossing it is ``BATCH_TOO_COSTLY``.

Cost: with ``old``, only the pages ``HeadView.mentioning(old)`` names are read (plus those the batch
changed); a pattern reads every page under the prefix.
"""

from __future__ import annotations

import functools

from worker.engine.each import narrow
from worker.engine.markdown import compile_pattern, count_and_replace
from worker.engine.markdown.bounds import TooLarge
from worker.engine.markdown.patterns import parse_template
from worker.engine.markdown.prose import replace_in_prose
from worker.engine.state import BatchState, check_count
from worker.errors import BatchRejected
from worker.schema.edits import ReplaceAcross

_MAX_PROBE_BYTES = 4096  # a literal longer than this is not worth a text search


def check_pattern(edit: ReplaceAcross, index: int | None) -> None:
    """``PATTERN_INVALID`` for a pattern RE2 refuses or a ``new`` that names groups it lacks."""
    if edit.pattern is not None:
        regex = compile_pattern(edit.pattern, index)
        parse_template(edit.new, regex.groups, dict(regex.groupindex), index)


def replace_across(work: BatchState, index: int, edit: ReplaceAcross) -> None:
    """Apply ``edit`` to every page under its prefix (see the module docstring)."""
    check_pattern(edit, index)
    total = 0
    rewrite = functools.partial(_replaced, work, index, edit)
    for page in _pages(work, index, edit):
        total += work.rewrite_page(index, "replace_across", page, rewrite, _not_replaced)
    what = f"'old' {edit.old!r}" if edit.old is not None else f"pattern {edit.pattern!r}"
    if total == 0:
        raise BatchRejected(
            "OLD_NOT_FOUND",
            f"{what} matches nothing in the pages under {edit.prefix!r} that may be changed; check it "
            "with search_wiki (regex=true for a pattern)",
            index,
        )
    check_count(edit.expected_count, total, f"{what} matches {total} times under {edit.prefix!r}", index)


def _not_replaced(page: str, count: int) -> str:
    return (
        f"{count} match(es) in {page!r} were not replaced: this zone allows no in-place change (raw/ is "
        "create-only)"
    )


def _replaced(work: BatchState, index: int, edit: ReplaceAcross, page: str, text: str) -> tuple[str, int]:
    """One page's text after the edit, and how many matches were replaced."""
    if edit.outside_code and edit.old is not None:
        new, count = replace_in_prose(text, edit.old, edit.new)
        size = len(new.encode())
        if size > work.limits.max_file_bytes:
            raise TooLarge(size)
        return new, count
    return count_and_replace(
        text,
        new=edit.new,
        old=edit.old,
        pattern=edit.pattern,
        index=index,
        max_size=work.limits.max_file_bytes,
        where=repr(page),
    )


def _probe(old: str) -> str:
    """The longest line of ``old`` (a text search matches within one line), or "" when it is too long
    or has none."""
    longest = max(old.replace("\r", "\n").split("\n"), key=len)
    return longest if len(longest.encode()) <= _MAX_PROBE_BYTES else ""


def _pages(work: BatchState, index: int, edit: ReplaceAcross) -> list[str]:
    """The paths under the prefix to look at, in order (a superset of those that match)."""
    prefix = edit.prefix
    changed = {path for path, file in work.state.items() if file is not None}
    mentioned = None
    probe = _probe(edit.old) if edit.old is not None else ""
    if probe:
        mentioned = work.head.mentioning([probe])
    heads = work.files() if mentioned is None else {p for p in mentioned if p not in work.state} | changed
    pages = sorted(path for path in heads if path.startswith(prefix))
    return pages if edit.select is None else narrow(work, index, edit.select, pages)
