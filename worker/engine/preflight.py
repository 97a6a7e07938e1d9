"""The preflight engine: pure, in memory, no git, no Redis, no HTTP.

``preflight(head, edits, policy, limits)`` applies a batch's edits in order to a view of the head,
materialising every resulting file, and returns a ``Plan``: the new content (or deletion) of every changed
path plus the ``applied`` list. It refuses with one ``BatchRejected(code, message, index)``, the first
broken rule (contract sections 3.1 and 7), carrying every failing edit (``errors``): after a failure it
goes on with the later edits as if the failing one were not in the batch. On refusal nothing has been
written anywhere, because nothing here writes.

Each op lives in its module: ``fileops`` (create, overwrite, replace, delete), ``moves`` (rename of a
file or folder, rewrite_links), ``inplace`` (append, frontmatter, section ops), ``extract``
(extract_section), ``relink`` (retarget_links, and the link walk of every link-aware op), ``across``
(replace_across); the rules they share (versions, zones, output limits, conflicts) in ``state``; what
preflight reads and answers (``HeadView``, ``Plan``) in ``plan``.
``check_static`` runs every check that needs no repository, at submission and again here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from typing import Any

from pydantic import BaseModel

from worker.engine import across, each, extract, fileops, inplace, merge, moves, relink
from worker.engine.budget import Budget, OverBudget, active
from worker.engine.paths import DEFAULT_POLICY, ZonePolicy, check_path
from worker.engine.plan import HeadView, Plan
from worker.engine.state import BatchState, check_zone
from worker.errors import MAX_EDIT_ERROR_BYTES, MAX_EDIT_ERRORS, BatchRejected
from worker.schema.edits import (
    Append,
    AppendSection,
    Batch,
    Create,
    Delete,
    Each,
    Edit,
    ExtractSection,
    Frontmatter,
    InsertSectionAfter,
    Limits,
    MergePages,
    Overwrite,
    PageTests,
    RemoveSection,
    Rename,
    RenameSection,
    Replace,
    ReplaceAcross,
    ReplaceSection,
    RetargetLinks,
    check_limits,
    decoded,
    split_anchor,
    text_fields,
    utf8,
)

__all__ = ["check_static", "preflight"]

_APPLY: dict[type, Callable[[BatchState, int, Any], None]] = {
    Create: fileops.create,
    Overwrite: fileops.overwrite,
    Replace: fileops.replace,
    Delete: fileops.delete,
    Rename: moves.rename,
    Append: inplace.append,
    Frontmatter: inplace.frontmatter,
    ReplaceSection: inplace.section,
    AppendSection: inplace.section,
    InsertSectionAfter: inplace.section,
    RemoveSection: inplace.section,
    RenameSection: inplace.section,
    ExtractSection: extract.extract_section,
    ReplaceAcross: across.replace_across,
    RetargetLinks: relink.retarget_links,
    MergePages: merge.merge_pages,
}


def _each(work: BatchState, index: int, edit: Each) -> None:
    """Apply an ``each`` edit: its op on every page it selects, each checked as that op alone would be."""
    for one in each.expand(work, index, edit):
        check_edit(one, index, work.policy)
        _APPLY[type(one)](work, index, one)


_APPLY[Each] = _each
# the fields an ``each`` edit takes besides its selector, by ``do``: (required, allowed)
_EACH_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "frontmatter": ((), ("set", "unset")),
    "append": (("content",), ("content",)),
    "delete": ((), ("redirect_links_to",)),
    "rename": (("new_path",), ("new_path", "rewrite_links")),
}


_SECTION_OPS = (
    ReplaceSection,
    AppendSection,
    InsertSectionAfter,
    RemoveSection,
    RenameSection,
    ExtractSection,
)
# Fields the schema says are non-empty ("minLength": 1); blanks alone count as empty for headings.
_NON_EMPTY: dict[type, tuple[str, ...]] = {
    Replace: ("old",),
    Append: ("content",),
    ReplaceAcross: ("old", "pattern"),
    **{op: ("heading",) for op in _SECTION_OPS},
    InsertSectionAfter: ("heading", "new_heading"),
    RenameSection: ("heading", "new_heading"),
    ExtractSection: ("heading", "title"),
}


_DEFAULT_LIMITS = Limits()  # read only: what a preflight without limits of its own checks against


def check_static(batch: Batch, policy: ZonePolicy = DEFAULT_POLICY, limits: Limits | None = None) -> None:
    """Every check that needs no repository: limits, encodings, path shapes, zones and patterns, and
    ``COUNT_REQUIRED`` for an ``each`` without ``expected_count`` in a batch that is written without a
    checked plan (a dry run may omit it to learn the selection; a plan guards every page it names).

    The batch's limits are checked first (a refusal of its own); then every edit, the refusal listing each
    failing one (``BatchRejected.errors``), up to ``MAX_EDIT_ERRORS`` or ``MAX_EDIT_ERROR_BYTES`` of
    messages (``unchecked``: the first edit not checked after that)."""
    check_limits(batch, limits or Limits())
    failed = _Failures(batch.edits)
    counted = batch.dry_run or batch.expect is not None
    for index, edit in enumerate(batch.edits):
        try:
            check_edit(edit, index, policy)
            if not counted and isinstance(edit, Each) and edit.expected_count is None:
                raise BatchRejected(
                    "COUNT_REQUIRED",
                    "an each edit that is written needs expected_count, the pages its selector picks: "
                    "check the batch first (a dry run answers them), then write its plan or give the count",
                    index,
                )
        except BatchRejected as exc:
            failed.add(exc)
            if failed.full:
                failed.stop(index + 1)
                break
    failed.raise_any()


@functools.cache
def _utf8_fields(kind: type[BaseModel]) -> tuple[str, ...]:
    """The text fields of an edit type that ``check_edit`` encodes (``texts``, in its order; a create's or
    overwrite's content is checked by ``decoded``, which knows its encoding)."""
    whole = issubclass(kind, Create | Overwrite)
    return tuple(name for name in text_fields(kind) if name != "content" or not whole)


def check_edit(edit: Edit, index: int, policy: ZonePolicy) -> None:
    """The repository-free checks of one edit (``INVALID_PATH``, zones, encodings, empty texts,
    ``PATTERN_INVALID``)."""
    for name in _utf8_fields(type(edit)):
        text = getattr(edit, name)
        if isinstance(text, str):
            utf8(text, index, name)
    for name in _NON_EMPTY.get(type(edit), ()):
        value = getattr(edit, name)
        if value is not None and not (value.strip() if "heading" in name else value):
            raise BatchRejected("INVALID_BATCH", f"{edit.op} needs a non-empty '{name}'", index)
    if isinstance(edit, ReplaceAcross):
        _check_prefix(edit.prefix, index, policy)
        across.check_pattern(edit, index)
        if edit.select is not None:
            _check_tests(edit.select, index)
        return
    if isinstance(edit, RetargetLinks):
        _check_retarget(edit, index)
        return
    if isinstance(edit, Each):
        _check_each(edit, index)
        return
    if isinstance(edit, MergePages):
        _check_merge(edit, index, policy)
        return
    check_path(edit.path, index)
    if isinstance(edit, Rename | ExtractSection):
        check_path(edit.new_path, index)
    if isinstance(edit, Delete) and edit.redirect_links_to is not None:
        check_path(edit.redirect_links_to, index)
        if edit.redirect_links_to == edit.path:
            raise BatchRejected("INVALID_BATCH", "redirect_links_to must be another page than path", index)
    check_zone(policy, edit.op, edit.path, index)
    if isinstance(edit, Rename):
        check_zone(policy, "rename", edit.new_path, index)
    if isinstance(edit, ExtractSection):
        check_zone(policy, "create", edit.new_path, index)
    if isinstance(edit, Create | Overwrite):
        decoded(edit, index)
    elif isinstance(edit, Frontmatter):
        if not edit.set and not edit.unset:
            raise BatchRejected("INVALID_BATCH", "frontmatter needs keys to set or unset", index)
        both = sorted((edit.set or {}).keys() & set(edit.unset or ()))
        if both:
            raise BatchRejected("INVALID_BATCH", f"keys both set and unset: {both}", index)
    elif isinstance(edit, InsertSectionAfter | RenameSection):
        if any(c in edit.new_heading for c in "\r\n"):
            raise BatchRejected("INVALID_BATCH", "new_heading must be one line of text", index)
        if _MARKS.match(edit.new_heading):
            raise BatchRejected(
                "INVALID_BATCH",
                "new_heading is the heading's text without its '#' marks (the level is kept, or level "
                f"says it): send {_MARKS.sub('', edit.new_heading, count=1)!r}",
                index,
            )
    elif isinstance(edit, ExtractSection) and edit.title is not None and any(c in edit.title for c in "\r\n"):
        raise BatchRejected("INVALID_BATCH", "title must be one line of text", index)


_MARKS = re.compile(r"\s*#{1,6}(?:\s+|$)")  # a heading's marks, as an agent may copy them into new_heading


def _check_each(edit: Each, index: int) -> None:
    """each: the selector's prefix and texts, and exactly the fields its ``do`` takes (``INVALID_BATCH``
    naming what is missing or out of place). Zones and paths are checked page by page as it applies."""
    if edit.select.prefix:
        check_path(edit.select.prefix.removesuffix("/"), index)
    _check_tests(edit.select, index)
    required, allowed = _EACH_FIELDS[edit.do]
    given = {
        name for name in ("set", "unset", "content", "new_path", "redirect_links_to") if getattr(edit, name)
    }
    given |= {"rewrite_links"} if edit.rewrite_links else set()
    extra = sorted(given - set(allowed))
    if extra:
        raise BatchRejected("INVALID_BATCH", f"each with do={edit.do} takes no {', '.join(extra)}", index)
    missing = [name for name in required if name not in given]
    if missing:
        raise BatchRejected("INVALID_BATCH", f"each with do={edit.do} needs {', '.join(missing)}", index)
    if edit.do == "frontmatter":
        if not edit.set and not edit.unset:
            raise BatchRejected("INVALID_BATCH", "each with do=frontmatter needs keys to set or unset", index)
        both = sorted((edit.set or {}).keys() & set(edit.unset or ()))
        if both:
            raise BatchRejected("INVALID_BATCH", f"keys both set and unset: {both}", index)
    if edit.content is not None:
        utf8(edit.content, index)
    for name in ("new_path", "redirect_links_to"):
        value = getattr(edit, name)
        if value is not None:
            check_path(value.removesuffix("/"), index)


def _check_merge(edit: MergePages, index: int, policy: ZonePolicy) -> None:
    """merge_pages: paths, each page once and not ``path`` itself, the pages where a delete is allowed
    and ``path`` where an in-place change is; a one-line title."""
    check_path(edit.path, index)
    check_zone(policy, "merge_pages", edit.path, index)
    for page in edit.pages:
        check_path(page, index)
        check_zone(policy, "delete", page, index)
    if len(set(edit.pages)) != len(edit.pages) or edit.path in edit.pages:
        raise BatchRejected("INVALID_BATCH", "merge_pages needs distinct pages, none of them path", index)
    if edit.title is not None and any(c in edit.title for c in "\r\n"):
        raise BatchRejected("INVALID_BATCH", "title must be one line of text", index)


def _check_tests(tests: PageTests, index: int) -> None:
    """A selector's tests: a glob and a text that are UTF-8 and not empty, outside_code only with
    contains."""
    for name in ("glob", "contains"):
        value = getattr(tests, name)
        if value is not None:
            utf8(value, index, name)
            if not value:
                raise BatchRejected("INVALID_BATCH", f"select.{name} must not be empty", index)
    if tests.outside_code and tests.contains is None:
        raise BatchRejected("INVALID_BATCH", "select.outside_code takes select.contains", index)


def _check_retarget(edit: RetargetLinks, index: int) -> None:
    """retarget_links: both pages are paths, a heading after '#' is not blank, and to differs from from.
    No zone rule: the pages it changes are checked one by one (a raw/ page may be linked to)."""
    anchors = []
    for name, value in (("from", edit.source), ("to", edit.to)):
        utf8(value, index, name)
        if len(value) > 4096:
            raise BatchRejected("INVALID_BATCH", f"{name} is over 4096 characters", index)
        page, heading = split_anchor(value)
        check_path(page, index)
        if heading is not None and (not heading.strip() or any(c in heading for c in "\r\n")):
            raise BatchRejected(
                "INVALID_BATCH", f"{name}: the heading after '#' must be one line of text", index
            )
        anchors.append((page, None if heading is None else " ".join(heading.split())))
    if anchors[0] == anchors[1]:
        raise BatchRejected("INVALID_BATCH", "retarget_links needs 'to' to differ from 'from'", index)


def _check_prefix(prefix: str, index: int, policy: ZonePolicy) -> None:
    """A replace_across prefix: a path shape (a trailing '/' allowed), not wholly in a zone that forbids
    in-place changes, and not outside every zone."""
    if prefix:
        check_path(prefix.removesuffix("/"), index)
    for zone in policy.zones:
        inside = prefix.startswith(zone.pattern) if zone.pattern.endswith("/") else prefix == zone.pattern
        if inside:
            check_zone(
                policy, "replace_across", zone.pattern if zone.pattern.endswith("/") else prefix, index
            )
            return
    if not any(zone.pattern.startswith(prefix) for zone in policy.zones):
        check_zone(policy, "replace_across", prefix or ".", index)


def preflight(
    head: HeadView,
    edits: Sequence[Edit],
    policy: ZonePolicy = DEFAULT_POLICY,
    limits: Limits | None = None,
    expect: Sequence[Mapping[str, object]] | None = None,
) -> Plan:
    """Check ``edits`` against ``head`` in order and return the plan, or raise ``BatchRejected``.

    A failing edit does not stop the check: its changes are taken back and the edits after it are checked
    on the state as if it were not in the batch, so the refusal (the first failure) lists every failing
    edit in ``errors`` (see ``BatchRejected``). A failure that may follow from an earlier one (the two
    edits name the same path, or one a path in the other's folder or prefix) says so in its message.
    Checking stops after ``MAX_EDIT_ERRORS`` failures or ``MAX_EDIT_ERROR_BYTES`` of their messages, or at
    the edit during which the batch's budget runs out; ``unchecked`` then names the first edit not checked.

    The whole check runs under one budget made from ``limits.costs`` (``budget``): the edit during which
    it is spent is refused ``BATCH_TOO_COSTLY``. The plan carries the budget on, for a dry run's review.
    With ``expect`` (a plan's: the ``applied`` list its dry run answered), a plan whose ``applied`` differs
    is refused ``PLAN_STALE``: what lands is exactly what was checked."""
    limits = limits or _DEFAULT_LIMITS
    work = BatchState(head, policy, limits)
    spend = Budget(limits.costs)
    failed = _Failures(edits)
    with active(spend), closing(work):
        for index, edit in enumerate(edits):
            work.begin()
            try:
                check_edit(edit, index, policy)
                _APPLY[type(edit)](work, index, edit)
            except OverBudget as over:  # the budget is spent: nothing after this edit can be checked
                failed.add(BatchRejected("BATCH_TOO_COSTLY", over.message, index))
                failed.stop(index + 1)
                break
            except BatchRejected as exc:
                work.rollback()
                failed.add(exc)
                if failed.full:
                    failed.stop(index + 1)
                    break
        else:
            try:
                work.check_conflicts()
            except BatchRejected as exc:
                failed.add(exc)
    failed.raise_any()
    plan = work.plan()
    plan.budget = spend
    if expect is not None:
        check_expected(plan, expect)
    return plan


class _Failures:
    """The failing edits of a batch being checked, in order, and where checking stopped."""

    def __init__(self, edits: Sequence[Edit]) -> None:
        self.edits = edits
        self.errors: list[BatchRejected] = []
        self.unchecked: int | None = None
        self.size = 0  # bytes of the messages noted

    @property
    def full(self) -> bool:
        """True once ``MAX_EDIT_ERRORS`` failures, or ``MAX_EDIT_ERROR_BYTES`` of their messages, are
        noted: checking stops there (what a failed job keeps stays bounded)."""
        return len(self.errors) >= MAX_EDIT_ERRORS or self.size >= MAX_EDIT_ERROR_BYTES

    def add(self, exc: BatchRejected) -> None:
        """Note ``exc``, with a note on an earlier failure it may follow from."""
        noted = self._noted(exc)
        self.errors.append(noted)
        self.size += len(noted.message.encode("utf-8", "replace"))

    def stop(self, at: int) -> None:
        """Checking stops before the edit ``at``: ``unchecked`` when there is one."""
        self.unchecked = at if at < len(self.edits) else None

    def _noted(self, exc: BatchRejected) -> BatchRejected:
        """``exc``, its message saying which earlier failing edit names a path it names, if one does."""
        index = exc.index
        if index is None or not 0 <= index < len(self.edits):
            return exc
        mine = _named(self.edits[index])
        for earlier in self.errors:
            if earlier.index is None or earlier.index >= index:
                continue
            theirs = _named(self.edits[earlier.index])
            shared = next((path for path in mine for other in theirs if _overlap(path, other)), None)
            if shared is not None:
                note = (
                    f" (edit {earlier.index}, which failed too, also names {shared!r}: this may follow "
                    "from it, so fix that one first)"
                )
                return BatchRejected(exc.code, exc.message + note, index, exc.details)
        return exc

    def raise_any(self) -> None:
        """Raise the refusal of the batch (its first failure, carrying all) when an edit failed."""
        if self.errors:
            raise BatchRejected.of_edits(self.errors, self.unchecked)


def _named(edit: Edit) -> list[str]:
    """The paths, folders and prefixes ``edit`` names (not the pages its link rewriting may reach)."""
    if isinstance(edit, RetargetLinks):
        return [split_anchor(edit.source)[0], split_anchor(edit.to)[0]]
    if isinstance(edit, Each):
        return [edit.select.prefix, *(value for value in (edit.new_path, edit.redirect_links_to) if value)]
    found = [edit.path]
    for name in ("new_path", "redirect_links_to", "pages"):
        value = getattr(edit, name, None)
        found.extend([value] if isinstance(value, str) else value or [])
    return found


def _overlap(one: str, other: str) -> bool:
    """True when two named paths may touch the same file: equal, or one in the other's folder (a prefix
    taken as a folder). The whole wiki ('') is left out: it would tie every failure to every other."""
    one, other = one.removesuffix("/"), other.removesuffix("/")
    if not one or not other:
        return False
    return one == other or one.startswith(other + "/") or other.startswith(one + "/")


def check_expected(plan: Plan, expect: Sequence[Mapping[str, object]]) -> None:
    """``PLAN_STALE`` naming the first path whose change differs from what the plan's dry run showed."""
    found = [entry.to_dict() for entry in plan.applied]
    if found == [dict(entry) for entry in expect]:
        return
    for index, (now, then) in enumerate(zip(found, expect, strict=False)):
        if now != dict(then):
            path = then.get("path")
            raise BatchRejected(
                "PLAN_STALE",
                f"the wiki changed since this plan was checked: {path!r} would now end differently; "
                "check the batch again (check_batch / a dry run) and commit the new plan",
                int(str(then.get("index", index))),
                details={"path": path},
            )
    raise BatchRejected(
        "PLAN_STALE",
        f"the wiki changed since this plan was checked: the batch now changes {len(found)} paths, not "
        f"{len(expect)}; check the batch again (check_batch / a dry run) and commit the new plan",
    )
