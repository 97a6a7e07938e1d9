"""A dry run's diff of one file (``review.file_diff``) and its cost: git's diff in the unified form a dry
run answers, charged to the batch's budget.

``reference`` is Python's ``difflib.unified_diff`` in the same form, an independent line diff: on
ordinary edits (lines changed, added or removed in place) both give the same text. On any input the diff
applies to the old side and gives the new one (``apply``).
"""

from __future__ import annotations

import difflib
import importlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from worker.engine import DictHead, preflight, review
from worker.engine.budget import Budget, OverBudget, active
from worker.engine.paths import DEFAULT_POLICY
from worker.engine.plan import Plan
from worker.schema.edits import Costs, Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
review_module = importlib.import_module("worker.engine.review")  # the package exports the function
file_diff = review_module.file_diff
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"


def reference(old_path: str, old: bytes | None, new_path: str, new: bytes | None) -> str:
    """The diff difflib makes, in the form of ``file_diff`` (text sides only)."""
    before = f"a/{old_path}" if old is not None else "/dev/null"
    after = f"b/{new_path}" if new is not None else "/dev/null"
    old_lines = (old or b"").decode().splitlines(keepends=True)
    new_lines = (new or b"").decode().splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(old_lines, new_lines, before, after):
        out.append(line)
        if not line.endswith(("\n", "\r")):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def split(text: str) -> list[str]:
    """``text``'s lines as git counts them: each ends at \\n, the last may have none."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def apply(old: bytes, diff: str) -> bytes:
    """``old`` patched by the unified ``diff``, asserting that each hunk holds the lines its header counts,
    has at most 3 lines of context at either end and matches ``old`` where its header says: an
    independent check that the diff says what changed."""
    rows = diff.split("\n")[:-1]
    if rows:
        assert rows[0].startswith("--- ") and rows[1].startswith("+++ "), rows[:2]
    hunks: list[tuple[int, int, int, list[tuple[str, str]]]] = []  # old start and count, new count, rows
    for number, row in enumerate(rows[2:], 2):
        header = HUNK.fullmatch(row)
        if header is not None:
            start, old_count, _, new_count = (int(group or 1) for group in header.groups())
            hunks.append((start, old_count, new_count, []))
        elif row != NO_NEWLINE:
            assert row[:1] in (" ", "-", "+") and hunks, row
            ends = rows[number + 1 : number + 2] != [NO_NEWLINE]
            hunks[-1][3].append((row[0], row[1:] + ("\n" if ends else "")))
    lines = split(old.decode())
    out: list[str] = []
    at = 0
    for start, old_count, new_count, body in hunks:
        marks = "".join(mark for mark, _ in body)
        assert (len(marks) - marks.count("+"), len(marks) - marks.count("-")) == (old_count, new_count)
        assert marks.strip(" ") and len(marks) - len(marks.lstrip(" ")) <= 3
        assert len(marks) - len(marks.rstrip(" ")) <= 3
        first = start - 1 if old_count else start
        assert first >= at
        out += lines[at:first]
        at = first
        for mark, line in body:
            if mark in " -":
                assert lines[at] == line, (at, lines[at], line)
                at += 1
            if mark in " +":
                out.append(line)
    return "".join(out + lines[at:]).encode()


PAGE = b"".join(b"Line %d of the page\n" % n for n in range(1, 31))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (PAGE, PAGE.replace(b"Line 15 ", b"Row 15 ")),
        (PAGE, PAGE.replace(b"Line 3 ", b"Row 3 ").replace(b"Line 25 ", b"Row 25 ")),
        (PAGE, PAGE.replace(b"Line 10 ", b"Row 10 ").replace(b"Line 17 ", b"Row 17 ")),
        (PAGE, PAGE.replace(b"Line 10 ", b"Row 10 ").replace(b"Line 18 ", b"Row 18 ")),
        (PAGE, PAGE.replace(b"Line 1 of the page\n", b"")),
        (PAGE, PAGE + b"one more\n"),
        (PAGE, PAGE.replace(b"Line 20 of the page\n", b"Line 20 of the page\nnew\nlines\n")),
        (PAGE, PAGE.rstrip(b"\n")),
        (PAGE.rstrip(b"\n"), PAGE.rstrip(b"\n") + b"!"),
        (b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n"),
        (b"a\x00b\nc\n", b"a\x00b\nC\n"),
        (b"# \xc3\xa9t\xc3\xa9\n\ncaf\xc3\xa9\n", b"# \xc3\xa9t\xc3\xa9\n\nth\xc3\xa9\n"),
        (None, b"new\npage\n"),
        (PAGE, None),
        (b"", b"x\n"),
        (None, b""),
        (PAGE, PAGE),
    ],
    ids=[
        "one line",
        "two hunks",
        "six lines apart: one hunk",
        "seven lines apart: two hunks",
        "first line removed",
        "line added at the end",
        "lines inserted",
        "final line break removed",
        "no final line break on either side",
        "crlf",
        "a nul byte",
        "utf-8",
        "created",
        "deleted",
        "empty file filled",
        "empty file created",
        "unchanged",
    ],
)
def test_ordinary_edits_diff_as_difflib_does(old: bytes | None, new: bytes | None) -> None:
    """The same text as difflib's diff: headers, three lines of context, hunks merged up to six equal
    lines apart, git's marker after a line with no line break, nothing after a hunk's @@ ... @@."""
    found = file_diff("wiki/p.md", old, "wiki/p.md", new)
    assert found == reference("wiki/p.md", old, "wiki/p.md", new)
    assert apply(old or b"", found) == (new or b"")


def test_the_forms_that_are_no_line_diff() -> None:
    """A pure move, a side that is not UTF-8, a side over the size or line cap."""
    assert file_diff("a.md", b"x\n", "b.md", b"x\n") == "rename from a.md\nrename to b.md\n"
    assert file_diff("p.png", b"\x89PNG\xff", "p.png", None) == "Binary files a/p.png and /dev/null differ\n"
    big = b"x" * (review_module.DIFF_FILE_BYTES + 1)
    assert file_diff("p.md", b"x\n", "p.md", big) == (
        f"--- a/p.md\n+++ b/p.md\n(too large to diff: 2 -> {len(big)} bytes)\n"
    )
    lines = review_module.DIFF_FILE_LINES
    many = b"x\n" * (lines + 1)
    assert file_diff("p.md", many, "p.md", b"x\n") == (
        f"--- a/p.md\n+++ b/p.md\n(too large to diff: {lines + 1} -> 1 lines)\n"
    )
    assert file_diff("p.md", b"x\n" * lines, "p.md", b"y\n").startswith(
        f"--- a/p.md\n+++ b/p.md\n@@ -1,{lines} +1 @@\n"
    )


def test_a_lone_carriage_return_does_not_end_a_line() -> None:
    """Lines end at \\n, as git counts them: a \\r alone is part of its line."""
    found = file_diff("p.md", b"a\rb\nc\n", "p.md", b"a\rb\nC\n")
    assert found == "--- a/p.md\n+++ b/p.md\n@@ -1,2 +1,2 @@\n a\rb\n-c\n+C\n"


LINE = st.text(st.sampled_from("ab #[]é\t"), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE, max_size=40), st.lists(LINE, max_size=40), st.booleans(), st.booleans())
def test_any_diff_turns_the_old_side_into_the_new(
    old: list[str], new: list[str], old_end: bool, new_end: bool
) -> None:
    """Whatever the two sides (repeated lines, moves, no final line break), applying the diff to the old
    side gives the new one, each hunk with at most three lines of context at either end."""
    before = "\n".join(old).encode() + (b"\n" if old_end and old else b"")
    after = "\n".join(new).encode() + (b"\n" if new_end and new else b"")
    found = file_diff("p.md", before, "p.md", after)
    assert (found == "") == (before == after)
    assert apply(before, found) == after


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_edits_in_place_diff_as_difflib_does(data: st.DataObject) -> None:
    """Distinct lines, some replaced, removed or with new ones inserted, none moved: the same text as
    difflib's diff."""
    count = data.draw(st.integers(0, 60))
    old = [f"line {n}\n" for n in range(count)]
    new: list[str] = []
    for number, line in enumerate(old):
        change = data.draw(st.sampled_from(["keep"] * 6 + ["replace", "remove", "insert"]))
        if change == "replace":
            new.append(f"changed {number}\n")
        elif change == "insert":
            new += [line, f"inserted {number}\n"]
        elif change == "keep":
            new.append(line)
    before, after = "".join(old).encode(), "".join(new).encode()
    assert file_diff("p.md", before, "p.md", after) == reference("p.md", before, "p.md", after)


