"""What a dry run answers besides ``applied``: a unified diff of every changed file, and warnings.

``review(head, plan, policy)`` is pure: it compares the plan's result with the head.

Diff (``FileDiff``): one entry per changed file, in path order, as ``difflib.unified_diff`` with three
lines of context (``--- a/<path>`` / ``+++ b/<path>``, ``/dev/null`` for a created or deleted file; a
moved file is diffed against the head file it came from, and a move without a content change is
``rename from <old>`` / ``rename to <new>``). A line without a final line break is followed by
``\\ No newline at end of file``; a file that is not UTF-8 is ``Binary files ... differ``; a side over
``DIFF_FILE_BYTES`` is not diffed line by line. All diffs together hold at most ``DIFF_BUDGET``
characters: the entry that crosses it is cut and marked ``truncated``, later entries have an empty diff
and ``truncated``; so does every entry after the batch's CPU budget ran out.

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

import difflib
from collections import Counter
from dataclasses import dataclass, field

from worker.engine.budget import Budget, OverBudget, active, checked, current
from worker.engine.markdown import FileIndex, broken_links, find_links, resolve
from worker.engine.mentions import is_page, link_needles
from worker.engine.paths import ZonePolicy
from worker.engine.plan import BatchWarning, HeadView, Plan
from worker.engine.state import check_zone
from worker.errors import BatchRejected

DIFF_BUDGET = 256 * 1024  # characters of diff a dry run answers in all
DIFF_FILE_BYTES = 512 * 1024  # a side larger than this is not diffed line by line
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
        if left > 0:
            try:
                spend.check("the diff")
            except OverBudget:
                left = 0
        if left <= 0:
            out.append(FileDiff(path, "", origin, truncated=True))
            continue
        old_path = origin or path
        text = file_diff(old_path, result.old(old_path), path, result.new(path))
        truncated = len(text) > left
        if truncated:
            text = text[: text.rfind("\n", 0, left) + 1]
        left -= len(text)
        out.append(FileDiff(path, text, origin, truncated))
    return out


def file_diff(old_path: str, old: bytes | None, new_path: str, new: bytes | None) -> str:
    """The unified diff of one file (``None`` for a side where the file does not exist)."""
    before = f"a/{old_path}" if old is not None else "/dev/null"
    after = f"b/{new_path}" if new is not None else "/dev/null"
    if old == new and old_path != new_path:
        return f"rename from {old_path}\nrename to {new_path}\n"
    try:
        old_text = "" if old is None else old.decode("utf-8")
        new_text = "" if new is None else new.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary files {before} and {after} differ\n"
    if len(old or b"") > DIFF_FILE_BYTES or len(new or b"") > DIFF_FILE_BYTES:
        return (
            f"--- {before}\n+++ {after}\n(too large to diff: {len(old or b'')} -> {len(new or b'')} bytes)\n"
        )
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), before, after
    )
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith(("\n", "\r")):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


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
