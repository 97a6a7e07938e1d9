"""Replacements with a user's literal text or RE2 pattern (never Python's ``re`` on a user pattern).

A pattern is RE2 syntax (https://github.com/google/re2/wiki/Syntax): no backreferences or look-around,
``$`` is the end of the text unless ``(?m)``, ``.`` does not match a line break unless ``(?s)``; flags go
inline (``(?i)``). RE2 finds a match in time linear in the text, whatever the pattern: ``(a+)+$`` over a
hundred thousand ``a`` is instant. Matches are found left to right without overlap; an empty match where
the previous match ended is skipped (Go's and RE2's rule: ``a*`` over ``baac`` matches 3 times).

The replacement ``new`` for a pattern may refer to groups: ``\\1`` to ``\\99`` (two digits are read when
present: write ``\\g<1>0`` for group 1 then ``0``), ``\\g<N>`` and ``\\g<name>``; ``\\0`` and ``\\g<0>``
are the whole match; ``\\\\`` is one backslash, ``\\n``, ``\\r`` and ``\\t`` a line feed, carriage
return and tab. Any other backslash, or a group the pattern does not have, is ``PATTERN_INVALID``. A
group that took no part in the match gives the empty string. With a literal ``old``, ``new`` is literal.

Cost: each search is linear in the text, but the factor is the pattern's program size when RE2's DFA
gives way to its NFA (``a[ab]{1000}c`` over text of ``a`` and ``b``), and a pattern whose leftmost match
is short but which must look to the end of the text to rule out a longer alternative (``a.*b|a``) costs a
scan of the rest of the text per match. So every search is charged to the budget in force before it
starts (program size x bytes, ``budget.Budget.regex``) and the CPU time is checked after every match.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2

from worker.engine.budget import Budget, current
from worker.engine.markdown.bounds import TooLarge
from worker.errors import BatchRejected

_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}

Template = list[str | int]


def compile_pattern(pattern: str, index: int | None = None) -> Any:
    """The compiled RE2 ``pattern``, or ``PATTERN_INVALID`` with RE2's reason (a pattern too large for
    the budget's ``re2_max_mem`` is one)."""
    if not pattern:
        raise BatchRejected("PATTERN_INVALID", "the pattern is empty", index)
    options = re2.Options()
    options.log_errors = False  # the reason goes to the caller, not to the worker's stderr
    options.max_mem = current().costs.re2_max_mem
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise BatchRejected("PATTERN_INVALID", f"invalid RE2 pattern {pattern!r}: {reason}", index) from None


def parse_template(new: str, groups: int, names: dict[str, int], index: int | None = None) -> Template:
    """``new`` as literal pieces (str) and group numbers (int), checked against the pattern's groups."""
    pieces: Template = []
    literal: list[str] = []
    position = 0

    def group(number: int, written: str) -> None:
        if number > groups:
            raise BatchRejected(
                "PATTERN_INVALID",
                f"{written} in 'new' refers to group {number}, but the pattern has {groups} groups"
                + (" (write \\g<1>0 for group 1 then 0)" if len(written) == 3 else ""),
                index,
            )
        if literal:
            pieces.append("".join(literal))
            literal.clear()
        pieces.append(number)

    while position < len(new):
        char = new[position]
        if char != "\\":
            literal.append(char)
            position += 1
            continue
        following = new[position + 1 : position + 2]
        if following in _ESCAPES:
            literal.append(_ESCAPES[following])
            position += 2
        elif following.isdigit() and following.isascii():
            digits = following
            if new[position + 2 : position + 3].isdigit() and new[position + 2 : position + 3].isascii():
                digits += new[position + 2]
            group(int(digits), "\\" + digits)
            position += 1 + len(digits)
        elif following == "g" and new[position + 2 : position + 3] == "<" and ">" in new[position + 3 :]:
            close = new.index(">", position + 3)
            name = new[position + 3 : close]
            if name.isdigit() and name.isascii():
                group(int(name), f"\\g<{name}>")
            elif name in names:
                group(names[name], f"\\g<{name}>")
            else:
                raise BatchRejected(
                    "PATTERN_INVALID", f"'new' names group {name!r}, which the pattern lacks", index
                )
            position = close + 1
        else:
            written = "\\" + following
            raise BatchRejected(
                "PATTERN_INVALID",
                f"unknown escape {written!r} in 'new': use \\1 or \\g<name> for groups, \\\\ for a backslash",
                index,
            )
    if literal:
        pieces.append("".join(literal))
    return pieces