# -- the budget ---------------------------------------------------------------------------------------


def plan_of(*files: tuple[str, str]) -> tuple[DictHead, Plan]:
    """A plan creating ``files`` on an empty head."""
    head = DictHead({})
    edits = [EDIT.validate_python({"op": "create", "path": path, "content": text}) for path, text in files]
    return head, preflight(head, edits)


def test_each_diff_is_charged_before_it_runs() -> None:
    """Both sides count as bytes scanned, outside a review too: over the budget is OverBudget."""
    with active(Budget(Costs(scan_bytes=1000))) as spend:
        file_diff("p.md", b"a\n" * 200, "p.md", b"b\n" * 200)
        assert spend.scanned == 800
        with pytest.raises(OverBudget):
            file_diff("p.md", b"a\n" * 200, "p.md", b"b\n" * 200)


def test_diffs_past_the_scan_budget_are_truncated() -> None:
    """A dry run whose diffs run out of bytes to scan: the file that crosses it and every later one are
    marked truncated with an empty diff, the earlier ones are whole (files that are no pages: the link
    check scans none of them)."""
    head, plan = plan_of(("wiki/x1.txt", "a\n" * 200), ("wiki/x2.txt", "b\n" * 200), ("wiki/x3.txt", "c\n"))
    plan.budget = Budget(Costs(scan_bytes=600))
    seen = review(head, plan, DEFAULT_POLICY)
    assert [(d.path, d.truncated) for d in seen.diff] == [
        ("wiki/x1.txt", False),
        ("wiki/x2.txt", True),
        ("wiki/x3.txt", True),
    ]
    assert seen.diff[0].diff.startswith("--- /dev/null\n+++ b/wiki/x1.txt\n@@ -0,0 +1,200 @@\n")
    assert [d.diff for d in seen.diff[1:]] == ["", ""]


def test_diffs_after_the_cpu_budget_ran_out_are_truncated() -> None:
    """A dry run whose budget's CPU time is spent diffs nothing: every entry is truncated and empty."""
    head, plan = plan_of(("wiki/x1.md", "a\n"), ("wiki/x2.md", "b\n"))
    times = iter([0.0])
    plan.budget = Budget(Costs(cpu_seconds=1.0), clock=lambda: next(times, 5.0))
    seen = review(head, plan, DEFAULT_POLICY)
    assert [(d.path, d.diff, d.truncated) for d in seen.diff] == [
        ("wiki/x1.md", "", True),
        ("wiki/x2.md", "", True),
    ]
