"""replace_across through preflight: literal and RE2, counts, zones, limits."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from worker.engine import DictHead, Plan, check_static, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Costs, Edit, Limits

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
FILES = {
    "index.md": b"Redis and redis.\n",
    "wiki/a.md": b"Redis is fast. Redis!\n",
    "wiki/b/c.md": b"no match here\n",
    "wiki/b/d.md": b"REDIS v7\n",
    "wiki/bin.md": b"\xffRedis",
    "raw/r.md": b"Redis in raw\n",
}


def across(**fields: Any) -> Edit:
    return EDIT.validate_python({"op": "replace_across", "prefix": "wiki/", "new": "Valkey", **fields})


def run(*edits: Edit, limits: Limits | None = None, files: dict[str, bytes] | None = None) -> Plan:
    return preflight(DictHead(files or FILES), list(edits), limits=limits)


def texts(plan: Plan) -> dict[str, str]:
    return {p: f.data.decode() for p, f in plan.changes.items() if f is not None and f.data is not None}


def refused(*edits: Edit, limits: Limits | None = None) -> tuple[str, int | None, str]:
    with pytest.raises(BatchRejected) as info:
        run(*edits, limits=limits)
    return info.value.code, info.value.index, info.value.message


def test_literal_replaces_in_every_page_under_the_prefix() -> None:
    """A literal is case-sensitive; each changed page has one applied entry with its count."""
    plan = run(across(old="Redis", expected_count=2))
    assert texts(plan) == {"wiki/a.md": "Valkey is fast. Valkey!\n"}
    assert [a.to_dict() for a in plan.applied] == [
        {
            "index": 0,
            "op": "replace_across",
            "path": "wiki/a.md",
            "version": plan.applied[0].version,
            "count": 2,
        }
    ]


def test_pattern_with_groups_and_flags() -> None:
    """An RE2 pattern with (?i) and a group reference; non-UTF-8 files are skipped."""
    plan = run(across(pattern=r"(?i)redis( v\d+)?", new=r"Valkey\1", expected_count=3))
    assert texts(plan) == {"wiki/a.md": "Valkey is fast. Valkey!\n", "wiki/b/d.md": "Valkey v7\n"}
    assert [(a.path, a.count) for a in plan.applied] == [("wiki/a.md", 2), ("wiki/b/d.md", 1)]


def test_prefix_is_a_plain_path_prefix() -> None:
    """'' means every page it may change (root files too); 'wiki/b' is a prefix, not a folder."""
    plan = run(across(prefix="", pattern="(?i)redis"))
    assert sorted(texts(plan)) == ["index.md", "wiki/a.md", "wiki/b/d.md"]
    assert run(across(prefix="wiki/b", pattern="(?i)redis")).applied[0].path == "wiki/b/d.md"


def test_raw_pages_are_never_changed_and_reported() -> None:
    """A raw/ page that would match is left as it is, with a NOT_REWRITTEN warning."""
    plan = run(across(prefix="", old="Redis"))
    assert "raw/r.md" not in plan.changes
    assert [(w.code, w.path) for w in plan.warnings] == [("NOT_REWRITTEN", "raw/r.md")]


def test_count_mismatch_gives_the_real_total() -> None:
    """expected_count is the guard over all pages: a different total is COUNT_MISMATCH naming it."""
    code, index, message = refused(across(old="Redis", expected_count=3))
    assert (code, index) == ("COUNT_MISMATCH", 0) and "2 times" in message


def test_nothing_to_replace_is_old_not_found() -> None:
    """No match under the prefix at all is OLD_NOT_FOUND."""
    assert refused(across(old="Memcached"))[:2] == ("OLD_NOT_FOUND", 0)


def test_sees_pages_as_the_batch_left_them() -> None:
    """A page created earlier in the batch is replaced in; a page deleted earlier is not looked at."""
    create = EDIT.validate_python({"op": "create", "path": "wiki/new.md", "content": "Redis\n"})
    plan = run(create, across(old="Redis", expected_count=3))
    assert texts(plan)["wiki/new.md"] == "Valkey\n"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"pattern": "(unclosed"}, "PATTERN_INVALID"),
        ({"pattern": "a", "new": r"\2"}, "PATTERN_INVALID"),
        ({"prefix": "raw/", "old": "x"}, "ZONE_FORBIDDEN"),
        ({"prefix": "elsewhere/", "old": "x"}, "ZONE_FORBIDDEN"),
        ({"prefix": "wiki/../", "old": "x"}, "INVALID_PATH"),
        ({"old": ""}, "INVALID_BATCH"),
    ],
    ids=["bad-pattern", "missing-group", "raw-prefix", "outside-zones", "bad-prefix", "empty-old"],
)
def test_static_refusals(fields: dict[str, Any], code: str) -> None:
    """Patterns, prefixes and empty texts are checked at submission."""
    batch = Batch.model_validate(
        {"message": "m", "edits": [{"op": "replace_across", "prefix": "wiki/", "new": "x", **fields}]}
    )
    with pytest.raises(BatchRejected) as info:
        check_static(batch)
    assert (info.value.code, info.value.index) == (code, 0)


def test_old_and_pattern_are_exclusive() -> None:
    """Exactly one of old and pattern: the model refuses both or neither."""
    for fields in ({}, {"old": "a", "pattern": "a"}):
        with pytest.raises(ValidationError):
            across(**fields)


def test_a_page_cannot_grow_past_max_file_bytes() -> None:
    """The result's size is known before a literal replacement is built, and bounded as a pattern's grows."""
    files = {"wiki/a.md": b"x" * 1000}
    limits = Limits(max_file_bytes=1024)
    for edit in (across(old="x", new="yy"), across(pattern="x", new="yy")):
        with pytest.raises(BatchRejected) as info:
            run(edit, limits=limits, files=files)
        assert (info.value.code, info.value.index) == ("BATCH_TOO_LARGE", 0)


def test_all_output_together_is_bounded() -> None:
    """Many pages each under the per-file limit but over max_output_bytes together: BATCH_TOO_LARGE."""
    files = {f"wiki/p{n}.md": b"x" * 500 for n in range(10)}
    with pytest.raises(BatchRejected) as info:
        run(across(old="x", new="y"), limits=Limits(max_output_bytes=2048), files=files)
    assert info.value.code == "BATCH_TOO_LARGE"


def test_a_costly_pattern_is_stopped_by_its_cpu_budget() -> None:
    """'a.*b|a' rescans the rest of the line per match: the batch's CPU budget stops it."""
    files = {"wiki/a.md": b"a" * 60_000}
    with pytest.raises(BatchRejected) as info:
        run(across(pattern="a.*b|a", new="c"), limits=Limits(costs=Costs(cpu_seconds=0.05)), files=files)
    assert (info.value.code, info.value.index) == ("BATCH_TOO_COSTLY", 0)
    assert "CPU" in info.value.message


def test_a_pattern_whose_worst_case_is_over_the_budget_is_refused_before_it_runs() -> None:
    """A counted repetition makes RE2's program large: over a big page its NFA could run for seconds, so
    the search is refused before it starts, naming the page."""
    files = {"wiki/a.md": b"ab" * 1_000_000}
    with pytest.raises(BatchRejected) as info:
        run(across(pattern="a[ab]{1000}c", new="c"), files=files)
    assert (info.value.code, info.value.index) == ("BATCH_TOO_COSTLY", 0)
    assert "'wiki/a.md'" in info.value.message and "RE2 instructions" in info.value.message
