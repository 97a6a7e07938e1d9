"""Which batches head a group of their own (``targets.reads_widely``): those whose ops read the pages that
mention something through git, which cannot see a group's commits before they land."""

from __future__ import annotations

from typing import Any

import pytest

from worker.jobs.targets import reads_widely
from worker.schema.edits import Batch

V = "0" * 40
WIDE: list[dict[str, Any]] = [
    {"op": "replace_across", "prefix": "wiki/", "old": "a", "new": "b"},
    {
        "op": "rename",
        "path": "wiki/a.md",
        "new_path": "wiki/b.md",
        "expected_version": V,
        "rewrite_links": True,
    },
    {"op": "delete", "path": "wiki/a.md", "expected_version": V, "redirect_links_to": "wiki/b.md"},
    {"op": "retarget_links", "from": "wiki/a.md", "to": "wiki/b.md"},
    {
        "op": "extract_section",
        "path": "wiki/a.md",
        "heading": "A",
        "new_path": "wiki/c.md",
        "expected_version": V,
    },
    {"op": "merge_pages", "path": "wiki/t.md", "pages": ["wiki/a.md", "wiki/b.md"]},
    {"op": "rename_section", "path": "wiki/a.md", "heading": "A", "new_heading": "B", "rewrite_links": True}
    | {"expected_version": V},
    {"op": "each", "select": {"prefix": "wiki/"}, "expected_count": 2, "do": "rename", "new_path": "wiki/z"}
    | {"rewrite_links": True},
    {"op": "each", "select": {"prefix": "wiki/"}, "expected_count": 2, "do": "delete"}
    | {"redirect_links_to": "wiki/b.md"},
]
NARROW: list[dict[str, Any]] = [
    {"op": "create", "path": "wiki/a.md", "content": "a"},
    {"op": "rename", "path": "wiki/a.md", "new_path": "wiki/b.md", "expected_version": V},
    {"op": "delete", "path": "wiki/a.md", "expected_version": V},
    {"op": "append", "path": "log.md", "content": "x\n"},
    {"op": "rename_section", "path": "wiki/a.md", "heading": "A", "new_heading": "B", "expected_version": V},
    {"op": "each", "select": {"prefix": "wiki/"}, "expected_count": 2, "do": "frontmatter", "set": {"a": 1}},
]


def batch(*edits: dict[str, Any]) -> Batch:
    return Batch.model_validate({"message": "m", "edits": list(edits)})


@pytest.mark.parametrize("edit", WIDE, ids=lambda e: f"{e['op']}-{e.get('do', '')}")
def test_a_link_or_text_wide_op_reads_widely(edit: dict[str, Any]) -> None:
    assert reads_widely(batch(NARROW[0], edit))


def test_edits_of_named_pages_do_not() -> None:
    assert not reads_widely(batch(*NARROW))
