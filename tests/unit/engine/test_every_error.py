"""A refused batch lists every failing edit: preflight goes on after a failure, on the state as if the
failing edit were left out, up to ``MAX_EDIT_ERRORS`` failures or the end of the batch's budget; the
refusal itself is the first failure. ``check_static`` lists every edit it refuses too."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from pydantic import TypeAdapter

from tests.unit.test_engine_properties import Refused, cases, replay
from worker.engine import DictHead, blob_id, check_static, preflight
from worker.engine.paths import DEFAULT_POLICY
from worker.engine.plan import Applied, NewFile
from worker.engine.state import BatchState
from worker.errors import MAX_EDIT_ERROR_BYTES, MAX_EDIT_ERRORS, BatchRejected
from worker.schema.edits import Batch, Costs, Edit, Limits

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
WRONG = "0" * 40
HEAD = {
    "index.md": b"# Index\n\n- [[a]]\n- [[b]]\n",
    "wiki/a.md": b"# A\n\nkept\n",
    "wiki/b.md": b"# B\n\nkept\n",
    "wiki/c.md": b"# C\n",
    "wiki/p/one.md": b"# One\n",
    "wiki/p/two.md": b"# Two\n",
    "wiki/q/two.md": b"# Taken\n",
}


def v(path: str) -> str:
    return blob_id(HEAD[path])


def refusal(*edits: dict[str, Any], limits: Limits | None = None) -> BatchRejected:
    """The refusal of ``edits`` on HEAD (asserting there is one)."""
    with pytest.raises(BatchRejected) as caught:
        preflight(DictHead(HEAD), [EDIT.validate_python(e) for e in edits], limits=limits)
    return caught.value


def listed(found: BatchRejected) -> list[tuple[int | None, str]]:
    return [(error.index, error.code) for error in found.errors]


def test_every_failing_edit_is_listed_and_the_first_is_the_refusal() -> None:
    """Three edits fail, each for its own reason: all three are listed in order with index and code; the
    refusal is the first (its details kept), and the edits that pass are not listed."""
    found = refusal(
        {"op": "append", "path": "wiki/c.md", "content": "fine\n"},
        {"op": "delete", "path": "wiki/a.md", "expected_version": WRONG},
        {
            "op": "replace",
            "path": "wiki/b.md",
            "old": "kept",
            "new": "held",
            "expected_version": v("wiki/b.md"),
        },
        {
            "op": "replace",
            "path": "wiki/c.md",
            "old": "absent",
            "new": "x",
            "expected_version": v("wiki/c.md"),
        },
        {"op": "append", "path": "wiki/nowhere.md", "content": "x\n"},
    )
    assert (found.code, found.index) == ("VERSION_MISMATCH", 1)
    assert found.details == {"path": "wiki/a.md", "current_version": v("wiki/a.md")}
    assert listed(found) == [(1, "VERSION_MISMATCH"), (3, "OLD_NOT_FOUND"), (4, "NOT_FOUND")]
    assert found.errors[0].details == found.details
    assert found.unchecked is None
    body = found.to_dict()
    assert body["code"] == "VERSION_MISMATCH" and body["index"] == 1
    assert [(e["index"], e["code"]) for e in body["errors"]] == listed(found)  # type: ignore[union-attr]


def test_the_edits_after_a_failure_are_checked_as_if_it_were_left_out() -> None:
    """Edit 0 fails, so edit 1 finds the text edit 0 would have replaced and passes; edit 2 expects the
    text edit 0 would have written and fails on that state."""
    first = {"op": "replace", "path": "wiki/a.md", "old": "kept", "new": "gone", "expected_version": WRONG}
    found = refusal(
        first,
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "kept",
            "new": "held",
            "expected_version": v("wiki/a.md"),
        },
        {"op": "replace", "path": "wiki/a.md", "old": "gone", "new": "x", "expected_version": "batch"},
    )
    assert listed(found) == [(0, "VERSION_MISMATCH"), (2, "OLD_NOT_FOUND")]


def test_a_failing_edit_leaves_nothing_behind() -> None:
    """A delete that removed its file and then failed on its redirect, and an each that moved one page
    before the next one's target was taken: both are taken back whole, so later edits find the files
    where the head has them."""
    found = refusal(
        {
            "op": "delete",
            "path": "wiki/a.md",
            "expected_version": v("wiki/a.md"),
            "redirect_links_to": "wiki/x.md",
        },
        {"op": "append", "path": "wiki/a.md", "content": "still here\n"},
        {
            "op": "each",
            "select": {"prefix": "wiki/p/"},
            "expected_count": 2,
            "do": "rename",
            "new_path": "wiki/q",
        },
        {"op": "append", "path": "wiki/p/one.md", "content": "not moved\n"},
        {"op": "create", "path": "wiki/q/one.md", "content": "# New\n"},
    )
    assert listed(found) == [(0, "NOT_FOUND"), (2, "PATH_EXISTS")]


def test_rollback_restores_the_state_an_edit_began_on() -> None:
    """Everything an edit changes in a BatchState (files, origins, versions, created, vouched, moves,
    applied, warnings, made, output, the file list) is as before once it is rolled back."""
    work = BatchState(DictHead(HEAD), DEFAULT_POLICY, Limits())
    work.begin()
    work.write(0, "create", "wiki/new.md", b"new\n")
    work.created.add("wiki/new.md")
    work.made.append("wiki/new.md")
    work.check_version(0, "wiki/a.md", v("wiki/a.md"))
    before = _taken(work)
    work.begin()
    work.files()  # the file list, built during the edit, is kept up to date by the rollback too
    work.put(1, "wiki/new.md", None)
    work.put(1, "wiki/a.md", NewFile(blob_id(b"x"), b"x"))
    work.put(1, "wiki/a.md", None)
    work.created.add("wiki/b2.md")
    work.created.discard("wiki/new.md")
    work.vouched.add("wiki/b.md")
    work.moved_from["wiki/b2.md"] = work.moved_from.pop("wiki/b.md", "wiki/b.md")
    work.applied.append(Applied(1, "delete", "wiki/new.md", None))
    work.warn("NOT_REWRITTEN", "wiki/a.md", "x")
    work.made.append("wiki/b2.md")
    work.rollback()
    assert _taken(work) == before
    assert work.files() == set(HEAD) | {"wiki/new.md"}


def _taken(work: BatchState) -> tuple[object, ...]:
    return (
        dict(work.state),
        dict(work.origin),
        {path: set(versions) for path, versions in work.versions.items()},
        set(work.created),
        set(work.vouched),
        dict(work.moved_from),
        list(work.applied),
        list(work.warnings),
        list(work.made),
        work.output,
    )


def test_a_failure_that_may_follow_from_an_earlier_one_says_so() -> None:
    """The rename fails, so the page it would have made is missing for the next edit: that edit's
    message names the failed edit and the path they share; an unrelated failure gets no such note."""
    found = refusal(
        {"op": "rename", "path": "wiki/a.md", "new_path": "wiki/moved/a.md", "expected_version": WRONG},
        {"op": "append", "path": "wiki/moved/a.md", "content": "x\n"},
        {
            "op": "replace",
            "path": "wiki/c.md",
            "old": "absent",
            "new": "x",
            "expected_version": v("wiki/c.md"),
        },
    )
    assert listed(found) == [(0, "VERSION_MISMATCH"), (1, "NOT_FOUND"), (2, "OLD_NOT_FOUND")]
    assert "edit 0, which failed too, also names 'wiki/moved/a.md'" in found.errors[1].message
    assert "which failed too" not in found.errors[2].message


def test_checking_stops_after_the_cap_and_says_where() -> None:
    """Past MAX_EDIT_ERRORS failures nothing more is checked: unchecked names the first edit left."""
    bad = {"op": "append", "path": "wiki/nowhere.md", "content": "x\n"}
    found = refusal(*[bad] * (MAX_EDIT_ERRORS + 10))
    assert len(found.errors) == MAX_EDIT_ERRORS
    assert found.unchecked == MAX_EDIT_ERRORS
    exactly = refusal(*[bad] * MAX_EDIT_ERRORS)
    assert len(exactly.errors) == MAX_EDIT_ERRORS and exactly.unchecked is None


def test_checking_stops_once_the_listed_messages_reach_their_byte_bound() -> None:
    """Failures naming 2 000-character paths: the list stops once its messages reach
    MAX_EDIT_ERROR_BYTES, so what a failed job keeps stays bounded; unchecked says where."""
    deep = "/".join(["d" * 200] * 10)
    edits = [{"op": "append", "path": f"wiki/{deep}/{n}.md", "content": "x\n"} for n in range(20)]
    found = refusal(*edits)
    size = sum(len(error.message.encode()) for error in found.errors)
    assert 1 < len(found.errors) < 20 and found.unchecked == len(found.errors)
    assert MAX_EDIT_ERROR_BYTES <= size < MAX_EDIT_ERROR_BYTES + 2100


def test_checking_stops_where_the_budget_runs_out() -> None:
    """The edit during which the budget is spent fails BATCH_TOO_COSTLY and is the last one checked."""
    found = refusal(
        {"op": "append", "path": "wiki/nowhere.md", "content": "x\n"},
        {"op": "replace_across", "prefix": "wiki/", "old": "kept", "new": "held"},
        {"op": "append", "path": "wiki/nowhere.md", "content": "x\n"},
        limits=Limits(costs=Costs(scan_bytes=8)),
    )
    assert listed(found) == [(0, "NOT_FOUND"), (1, "BATCH_TOO_COSTLY")]
    assert found.unchecked == 2


def test_a_file_folder_conflict_of_the_result_is_listed_after_the_edits() -> None:
    """The result's conflicts are checked on the state without the failing edits, and listed last."""
    found = refusal(
        {"op": "append", "path": "wiki/nowhere.md", "content": "x\n"},
        {"op": "create", "path": "wiki/c.md/inner.md", "content": "x\n"},
    )
    assert listed(found) == [(0, "NOT_FOUND"), (1, "PATH_CONFLICT")]


