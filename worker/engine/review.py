"""What a dry run answers besides ``applied``: a unified diff of every changed file, the batch's checks,
and warnings.

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

Every changed file is diffed (its line counts are among the checks), each diff charged to the batch's
budget before it runs (its two sides as bytes scanned, and the CPU time checked); the diffs answered hold
at most ``DIFF_BUDGET`` characters in all. The entry that crosses ``DIFF_BUDGET`` is cut at a line and
marked ``truncated``, later entries have an empty diff and ``truncated``; so does every entry from the one
the batch's budget ran out at.

Checks (``Checks``): what an agent would otherwise verify by reading the diff, computed on the two trees.

- ``files`` (``FileCheck``): every changed file, in the diff's order: how it changed (``created``,
  ``modified``, ``moved``, ``deleted``), the lines git's diff adds and removes (None when it does not diff
  the file line by line: not UTF-8, too large, or the budget ran out), the links ``rewrite_links`` entries
  rewrote in it, the code pieces it gained and lost (below), and ``named``: False for a file no
  ``applied`` entry names but ``rewrite_links`` ones, changed only because links in it were rewritten.
- ``links`` (``LinkCheck``): the page links that resolve to no file (``missing``, ``ambiguous``,
  ``outside``), counted before the batch in the head's pages and after it in the result's, over the pages
  ``LINK_BROKEN`` looks at (below): every page the batch changed (a moved page under its old path before,
  a deleted one only before) and every page mentioning a file it added or removed; ``ambiguous_after``
  the ones of them that are ambiguous after it.
- ``code_changed``: the code pieces of the changed pages (fenced and indented code blocks, a fence's lines
  included, and inline code spans; line endings aside) that a page gained or lost, counted as multisets of
  texts between a page's old version (its head file, the one it moved from for a move) and its new one; a
  piece that leaves one changed page and arrives unchanged in another (an extracted section, merged pages)
  counts in neither (``FileCheck.code_added`` and ``code_removed``, the pieces moved taken off in path
  order).

Each part is charged to the batch's budget; a part the budget runs out in is None (``files``: line
counts None from that file on; with ``code_changed`` None no file counts code) and ``unchecked`` says which
and why: nothing is guessed.

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
from dataclasses import asdict, dataclass, field
from typing import Literal

import pygit2
from pygit2.enums import DiffOption

from worker.engine.budget import Budget, OverBudget, active, checked, current
from worker.engine.markdown import FileIndex, broken_links, find_links, resolve
from worker.engine.markdown.document import parse, strip_ending
from worker.engine.markdown.inline import code_spans
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


Change = Literal["created", "modified", "moved", "deleted"]


@dataclass(frozen=True)
class FileCheck:
    """One changed file of ``Checks`` (see the module docstring)."""

    path: str
    change: Change
    old_path: str | None = None
    added: int | None = None
    removed: int | None = None
    links: int | None = None
    code_added: int = 0
    code_removed: int = 0
    named: bool = True

    def to_dict(self) -> dict[str, object]:
        """The JSON form: ``old_path``, ``links`` and the code counts only when they apply."""
        out: dict[str, object] = {"path": self.path}
        if self.old_path is not None:
            out["old_path"] = self.old_path
        out |= {"change": self.change, "added": self.added, "removed": self.removed}
        if self.links is not None:
            out["links"] = self.links
        if self.code_added:
            out["code_added"] = self.code_added
        if self.code_removed:
            out["code_removed"] = self.code_removed
        out["named"] = self.named
        return out


@dataclass(frozen=True)
class LinkCheck:
    """Broken page links in the pages the batch may affect, before and after it."""

    pages: int
    broken_before: int
    broken_after: int
    ambiguous_after: int

    def to_dict(self) -> dict[str, object]:
        """The JSON form: its fields, by name."""
        return asdict(self)


@dataclass
class Checks:
    """The batch's checks (see the module docstring); None for a part not computed, ``unchecked`` why."""

    files: list[FileCheck] = field(default_factory=list)
    links: LinkCheck | None = None
    code_changed: int | None = None
    unchecked: list[str] = field(default_factory=list)

    @property
    def unnamed(self) -> int:
        """How many changed files no edit named."""
        return sum(not file.named for file in self.files)

    def to_dict(self) -> dict[str, object]:
        """The JSON form; ``unchecked`` only when a part was not computed."""
        out: dict[str, object] = {
            "links": None if self.links is None else self.links.to_dict(),
            "code_changed": self.code_changed,
            "unnamed": self.unnamed,
            "files": [file.to_dict() for file in self.files],
        }
        if self.unchecked:
            out["unchecked"] = list(self.unchecked)
        return out


