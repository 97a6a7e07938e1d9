"""What a dry run answers besides applied: the diff of every changed file, the checks and the warnings."""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import TypeAdapter

from worker.engine import DictHead, Review, blob_id, preflight, review
from worker.engine.budget import Budget
from worker.engine.paths import DEFAULT_POLICY
from worker.schema.edits import Costs, Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
review_module = importlib.import_module("worker.engine.review")  # the package exports the function
FILES = {
    "index.md": b"# Index\n\n- [[a]]\n- [[b]]\n",
    "wiki/a.md": b"# A\n\nSee [[b]] and [[gone]].\n",
    "wiki/b.md": b"# B\n\nback to [A](a.md)\n",
    "wiki/c.md": b"# C\n\nno newline at end",
    "wiki/bin.png": b"\x89PNG\xff",
    "raw/src.md": b"source on [[b]]\n",
}


def v(path: str) -> str:
    return blob_id(FILES[path])


def dry(*raw: dict[str, Any]) -> Review:
    head = DictHead(FILES)
    plan = preflight(head, [EDIT.validate_python(item) for item in raw])
    return review(head, plan, DEFAULT_POLICY)


def diffs(seen: Review) -> dict[str, str]:
    return {d.path: d.diff for d in seen.diff}


def codes(seen: Review) -> list[tuple[str, str, str | None]]:
    return [(w.code, w.path, w.link) for w in seen.warnings]


def test_diff_of_created_modified_and_deleted_files() -> None:
    """Unified diffs: /dev/null for a created or deleted side, a/ and b/ otherwise, 3 lines of context."""
    seen = dry(
        {"op": "create", "path": "wiki/n.md", "content": "new\n"},
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "[[gone]]",
            "new": "[[b]]",
            "expected_version": v("wiki/a.md"),
        },
        {"op": "delete", "path": "wiki/bin.png", "expected_version": v("wiki/bin.png")},
        {"op": "append", "path": "index.md", "content": "- [[n]]\n"},
    )
    found = diffs(seen)
    assert found["wiki/n.md"] == "--- /dev/null\n+++ b/wiki/n.md\n@@ -0,0 +1 @@\n+new\n"
    assert found["wiki/a.md"] == (
        "--- a/wiki/a.md\n+++ b/wiki/a.md\n@@ -1,3 +1,3 @@\n # A\n \n-See [[b]] and [[gone]].\n"
        "+See [[b]] and [[b]].\n"
    )
    assert found["wiki/bin.png"] == "Binary files a/wiki/bin.png and /dev/null differ\n"
    assert found["index.md"].endswith(" - [[b]]\n+- [[n]]\n")
    assert [d.path for d in seen.diff] == sorted(found)


def test_missing_final_newline_is_marked() -> None:
    """A last line without a line break is followed by git's marker."""
    seen = dry({"op": "append", "path": "wiki/c.md", "content": "!"})
    assert diffs(seen)["wiki/c.md"] == (
        "--- a/wiki/c.md\n+++ b/wiki/c.md\n@@ -1,3 +1,4 @@\n # C\n \n-no newline at end\n"
        "\\ No newline at end of file\n+no newline at end\n+!\n\\ No newline at end of file\n"
    )


def test_a_move_is_one_entry_against_its_old_path() -> None:
    """A pure rename says so; a rename with a change is diffed against the head file it came from."""
    seen = dry(
        {"op": "rename", "path": "wiki/c.md", "new_path": "wiki/d.md", "expected_version": v("wiki/c.md")}
    )
    assert [(d.path, d.old_path, d.diff) for d in seen.diff] == [
        ("wiki/d.md", "wiki/c.md", "rename from wiki/c.md\nrename to wiki/d.md\n")
    ]
    seen = dry(
        {
            "op": "rename",
            "path": "wiki/b.md",
            "new_path": "wiki/sub/b.md",
            "expected_version": v("wiki/b.md"),
            "rewrite_links": True,
        }
    )
    moved = next(d for d in seen.diff if d.path == "wiki/sub/b.md")
    assert moved.old_path == "wiki/b.md"
    assert "--- a/wiki/b.md\n+++ b/wiki/sub/b.md\n" in moved.diff and "+back to [A](../a.md)\n" in moved.diff
    assert "wiki/b.md" not in diffs(seen)


def test_the_diff_is_bounded() -> None:
    """Past the budget an entry is cut at a line and marked truncated; later entries are empty."""
    original = review_module.DIFF_BUDGET
    review_module.DIFF_BUDGET = 120
    try:
        seen = dry(
            {"op": "create", "path": "wiki/x1.md", "content": "line\n" * 40},
            {"op": "create", "path": "wiki/x2.md", "content": "more\n"},
        )
    finally:
        review_module.DIFF_BUDGET = original
    first, second = seen.diff
    assert first.truncated and len(first.diff) <= 120 and first.diff.endswith("\n")
    assert (second.diff, second.truncated) == ("", True)