def count_and_replace(
    text: str,
    *,
    new: str,
    old: str | None = None,
    pattern: str | None = None,
    index: int | None = None,
    max_size: int | None = None,
    where: str = "the page",
) -> tuple[str, int]:
    """``text`` with every occurrence of ``old`` (exact text) or match of ``pattern`` (RE2) replaced by
    ``new``, and how many there were (0: ``text`` unchanged).

    Bounds: with ``max_size``, ``TooLarge`` (``bounds``) when the result would be over that many UTF-8
    bytes (checked before a literal replacement is built, and as a pattern's result grows); the work is
    charged to the budget in force (``budget.current``), ``OverBudget`` naming ``where`` when it is
    spent: before each search of a pattern, and after every match."""
    if (old is None) == (pattern is None):
        raise BatchRejected("INVALID_BATCH", "give exactly one of 'old' and 'pattern'", index)
    if old is not None:
        if not old:
            raise BatchRejected("INVALID_BATCH", "'old' must not be empty", index)
        current().scan(len(text), where)
        count = text.count(old)
        if count and max_size is not None:
            size = len(text.encode()) + count * (len(new.encode()) - len(old.encode()))
            if size > max_size:
                raise TooLarge(size)
        return (text.replace(old, new), count) if count else (text, 0)
    assert pattern is not None
    regex = compile_pattern(pattern, index)
    template = parse_template(new, regex.groups, dict(regex.groupindex), index)
    encoded = [piece.encode() if isinstance(piece, str) else piece for piece in template]
    # Bytes, not str: the binding re-encodes a str on every search, which would make many matches cost
    # quadratic time. RE2 matches UTF-8 text at character boundaries, so every slice decodes.
    data = text.encode()
    pieces: list[bytes] = []
    copied = 0
    count = 0
    size = len(data)
    spend = current()
    for match in _matches(regex, data, spend, where):
        spend.check(where)
        start, end = match.span()
        pieces.append(data[copied:start])
        size -= end - start
        for piece in encoded:
            value = piece if isinstance(piece, bytes) else (match.group(piece) or b"")
            size += len(value)
            pieces.append(value)
        if max_size is not None and size > max_size:
            raise TooLarge(size)
        copied = end
        count += 1
    if not count:
        return text, 0
    pieces.append(data[copied:])
    return b"".join(pieces).decode(), count


def _matches(regex: Any, data: bytes, spend: Budget, where: str) -> Iterator[Any]:
    """The successive non-overlapping matches of ``regex`` in ``data``; an empty match right where the
    previous match ended is skipped (Go's and RE2's global-replace rule). Each search is charged to
    ``spend`` before it runs."""
    position = 0
    previous_end = -1
    while position <= len(data):
        spend.regex(regex.programsize, len(data) - position, where)
        match = regex.search(data, position)
        spend.scan((len(data) if match is None else match.end()) - position, where)
        if match is None:
            return
        start, end = match.span()
        if start == end:
            if start != previous_end:
                yield match
            previous_end = end
            position = _next_char(data, end)
            continue
        yield match
        previous_end = position = end


def _next_char(data: bytes, position: int) -> int:
    """The offset of the UTF-8 character after the one at ``position`` (past the end: ``len + 1``)."""
    position += 1
    while position < len(data) and 0x80 <= data[position] < 0xC0:
        position += 1
    return position
