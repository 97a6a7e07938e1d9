"""What a dry run answers besides ``applied``: a unified diff of every changed file, and warnings.

``review(head, plan, policy)`` is pure: it compares the plan's result with the head.

Diff (``FileDiff``): one entry per changed file, in path order, a unified diff with three lines of
context made by git's own diff (libgit2's xdiff through pygit2, on the two buffers: no repository is
opened), without git's ``diff --git`` and ``index`` lines and without the text git puts after a hunk's
``@@ ... @@``: ``--- a/<path>`` / ``+++ b/<path>``, ``/dev/null`` for a created or deleted file; a moved
file is diffed against the head file it came from, and a move without a content change is
``rename from <old>`` / ``rename to <new>``. Lines end at ``\\n``, as git counts them; a line without a
final line break is followed by ``\\ No newline at end of file``; a file that is not UTF-8 is
``Binary files ... differ``; a side over ``DIFF_FILE_BYTES`` bytes or ``DIFF_FILE_LINES`` lines is not
diffed line by line (one diff cannot be stopped halfway: these bound its worst case).

Each diff is charged to the batch's budget before it runs (its two sides as bytes scanned, and the CPU
time checked); all diffs together hold at most ``DIFF_BUDGET`` characters. The entry that crosses
``DIFF_BUDGET`` is cut at a line and marked ``truncated``, later entries have an empty diff and
``truncated``; so does every entry from the one the batch's budget ran out at.

Warnings (``BatchWarning``), at most ``MAX_WARNINGS`` (then one ``TRUNCATED``):

- ``LINK_BROKEN``: a page link that resolves to no file after the batch (``missing``, ``ambiguous``,
  ``outside``) and was not already broken before it, in a changed page or in a page that mentions a file
  the batch added or removed (``mentions.link_needles``); links are compared per page by their text, so
  only breakage the batch causes is reported;
- ``NOT_IN_INDEX``: a page made by ``create`` (``.md``, in a zone that allows in-place changes, so not
  ``raw/``) that ``index.md`` does not link to, when there is an ``index.md``;
- whatever preflight reported (``NOT_REWRITTEN``: links or matches in a page no op may change).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import pygit2
from pygit2.enums import DiffOption

from worker.engine.budget import Budget, OverBudget, active, checked, current
from worker.engine.markdown import FileIndex, broken_links, find_links, resolve
from worker.engine.mentions import is_page, link_needles
from worker.engine.paths import ZonePolicy
from worker.engine.plan import BatchWarning, HeadView, Plan
from worker.engine.state import check_zone
from worker.errors import BatchRejected

DIFF_BUDGET = 256 * 1024  # characters of diff a dry run answers in all
DIFF_FILE_BYTES = 512 * 1024  # a side larger than this is not diffed line by line
DIFF_FILE_LINES = 50_000  # nor a side of more lines than this
MAX_WARNINGS = 500
INDEX = "index.md"


@dataclass(frozen=True)
class FileDiff:
    """The diff of one changed file; ``old_path`` when it moved, ``truncated`` when cut to the budget."""

    path: str
    diff: str
    old_path: str | None = None
    truncated: bool = False

    def to_dict(self) -> dict[str, object]:
        """The JSON form: ``old_path`` and ``truncated`` only when they apply."""
        out: dict[str, object] = {"path": self.path}
        if self.old_path is not None:
            out["old_path"] = self.old_path
        out["diff"] = self.diff
        if self.truncated:
            out["truncated"] = True
        return out


@dataclass
class Review:
    """A dry run's diff and warnings."""

    diff: list[FileDiff] = field(default_factory=list)
    warnings: list[BatchWarning] = field(default_factory=list)


class _Result:
    """The files of the head and of the plan's result, read lazily."""

    def __init__(self, head: HeadView, plan: Plan) -> None:
        self.head = head
        self.plan = plan
        self.before = set(head.file_index().files)
        self.after = set(self.before)
        for path, file in plan.changes.items():
            if file is None:
                self.after.discard(path)
            else:
                self.after.add(path)

    def old(self, path: str) -> bytes | None:
        return self.head.read(path) if path in self.before else None

    def new(self, path: str) -> bytes | None:
        if path in self.plan.changes:
            file = self.plan.changes[path]
            if file is None:
                return None
            return file.data if file.data is not None else self.head.read(file.source or path)
        return self.head.read(path) if path in self.before else None


def review(head: HeadView, plan: Plan, policy: ZonePolicy) -> Review:
    """The diff and the warnings of ``plan`` against ``head`` (see the module docstring).

    The review spends what is left of the batch's budget (``plan.budget``): when that runs out, the
    warnings found so far are kept, one ``TRUNCATED`` warning says the rest was not looked for, and the
    diff stops where it was."""
    result = _Result(head, plan)
    warnings = list(plan.warnings)
    with active(plan.budget or Budget()):
        try:
            warnings += _broken(result)
            warnings += _unindexed(result, policy)
        except OverBudget as over:
            warnings.append(BatchWarning("TRUNCATED", "", f"links were not all checked: {over.message}"))
        if len(warnings) > MAX_WARNINGS:
            more = len(warnings) - MAX_WARNINGS
            warnings = warnings[:MAX_WARNINGS]
            warnings.append(BatchWarning("TRUNCATED", "", f"{more} more warnings are not shown"))
        return Review(diff=_diffs(result), warnings=warnings)


# -- diff --------------------------------------------------------------------------------------------