@dataclass
class Review:
    """A dry run's diff, checks and warnings."""

    diff: list[FileDiff] = field(default_factory=list)
    warnings: list[BatchWarning] = field(default_factory=list)
    checks: Checks = field(default_factory=Checks)


class _Result:
    """The files of the head and of the plan's result, read lazily, and their code pieces, kept."""

    def __init__(self, head: HeadView, plan: Plan) -> None:
        self.head = head
        self.plan = plan
        self._code: dict[tuple[bool, str], list[str]] = {}
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

    def code(self, path: str, old: bool) -> list[str]:
        """``code_pieces`` of the page at ``path`` in the head (``old``) or the result; none for a file
        that is not a page or not there."""
        key = (old, path)
        if key not in self._code:
            data = self.old(path) if old else self.new(path)
            self._code[key] = code_pieces(_text(data)) if is_page(path) else []
        return self._code[key]


def review(head: HeadView, plan: Plan, policy: ZonePolicy) -> Review:
    """The diff, the checks and the warnings of ``plan`` against ``head`` (see the module docstring).

    The review spends what is left of the batch's budget (``plan.budget``): when that runs out, the
    warnings found so far are kept, one ``TRUNCATED`` warning says the rest was not looked for, the
    check it ran out in is None and named in ``unchecked``, and the diff stops where it was."""
    result = _Result(head, plan)
    warnings = list(plan.warnings)
    checks = Checks()
    with active(plan.budget or Budget()):
        try:
            checks.links = _broken(result, warnings)
        except OverBudget as over:
            warnings.append(BatchWarning("TRUNCATED", "", f"links were not all checked: {over.message}"))
            checks.unchecked.append(f"links: {over.message}")
        try:
            warnings += _unindexed(result, policy)
        except OverBudget as over:
            warnings.append(BatchWarning("TRUNCATED", "", f"index.md was not checked: {over.message}"))
        if len(warnings) > MAX_WARNINGS:
            more = len(warnings) - MAX_WARNINGS
            warnings = warnings[:MAX_WARNINGS]
            warnings.append(BatchWarning("TRUNCATED", "", f"{more} more warnings are not shown"))
        code: dict[str, tuple[int, int]] | None = None
        try:
            code = _code(result)
            checks.code_changed = sum(a + r for a, r in code.values())
        except OverBudget as over:
            checks.unchecked.append(f"code: {over.message}")
        diff, checks.files, spent = _diffs(result, code or {})
        if spent is not None:
            checks.unchecked.append(f"lines: {spent}")
        return Review(diff=diff, warnings=warnings, checks=checks)


# -- diff --------------------------------------------------------------------------------------------


