"""``expected_version: "batch"``: an edit written against a page as the earlier edits of its batch left it,
without knowing the version id they gave it (contract rule 2)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from worker.engine import DictHead, blob_id, preflight
from worker.engine.markdown import find_section
from worker.errors import BatchRejected
from worker.schema.edits import Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
INDEX = b"# Index\n\n- [[old]]\n- [[other]]\n"
HEAD = {
    "index.md": INDEX,
    "wiki/old.md": b"# Old\n",
    "wiki/other.md": b"# Other\n\n## Notes\n\nkept\n",
}


def v(path: str) -> str:
    return blob_id(HEAD[path])


def run(*edits: dict[str, Any]) -> dict[str, bytes | None]:
    """Preflight ``edits`` on HEAD; the resulting content of every changed path."""
    plan = preflight(DictHead(HEAD), [EDIT.validate_python(e) for e in edits])
    return {p: (None if f is None else f.data) for p, f in plan.changes.items()}


RENAME = {"op": "rename", "path": "wiki/old.md", "new_path": "wiki/new.md", "expected_version": None}


def rename() -> dict[str, Any]:
    return {**RENAME, "expected_version": v("wiki/old.md"), "rewrite_links": True}


def test_batch_names_a_page_a_link_rewrite_changed() -> None:
    """A replace after the rename rewrote index.md applies to the rewritten page, with no version id."""
    edit = {"op": "replace", "path": "index.md", "old": "- [[other]]", "new": "- [[other]] (see)"}
    out = run(rename(), {**edit, "expected_version": "batch"})
    assert out["index.md"] == b"# Index\n\n- [[new]]\n- [[other]] (see)\n"


def test_batch_works_for_section_ops_and_append() -> None:
    """append_section and append take "batch" too, each on what the edit before left."""
    out = run(
        {
            "op": "replace",
            "path": "wiki/other.md",
            "old": "kept",
            "new": "kept!",
            "expected_version": v("wiki/other.md"),
        },
        {
            "op": "append_section",
            "path": "wiki/other.md",
            "heading": "Notes",
            "content": "more\n",
            "expected_version": "batch",
        },
        {"op": "append", "path": "wiki/other.md", "content": "end\n", "expected_version": "batch"},
    )
    assert out["wiki/other.md"] == b"# Other\n\n## Notes\n\nkept!\nmore\nend\n"


def test_batch_on_a_page_no_earlier_edit_changed_is_refused() -> None:
    """Nothing of the batch changed wiki/other.md: "batch" names no state, so the edit needs a version."""
    edit = {"op": "replace", "path": "wiki/other.md", "old": "kept", "new": "x", "expected_version": "batch"}
    with pytest.raises(BatchRejected) as caught:
        run(rename(), edit)
    assert (caught.value.code, caught.value.index) == ("VERSION_REQUIRED", 1)
    assert "give the version you read" in caught.value.message


@pytest.mark.parametrize(
    "edit",
    [
        {"op": "overwrite", "path": "index.md", "content": "# Index\n"},
        {"op": "replace_section", "path": "index.md", "heading": "Index", "content": "x\n"},
        {"op": "remove_section", "path": "index.md", "heading": "Index"},
    ],
    ids=lambda e: e["op"],
)
def test_dropping_text_after_link_rewrites_alone_needs_a_real_version(edit: dict[str, Any]) -> None:
    """A link rewrite checks no version, so an edit that drops text cannot lean on "batch" after one: it
    could lose another writer's change. The head version stays accepted."""
    with pytest.raises(BatchRejected) as caught:
        run(rename(), {**edit, "expected_version": "batch"})
    assert (caught.value.code, caught.value.index) == ("VERSION_REQUIRED", 1)
    assert "link rewriting" in caught.value.message
    out = run(rename(), {**edit, "expected_version": v("index.md")})
    assert "index.md" in out


def test_dropping_text_after_a_checked_edit_may_use_batch() -> None:
    """Once an edit of the batch checked index.md's version, an overwrite may name it "batch"."""
    out = run(
        {
            "op": "replace",
            "path": "index.md",
            "old": "[[old]]",
            "new": "[[x]]",
            "expected_version": v("index.md"),
        },
        {"op": "overwrite", "path": "index.md", "content": "# New\n", "expected_version": "batch"},
        {"op": "delete", "path": "wiki/other.md", "expected_version": v("wiki/other.md")},
    )
    assert out == {"index.md": b"# New\n", "wiki/other.md": None}


def test_batch_is_the_only_word_a_version_takes() -> None:
    """The schema takes a 40-hex id or "batch", nothing else."""
    with pytest.raises(ValidationError):
        EDIT.validate_python({"op": "delete", "path": "wiki/old.md", "expected_version": "head"})
    with pytest.raises(ValidationError):
        EDIT.validate_python(
            {
                "op": "replace_section",
                "path": "wiki/a.md",
                "heading": "A",
                "content": "",
                "expected_section_version": "batch",
            }
        )


def refusal(*edits: dict[str, Any]) -> BatchRejected:
    """The refusal of ``edits`` on HEAD (asserting there is one)."""
    with pytest.raises(BatchRejected) as caught:
        run(*edits)
    return caught.value


def test_the_refusal_names_the_link_rewrite_that_changed_the_page() -> None:
    """After a rename rewrote index.md, an overwrite with "batch" is refused naming that rename."""
    found = refusal(
        rename(), {"op": "overwrite", "path": "index.md", "content": "x\n", "expected_version": "batch"}
    )
    assert (found.code, found.index) == ("VERSION_REQUIRED", 1)
    assert "only by the link rewriting of edit 0 (rename), which checked no version id" in found.message
    assert "give the version you read (read_page or list_pages), which holds for the whole batch" in (
        found.message
    )


def test_the_refusal_names_the_unchecked_edits_not_link_rewriting() -> None:
    """An append with no version, a frontmatter op with "batch" and a replace_across check no version id
    of the page: the refusal names those edits, and no link rewriting, since none ran."""
    found = refusal(
        {"op": "append", "path": "wiki/other.md", "content": "more\n"},
        {"op": "frontmatter", "path": "wiki/other.md", "set": {"k": "v"}, "expected_version": "batch"},
        {"op": "replace_across", "prefix": "wiki/", "old": "kept", "new": "held"},
        {"op": "remove_section", "path": "wiki/other.md", "heading": "Notes", "expected_version": "batch"},
    )
    assert (found.code, found.index) == ("VERSION_REQUIRED", 3)
    assert "only by edit 0 (append), edit 1 (frontmatter) and edit 2 (replace_across), which" in found.message
    assert "link rewriting" not in found.message


def test_the_refusal_names_a_section_op_checked_by_its_section_version() -> None:
    """A section op checked by the section's version checked no version of the page: it is named."""
    section_version = find_section(HEAD["wiki/other.md"].decode(), "Notes").version
    found = refusal(
        rename(),
        {
            "op": "append_section",
            "path": "wiki/other.md",
            "heading": "Notes",
            "content": "more\n",
            "expected_section_version": section_version,
        },
        {"op": "delete", "path": "wiki/other.md", "expected_version": "batch"},
    )
    assert (found.code, found.index) == ("VERSION_REQUIRED", 2)
    assert "only by edit 1 (append_section), which" in found.message
