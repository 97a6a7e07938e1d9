"""extract_section through preflight: the new page, the source left behind, the links that follow the
section, the applied entries, and the refusals (each with its code, nothing changed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from worker.engine import DictHead, Plan, blob_id, check_static, preflight
from worker.engine.markdown import find_section
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Edit, written_paths

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)

SOURCE = (
    "# Runbook\n\nSee [[#Redis failover]], [[#Check]] and [[#Other]].\n\n"
    "## Redis failover\n\nSteps: [[#Other]], [[#Check|c]], [[#Redis failover]], [r](../raw/r.md), "
    "[n](notes.md#top), `[[#Other]]`.\n\n### Check\n\nok\n\n#### Deep\n\n"
    "```\n## not a heading [[#Other]]\n```\n\n"
    "## Other\n\nmore\n"
)
OTHER = (
    "[[runbook#Redis failover]] [x](runbook.md#redis-failover) [[runbook#Check|c]] [y](runbook.md#check) "
    "[[runbook]] [[runbook#Other]] [[runbook#^blk]] `[[runbook#Redis failover]]`\n"
)


def wiki(**extra: str) -> dict[str, bytes]:
    files = {
        "wiki/runbook.md": SOURCE,
        "wiki/notes.md": "# Notes\n",
        "wiki/other.md": OTHER,
        "raw/r.md": "[[runbook#Redis failover]]\n",
        **extra,
    }
    return {path: text.encode() for path, text in files.items()}


def extract(head: dict[str, bytes], **fields: Any) -> Edit:
    path = fields.get("path", "wiki/runbook.md")
    raw = {
        "op": "extract_section",
        "path": path,
        "heading": "Redis failover",
        "new_path": "wiki/ops/redis.md",
    }
    if path in head:
        raw["expected_version"] = blob_id(head[path])
    return EDIT.validate_python({**raw, **fields})


def text(plan: Plan, head: dict[str, bytes], path: str) -> str:
    file = plan.changes.get(path)
    return (head[path] if file is None or file.data is None else file.data).decode()


def test_the_section_becomes_a_page_with_its_subsections_raised_and_links_fixed() -> None:
    """The new page: '# <heading>' then the body, subsection headings one level up per level the section
    was below 1 (never inside code); relative markdown links fixed for its folder; same-page links to
    headings that stayed point to the source, those to moved headings stay same-page, one to the extracted
    heading itself names the new page; code untouched."""
    head = wiki()
    plan = preflight(DictHead(head), [extract(head)])
    assert text(plan, head, "wiki/ops/redis.md") == (
        "# Redis failover\n\nSteps: [[runbook#Other]], [[#Check|c]], [[redis]], [r](../../raw/r.md), "
        "[n](../notes.md#top), `[[#Other]]`.\n\n## Check\n\nok\n\n### Deep\n\n"
        "```\n## not a heading [[#Other]]\n```\n"
    )


def test_the_source_keeps_the_rest_and_its_links_to_moved_headings_follow() -> None:
    """The section leaves the source; same-page links there to the extracted heading name the new page
    without fragment, those to a moved subsection the new page with it, others stay."""
    head = wiki()
    plan = preflight(DictHead(head), [extract(head)])
    assert text(plan, head, "wiki/runbook.md") == (
        "# Runbook\n\nSee [[redis]], [[redis#Check]] and [[#Other]].\n\n## Other\n\nmore\n"
    )


def test_leave_link_puts_the_shortest_resolving_wikilink_in_its_place() -> None:
    """With leave_link a line linking to the new page takes the section's place (before its trailing
    blank lines): the bare name when it is unique, a longer spelling when another page has the name."""
    head = wiki()
    plan = preflight(DictHead(head), [extract(head, leave_link=True)])
    assert text(plan, head, "wiki/runbook.md") == (
        "# Runbook\n\nSee [[redis]], [[redis#Check]] and [[#Other]].\n\n[[redis]]\n\n## Other\n\nmore\n"
    )
    clash = wiki(**{"wiki/b/redis.md": "# Other redis\n"})
    plan = preflight(DictHead(clash), [extract(clash, leave_link=True)])
    assert "\n[[ops/redis]]\n\n## Other" in text(plan, clash, "wiki/runbook.md")
    assert text(plan, clash, "wiki/runbook.md").startswith(
        "# Runbook\n\nSee [[ops/redis]], [[ops/redis#Check]]"
    )


def test_links_elsewhere_follow_the_section_and_its_subsections() -> None:
    """Links in other pages to the section point to the new page without fragment, to a moved subsection
    to the new page with it; links to the page alone, to headings that stayed, block links and code
    stay; raw/ pages are reported, not changed."""
    head = wiki()
    plan = preflight(DictHead(head), [extract(head)])
    assert text(plan, head, "wiki/other.md") == (
        "[[redis]] [x](ops/redis.md) [[redis#Check|c]] [y](ops/redis.md#check) "
        "[[runbook]] [[runbook#Other]] [[runbook#^blk]] `[[runbook#Redis failover]]`\n"
    )
    assert [(w.code, w.path) for w in plan.warnings] == [("NOT_REWRITTEN", "raw/r.md")]
    assert "raw/r.md" not in plan.changes


def test_applied_entries_and_versions() -> None:
    """applied: the source's entry (its new version, new_path), a create for the new page, then one
    rewrite_links per other changed page, in path order; the new page needs no version afterwards."""
    head = wiki(**{"wiki/a.md": "[[runbook#Check]]\n"})
    follow = EDIT.validate_python({"op": "append", "path": "wiki/ops/redis.md", "content": "more\n"})
    plan = preflight(DictHead(head), [extract(head), follow])
    entries = [a.to_dict() for a in plan.applied]
    source = text(plan, head, "wiki/runbook.md").encode()
    assert entries[0] == {
        "index": 0,
        "op": "extract_section",
        "path": "wiki/runbook.md",
        "new_path": "wiki/ops/redis.md",
        "version": blob_id(source),
    }
    assert entries[1]["op"] == "create" and entries[1]["path"] == "wiki/ops/redis.md"
    assert [(e["op"], e["path"], e["count"]) for e in entries[2:4]] == [
        ("rewrite_links", "wiki/a.md", 1),
        ("rewrite_links", "wiki/other.md", 4),
    ]
    assert entries[4]["op"] == "append"


def test_title_and_levels() -> None:
    """title replaces the heading's text in the new page; a level-1 section's subsections keep their
    levels; a level-3 one's go up two; setext headings are headings too."""
    head = wiki(**{"wiki/l.md": "Top\n===\n\nx\n\nSub\n---\n\ny\n\n# Next\n\n### A\n#### B ##\n"})
    edit = extract(head, path="wiki/l.md", heading="Top", new_path="wiki/t.md", title="Moved")
    plan = preflight(DictHead(head), [edit])
    assert text(plan, head, "wiki/t.md") == "# Moved\n\nx\n\nSub\n---\n\ny\n"
    assert text(plan, head, "wiki/l.md") == "# Next\n\n### A\n#### B ##\n"
    plan = preflight(DictHead(head), [extract(head, path="wiki/l.md", heading="A", new_path="wiki/a2.md")])
    assert text(plan, head, "wiki/a2.md") == "# A\n## B ##\n"