def _diffs(
    result: _Result, code: dict[str, tuple[int, int]]
) -> tuple[list[FileDiff], list[FileCheck], str | None]:
    """The diff entries and the ``FileCheck`` of every changed file, and why the budget stopped the line
    counts (None when it did not). Every file is diffed for its counts; its text is kept while the
    answer's ``DIFF_BUDGET`` lasts."""
    plan = result.plan
    moved_away = set(plan.renamed.values())
    links: Counter[str] = Counter()
    named: set[str] = set()
    for entry in plan.applied:
        if entry.op == "rewrite_links":
            links[entry.path] += entry.count or 0
        else:
            named.add(entry.path)
            if entry.new_path is not None:
                named.add(entry.new_path)
    out: list[FileDiff] = []
    files: list[FileCheck] = []
    left = DIFF_BUDGET
    spent: str | None = None
    spend = current()
    for path in sorted(plan.changes):
        file = plan.changes[path]
        origin = plan.renamed.get(path)
        if file is None and path in moved_away:
            continue  # shown with the file it moved to
        old_path = origin or path
        counted: tuple[str, int | None, int | None] | None = None
        if spent is None:
            try:
                spend.check("the diff")
                counted = _patch(old_path, result.old(old_path), path, result.new(path))
            except OverBudget as over:
                spent = over.message
        text, added, removed = counted or ("", None, None)
        truncated = counted is None or left <= 0 or len(text) > left
        if truncated:  # this entry is cut at a line, and every later one is empty
            text = text[: text.rfind("\n", 0, left) + 1] if left > 0 else ""
            left = 0
        else:
            left -= len(text)
        out.append(FileDiff(path, text, origin, truncated))
        change: Change = "modified"
        if file is None:
            change = "deleted"
        elif origin is not None:
            change = "moved"
        elif path not in result.before:
            change = "created"
        rewritten = links[path] + (links[origin] if origin is not None else 0)
        code_added, code_removed = code.get(path, (0, 0))
        files.append(
            FileCheck(
                path,
                change,
                origin,
                added,
                removed,
                rewritten if path in links or origin in links else None,
                code_added,
                code_removed,
                path in named or old_path in named,
            )
        )
    return out, files, spent


def file_diff(old_path: str, old: bytes | None, new_path: str, new: bytes | None) -> str:
    """The unified diff of one file (``None`` for a side where the file does not exist), in the form the
    module docstring describes; ``""`` when both sides hold the same text. The two sides are charged to
    the budget in force as bytes scanned before they are diffed: ``OverBudget`` when that is over."""
    return _patch(old_path, old, new_path, new)[0]


def _patch(
    old_path: str, old: bytes | None, new_path: str, new: bytes | None
) -> tuple[str, int | None, int | None]:
    """``file_diff``'s text, and the lines it adds and removes (None when it is not a line diff)."""
    before = f"a/{old_path}" if old is not None else "/dev/null"
    after = f"b/{new_path}" if new is not None else "/dev/null"
    if old == new and old_path != new_path:
        return f"rename from {old_path}\nrename to {new_path}\n", 0, 0
    old_data, new_data = old or b"", new or b""
    try:
        old_data.decode("utf-8")
        new_data.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary files {before} and {after} differ\n", None, None
    if len(old_data) > DIFF_FILE_BYTES or len(new_data) > DIFF_FILE_BYTES:
        too_large = f"(too large to diff: {len(old_data)} -> {len(new_data)} bytes)"
        return f"--- {before}\n+++ {after}\n{too_large}\n", None, None
    old_lines, new_lines = _lines(old_data), _lines(new_data)
    if old_lines > DIFF_FILE_LINES or new_lines > DIFF_FILE_LINES:
        return (
            f"--- {before}\n+++ {after}\n(too large to diff: {old_lines} -> {new_lines} lines)\n",
            None,
            None,
        )
    current().scan(len(old_data) + len(new_data), f"the diff of {new_path!r}")
    # FORCE_TEXT: git would call a side with a NUL byte binary; here every UTF-8 side is text
    patch = pygit2.Patch.create_from(
        old_data, new_data, "x", "x", flag=DiffOption.FORCE_TEXT, context_lines=3, interhunk_lines=0
    )
    _, added, removed = patch.line_stats
    data = patch.data
    first = data.find(b"\n@@ ")  # git's header lines come first; each hunk starts with @@
    if first < 0:
        return "", added, removed
    # decoded once git's function lines (a line's first bytes, cut at a length) are dropped: what is left
    # is whole lines of the two UTF-8 sides
    hunks = _HUNK_CONTEXT.sub(rb"\1", data[first + 1 :]).decode("utf-8")
    return f"--- {before}\n+++ {after}\n" + hunks, added, removed


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