def test_broken_links_reports_only_what_the_batch_breaks() -> None:
    """A link broken before ([[gone]]) is not reported; deleting b breaks links in unchanged pages."""
    seen = dry({"op": "delete", "path": "wiki/b.md", "expected_version": v("wiki/b.md")})
    assert sorted(codes(seen)) == [
        ("LINK_BROKEN", "index.md", "[[b]]"),
        ("LINK_BROKEN", "raw/src.md", "[[b]]"),
        ("LINK_BROKEN", "wiki/a.md", "[[b]]"),
    ]
    assert all(w.line is not None and "resolves to no file" in w.message for w in seen.warnings)


def test_a_new_namesake_makes_links_ambiguous() -> None:
    """Creating a second b.md makes every bare [[b]] ambiguous: reported with both candidates."""
    seen = dry(
        {"op": "create", "path": "wiki/x/b.md", "content": "# other B\n"},
        {"op": "append", "path": "index.md", "content": "- [[x/b]]\n"},
    )
    broken = [w for w in seen.warnings if w.code == "LINK_BROKEN"]
    assert {w.path for w in broken} == {"index.md", "wiki/a.md", "raw/src.md"}
    assert all("ambiguous between wiki/b.md, wiki/x/b.md" in w.message for w in broken)


def test_a_clean_refactor_has_no_warnings() -> None:
    """Rename with rewrite_links and the new page linked from the index: no warning at all."""
    seen = dry(
        {
            "op": "rename",
            "path": "wiki/a.md",
            "new_path": "wiki/alpha.md",
            "expected_version": v("wiki/a.md"),
            "rewrite_links": True,
        },
        {"op": "create", "path": "wiki/n.md", "content": "# N\n\n[[alpha]]\n"},
        {"op": "append", "path": "index.md", "content": "- [[n]]\n"},
    )
    assert seen.warnings == []


def test_a_new_page_missing_from_the_index_is_reported() -> None:
    """A created page index.md does not link to is NOT_IN_INDEX; raw/ sources are not pages to index."""
    seen = dry(
        {"op": "create", "path": "wiki/n.md", "content": "# N\n"},
        {"op": "create", "path": "raw/new.md", "content": "source\n"},
    )
    assert codes(seen) == [("NOT_IN_INDEX", "wiki/n.md", None)]


def test_raw_pages_not_rewritten_are_reported() -> None:
    """rewrite_links leaves raw/ as it is: the page is reported NOT_REWRITTEN and its link LINK_BROKEN."""
    seen = dry(
        {
            "op": "rename",
            "path": "wiki/b.md",
            "new_path": "wiki/beta.md",
            "expected_version": v("wiki/b.md"),
            "rewrite_links": True,
        }
    )
    assert sorted(codes(seen)) == [
        ("LINK_BROKEN", "raw/src.md", "[[b]]"),
        ("NOT_REWRITTEN", "raw/src.md", None),
    ]


def test_the_checks_say_how_each_file_changed() -> None:
    """Each changed file once, in path order: how it changed, its diff's line counts, the links rewritten
    in it, the code it gained, whether an edit named it; the broken links of the pages the batch may
    affect before and after it (a link broken before stays counted); the code pieces changed in all."""
    seen = dry(
        {
            "op": "rename",
            "path": "wiki/b.md",
            "new_path": "wiki/beta.md",
            "expected_version": v("wiki/b.md"),
            "rewrite_links": True,
        },
        {"op": "delete", "path": "wiki/c.md", "expected_version": v("wiki/c.md")},
        {"op": "create", "path": "wiki/n.md", "content": "# N\n\n```\ncode\n```\n\n`x` [[gone2]]\n"},
        {"op": "append", "path": "index.md", "content": "- [[n]]\n"},
    )
    checks = seen.checks
    assert [f.to_dict() for f in checks.files] == [
        {"path": "index.md", "change": "modified", "added": 2, "removed": 1, "links": 1, "named": True},
        {"path": "wiki/a.md", "change": "modified", "added": 1, "removed": 1, "links": 1, "named": False},
        {"path": "wiki/beta.md", "old_path": "wiki/b.md", "change": "moved", "added": 0, "removed": 0}
        | {"named": True},
        {"path": "wiki/c.md", "change": "deleted", "added": 0, "removed": 3, "named": True},
        {"path": "wiki/n.md", "change": "created", "added": 7, "removed": 0, "code_added": 2, "named": True},
    ]
    assert checks.links is not None
    assert (checks.links.broken_before, checks.links.broken_after, checks.links.ambiguous_after) == (1, 3, 0)
    assert (checks.code_changed, checks.unnamed, checks.unchecked) == (2, 1, [])
    assert [f.path for f in checks.files] == [d.path for d in seen.diff]


def test_a_check_the_budget_stops_says_so() -> None:
    """With the batch's budget spent, no part is guessed: links and code are None, the line counts too,
    and unchecked names each part with the reason."""
    head = DictHead(FILES)
    plan = preflight(head, [EDIT.validate_python({"op": "append", "path": "wiki/a.md", "content": "`x`\n"})])
    plan.budget = Budget(Costs(cpu_seconds=0))
    checks = review(head, plan, DEFAULT_POLICY).checks
    assert (checks.links, checks.code_changed) == (None, None)
    assert [(f.path, f.added, f.removed) for f in checks.files] == [("wiki/a.md", None, None)]
    assert [part.split(":")[0] for part in checks.unchecked] == ["links", "code", "lines"]
    assert all("CPU" in part for part in checks.unchecked)