def test_section_version_and_a_page_created_in_the_batch() -> None:
    """expected_section_version is enough; a page created earlier in the batch needs no version."""
    head = wiki()
    version = find_section(SOURCE, "Redis failover").version
    fields = {"op": "extract_section", "path": "wiki/runbook.md", "heading": "Redis failover"}
    edit = EDIT.validate_python({**fields, "new_path": "wiki/x.md", "expected_section_version": version})
    assert "wiki/x.md" in preflight(DictHead(head), [edit]).changes
    create = EDIT.validate_python({"op": "create", "path": "wiki/n.md", "content": "# N\n\n## S\n\ns\n"})
    cut = EDIT.validate_python(
        {"op": "extract_section", "path": "wiki/n.md", "heading": "S", "new_path": "wiki/s.md"}
    )
    plan = preflight(DictHead(head), [create, cut])
    assert text(plan, head, "wiki/s.md") == "# S\n\ns\n"
    assert text(plan, head, "wiki/n.md") == "# N\n\n"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"new_path": "wiki/notes.md"}, "PATH_EXISTS"),
        ({"expected_version": None}, "VERSION_REQUIRED"),
        ({"expected_version": "0" * 40}, "VERSION_MISMATCH"),
        ({"expected_version": None, "expected_section_version": "0" * 40}, "VERSION_MISMATCH"),
        ({"heading": "Nowhere"}, "SECTION_NOT_FOUND"),
        ({"heading": "Twice"}, "SECTION_AMBIGUOUS"),
        ({"path": "wiki/none.md"}, "NOT_FOUND"),
        ({"title": "Moved ##"}, "INVALID_BATCH"),
    ],
)
def test_refusals_in_the_worker(fields: dict[str, Any], code: str) -> None:
    """Each refusal has its code and the edit's index; nothing is planned."""
    head = wiki(**{"wiki/runbook.md": SOURCE + "\n## Twice\n\n## Twice\n"})
    with pytest.raises(BatchRejected) as info:
        preflight(DictHead(head), [extract(head, **fields)])
    assert (info.value.code, info.value.index) == (code, 0)


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"new_path": "elsewhere/x.md"}, "ZONE_FORBIDDEN"),
        ({"new_path": "wiki/../x.md"}, "INVALID_PATH"),
        ({"path": "raw/r.md"}, "ZONE_FORBIDDEN"),
        ({"title": "two\nlines"}, "INVALID_BATCH"),
        ({"title": ""}, "INVALID_BATCH"),
        ({"heading": " "}, "INVALID_BATCH"),
    ],
)
def test_refusals_at_submission(fields: dict[str, Any], code: str) -> None:
    """Path shapes and zones (new_path as a create's), empty or multi-line texts: refused at submission."""
    raw = {"op": "extract_section", "path": "wiki/a.md", "heading": "H", "new_path": "wiki/b.md", **fields}
    with pytest.raises(BatchRejected) as info:
        check_static(Batch.model_validate({"message": "m", "edits": [raw]}))
    assert (info.value.code, info.value.index) == (code, 0)