def test_check_static_lists_every_edit_it_refuses() -> None:
    """Paths, zones and empty fields of every edit are checked at submission, each refusal listed."""
    batch = Batch.model_validate(
        {
            "message": "m",
            "edits": [
                {"op": "create", "path": "wiki/../x.md", "content": "x"},
                {"op": "create", "path": "wiki/fine.md", "content": "x"},
                {"op": "delete", "path": "raw/r.md", "expected_version": WRONG},
                {"op": "replace", "path": "wiki/a.md", "old": "", "new": "x", "expected_version": WRONG},
            ],
        }
    )
    with pytest.raises(BatchRejected) as caught:
        check_static(batch)
    found = caught.value
    assert (found.code, found.index) == ("INVALID_PATH", 0)
    assert listed(found) == [(0, "INVALID_PATH"), (2, "ZONE_FORBIDDEN"), (3, "INVALID_BATCH")]


def test_a_batch_without_failures_answers_as_before() -> None:
    """No failure, no refusal: the plan is what it always was."""
    plan = preflight(
        DictHead(HEAD),
        [EDIT.validate_python({"op": "append", "path": "wiki/c.md", "content": "x\n"})],
    )
    assert list(plan.changes) == ["wiki/c.md"]


def test_each_listed_failure_is_one_on_the_batch_without_the_others() -> None:
    """Against the independent replayer of test_engine_properties: leaving out the listed edits, the
    batch passes (or fails only on a file/folder conflict of its result, listed last); and each listed
    edit fails, with one of the codes the replayer allows, right after the edits before it that were not
    listed."""
    tally: Counter[int] = Counter()

    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(cases())
    def check(case: tuple[dict[str, bytes], list[Edit]]) -> None:
        head, edits = case
        try:
            preflight(DictHead(head), edits)
        except BatchRejected as found:
            refused = found
        else:
            assert not isinstance(replay(head, edits), Refused)
            return
        errors = list(refused.errors)
        tally[len(errors)] += 1
        assert (errors[0].code, errors[0].index) == (refused.code, refused.index)
        conflict = errors[-1] if errors[-1].code == "PATH_CONFLICT" else None
        failing = [error.index for error in errors if error is not conflict]
        assert failing == sorted(set(failing))
        kept = [edit for index, edit in enumerate(edits) if index not in failing]
        whole = replay(head, kept)
        if conflict is None:
            assert not isinstance(whole, Refused), (whole, errors)
        else:
            assert isinstance(whole, Refused) and whole.index is None, (whole, errors)
        for error in errors:
            if error is conflict:
                continue
            assert error.index is not None
            before = [edit for index, edit in enumerate(edits[: error.index]) if index not in failing]
            alone = replay(head, [*before, edits[error.index]])
            assert isinstance(alone, Refused) and alone.index == len(before), (alone, error)
            assert error.code in alone.codes, (alone, error)

    check()
    # batches with one failure and with several, or the property says little
    assert tally[1] >= 30 and sum(n for count, n in tally.items() if count > 1) >= 30, tally