def _diffs(result: _Result) -> list[FileDiff]:
    plan = result.plan
    moved_away = set(plan.renamed.values())
    out: list[FileDiff] = []
    left = DIFF_BUDGET
    spend = current()
    for path in sorted(plan.changes):
        file = plan.changes[path]
        origin = plan.renamed.get(path)
        if file is None and path in moved_away:
            continue  # shown with the file it moved to
        old_path = origin or path
        if left > 0:
            try:
                spend.check("the diff")
                text = file_diff(old_path, result.old(old_path), path, result.new(path))
            except OverBudget:
                left = 0
        if left <= 0:
            out.append(FileDiff(path, "", origin, truncated=True))
            continue
        truncated = len(text) > left
        if truncated:
            text = text[: text.rfind("\n", 0, left) + 1]
        left -= len(text)
        out.append(FileDiff(path, text, origin, truncated))
    return out


def file_diff(old_path: str, old: bytes | None, new_path: str, new: bytes | None) -> str:
    """The unified diff of one file (``None`` for a side where the file does not exist), in the form the
    module docstring describes; ``""`` when both sides hold the same text. The two sides are charged to
    the budget in force as bytes scanned before they are diffed: ``OverBudget`` when that is over."""
    before = f"a/{old_path}" if old is not None else "/dev/null"
    after = f"b/{new_path}" if new is not None else "/dev/null"
    if old == new and old_path != new_path:
        return f"rename from {old_path}\nrename to {new_path}\n"
    old_data, new_data = old or b"", new or b""
    try:
        old_data.decode("utf-8")
        new_data.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary files {before} and {after} differ\n"
    if len(old_data) > DIFF_FILE_BYTES or len(new_data) > DIFF_FILE_BYTES:
        return f"--- {before}\n+++ {after}\n(too large to diff: {len(old_data)} -> {len(new_data)} bytes)\n"
    old_lines, new_lines = _lines(old_data), _lines(new_data)
    if old_lines > DIFF_FILE_LINES or new_lines > DIFF_FILE_LINES:
        return f"--- {before}\n+++ {after}\n(too large to diff: {old_lines} -> {new_lines} lines)\n"
    current().scan(len(old_data) + len(new_data), f"the diff of {new_path!r}")
    # FORCE_TEXT: git would call a side with a NUL byte binary; here every UTF-8 side is text
    patch = pygit2.Patch.create_from(
        old_data, new_data, "x", "x", flag=DiffOption.FORCE_TEXT, context_lines=3, interhunk_lines=0
    )
    data = patch.data
    first = data.find(b"\n@@ ")  # git's header lines come first; each hunk starts with @@
    if first < 0:
        return ""
    # decoded once git's function lines (a line's first bytes, cut at a length) are dropped: what is left
    # is whole lines of the two UTF-8 sides
    hunks = _HUNK_CONTEXT.sub(rb"\1", data[first + 1 :]).decode("utf-8")
    return f"--- {before}\n+++ {after}\n" + hunks


# A hunk's header as git writes it, and the line git copies after it (a "function" line, which in
# markdown is whatever line above the hunk starts with a letter): the header is kept, that line dropped.
# Every other line of a hunk starts with " ", "+", "-" or "\\", so a line starting "@@" is a header.
_HUNK_CONTEXT = re.compile(rb"^(@@ -[0-9]+(?:,[0-9]+)? \+[0-9]+(?:,[0-9]+)? @@).*$", re.MULTILINE)


def _lines(data: bytes) -> int:
    """How many lines git counts in ``data``: one per line break, and the last line if it has none."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


# -- warnings ----------------------------------------------------------------------------------------


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _broken(result: _Result) -> list[BatchWarning]:
    plan = result.plan
    added = result.after - result.before
    removed = result.before - result.after
    pages = {path for path, file in plan.changes.items() if file is not None}
    if added or removed:
        needles = link_needles(added | removed)
        mentioned = result.head.mentioning(needles) if needles is not None else None
        pages |= set(result.before if mentioned is None else mentioned) & result.after
    if not pages:
        return []
    before_index = result.head.file_index()
    after_index = before_index.changed(removed, added)
    warnings = []
    for page in sorted(pages):
        text = _text(result.new(page)) if is_page(page) else None
        if text is None:
            continue
        origin = plan.renamed.get(page, page)
        old_text = _text(result.old(origin))
        was = Counter(
            b.link.text
            for b in (broken_links(origin, old_text, before_index) if old_text is not None else ())
        )
        for found in broken_links(page, text, after_index):
            if was[found.link.text]:
                was[found.link.text] -= 1
                continue
            why = found.resolution.reason
            if found.resolution.candidates:
                why += " between " + ", ".join(found.resolution.candidates)
            warnings.append(
                BatchWarning(
                    "LINK_BROKEN",
                    page,
                    f"{found.link.text} on line {found.link.line} resolves to no file after this batch "
                    f"({why}); fix its target or the file it names",
                    found.link.line,
                    found.link.text,
                )
            )
    return warnings


def _unindexed(result: _Result, policy: ZonePolicy) -> list[BatchWarning]:
    index_text = _text(result.new(INDEX))
    if index_text is None:
        return []
    made = [p for p in result.plan.created if p != INDEX and is_page(p) and _may_edit(policy, p)]
    if not made:
        return []
    files = FileIndex(result.after)
    linked = {resolve(link, INDEX, files) for link in checked(find_links(index_text), "checking index.md")}
    return [
        BatchWarning(
            "NOT_IN_INDEX",
            path,
            f"{path!r} is new and index.md does not link to it; add a link to index.md in this batch",
        )
        for path in made
        if path not in linked
    ]


def _may_edit(policy: ZonePolicy, path: str) -> bool:
    try:
        check_zone(policy, "replace", path, None)
    except BatchRejected:
        return False
    return True