def test_rights_see_both_pages_and_anywhere() -> None:
    """Write-prefix rights see the source, the new page and "" (links change in any page)."""
    edit = EDIT.validate_python(
        {"op": "extract_section", "path": "wiki/a.md", "heading": "H", "new_path": "wiki/b.md"}
    )
    assert written_paths(edit) == ["wiki/a.md", "wiki/b.md", ""]


def test_batch_version_after_a_checked_edit_only() -> None:
    """expected_version "batch" works as for remove_section: after an earlier edit that checked a version
    id, not after one that checked none (the section's text leaves the page)."""
    head = {"wiki/p.md": b"# P\n\n## S\n\ns\n"}
    checked = {
        "op": "append",
        "path": "wiki/p.md",
        "content": "x\n",
        "expected_version": blob_id(head["wiki/p.md"]),
    }
    cut = {"op": "extract_section", "path": "wiki/p.md", "heading": "S", "new_path": "wiki/s.md"}
    plan = preflight(
        DictHead(head), [EDIT.validate_python(checked), extract(head, **cut, expected_version="batch")]
    )
    assert text(plan, head, "wiki/s.md") == "# S\n\ns\nx\n"
    unchecked = {**checked, "expected_version": None}
    with pytest.raises(BatchRejected) as info:
        preflight(
            DictHead(head), [EDIT.validate_python(unchecked), extract(head, **cut, expected_version="batch")]
        )
    assert (info.value.code, info.value.index) == ("VERSION_REQUIRED", 1)