def _broken(result: _Result, warnings: list[BatchWarning]) -> LinkCheck:
    """The broken links of the pages the batch may affect, before and after it; each link broken after
    it that was not before (compared per page by the link's text) added to ``warnings`` as it is found."""
    plan = result.plan
    added = result.after - result.before
    removed = result.before - result.after
    pages = {path for path, file in plan.changes.items() if file is not None}
    if added or removed:
        needles = link_needles(added | removed)
        mentioned = result.head.mentioning(needles) if needles is not None else None
        pages |= set(result.before if mentioned is None else mentioned) & result.after
    before_index = result.head.file_index()
    after_index = before_index.changed(removed, added)
    looked = 0
    broken_before = broken_after = ambiguous = 0
    seen_before: set[str] = set()
    for page in sorted(pages):
        if not is_page(page):
            continue
        origin = plan.renamed.get(page, page)
        old_text = _text(result.old(origin)) if is_page(origin) else None
        old_broken = broken_links(origin, old_text, before_index) if old_text is not None else []
        if old_text is not None:
            seen_before.add(origin)
        broken_before += len(old_broken)
        text = _text(result.new(page))
        looked += 1
        if page in plan.changes:  # its code now, while both sides' parses are in parse()'s cache
            result.code(origin, True)
            result.code(page, False)
        if text is None:
            continue
        was = Counter(b.link.text for b in old_broken)
        for found in broken_links(page, text, after_index):
            broken_after += 1
            ambiguous += found.resolution.reason == "ambiguous"
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
    for page in sorted(removed - seen_before):  # deleted, or moved to a path that is not a page
        old_text = _text(result.old(page)) if is_page(page) else None
        if old_text is not None:
            looked += 1
            broken_before += len(broken_links(page, old_text, before_index))
    return LinkCheck(looked, broken_before, broken_after, ambiguous)


def _code(result: _Result) -> dict[str, tuple[int, int]]:
    """The code pieces each changed file gained and lost (see the module docstring), by its path."""
    plan = result.plan
    moved_away = set(plan.renamed.values())
    sides: dict[str, tuple[Counter[str], Counter[str]]] = {}
    for path in checked(sorted(plan.changes), "comparing code", every=16):
        if plan.changes[path] is None and path in moved_away:
            continue
        origin = plan.renamed.get(path, path)
        old, new = Counter(result.code(origin, True)), Counter(result.code(path, False))
        sides[path] = (new - old, old - new)
    gained: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    for more, less in sides.values():
        gained += more
        lost += less
    give, take = gained & lost, gained & lost  # pieces that only moved between changed pages
    out: dict[str, tuple[int, int]] = {}
    for path, (more, less) in sides.items():
        out[path] = (_unmoved(more, give), _unmoved(less, take))
    return out


def _unmoved(pieces: Counter[str], moved: Counter[str]) -> int:
    """How many of ``pieces`` are left once those still in ``moved`` are taken off (and off ``moved``)."""
    left = 0
    for text, count in pieces.items():
        off = min(count, moved[text])
        moved[text] -= off
        left += count - off
    return left


def code_pieces(text: str | None) -> list[str]:
    """The code of the page ``text``, piece by piece in source order: each fenced or indented code block
    (its lines, a fence's included, without their line endings, joined by ``\\n``), then each inline code
    span with its backticks (line breaks in it as ``\\n``). None (not UTF-8) has none."""
    if text is None:
        return []
    doc = parse(text)
    pieces = ["\n".join(strip_ending(line) for line in doc.lines[a:b]) for a, b in doc.code_blocks]
    for start_line, end_line in checked(doc.inlines, "reading code", every=64):
        start = doc.offsets[start_line]
        end = doc.offsets[end_line] if end_line < len(doc.lines) else len(text)
        for span_start, span_end in code_spans(text, start, end):
            span = text[span_start:span_end]
            pieces.append(span.replace("\r\n", "\n").replace("\r", "\n"))
    return pieces


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
