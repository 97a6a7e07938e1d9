"""merge_pages through preflight: the merged text, where links to the merged pages land, its refusals, and a
property test against the independent reference of ``test_relink_properties`` (scanner, resolver, code)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.unit.engine.markdown.test_rewrite_properties import code_and_links, masked_links
from tests.unit.engine.test_relink_properties import page_text, ref_points, wikis
from worker.engine import DictHead, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Edit, written_paths

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)


def merge(**fields: Any) -> Edit:
    return EDIT.validate_python({"op": "merge_pages", **fields})


def teams() -> dict[str, bytes]:
    files = {
        "wiki/teams/infra.md": "---\nowner: a\n---\n# Infra\n\nWe run [[sre]] and [db](../db.md).\n\n"
        "## Oncall\n\n```\n# code [[sre]]\n```\n",
        "wiki/teams/sre.md": "# SRE\n\nSee [[infra#Oncall]] and [[#Tools]].\n\n## Tools\n\nx\n",
        "wiki/db.md": "# DB\n",
        "wiki/x.md": "[[infra]] [[sre#Tools]] [i](teams/infra.md) [[sre]] `[[sre]]`\n",
        "raw/r.md": "[[sre]]\n",
    }
    return {path: text.encode() for path, text in files.items()}


def test_two_pages_become_one_and_their_links_follow() -> None:
    """A new page: '# title', then each page without front matter, headings one level deeper; links
    inside them and everywhere point to the new page (a page's own title as fragment, a fragment kept),
    relative links respelled, code and raw/ untouched (raw/ reported)."""
    head = teams()
    edit = merge(
        path="wiki/platform.md", pages=["wiki/teams/infra.md", "wiki/teams/sre.md"], title="Platform"
    )
    plan = preflight(DictHead(head), [edit])
    assert page_text(plan, head, "wiki/platform.md") == (
        "# Platform\n\n## Infra\n\nWe run [[platform#SRE]] and [db](db.md).\n\n### Oncall\n\n"
        "```\n# code [[sre]]\n```\n\n## SRE\n\nSee [[platform#Oncall]] and [[#Tools]].\n\n### Tools\n\nx\n"
    )
    assert page_text(plan, head, "wiki/x.md") == (
        "[[platform#Infra]] [[platform#Tools]] [i](platform.md#infra) [[platform#SRE]] `[[sre]]`\n"
    )
    assert plan.changes["wiki/teams/infra.md"] is None and plan.changes["wiki/teams/sre.md"] is None
    assert [(a.op, a.path) for a in plan.applied] == [
        ("merge_pages", "wiki/platform.md"),
        ("delete", "wiki/teams/infra.md"),
        ("delete", "wiki/teams/sre.md"),
        ("rewrite_links", "wiki/x.md"),
    ]
    assert [(w.code, w.path) for w in plan.warnings] == [("NOT_REWRITTEN", "raw/r.md")]
    assert written_paths(edit) == ["wiki/platform.md", "wiki/teams/infra.md", "wiki/teams/sre.md", ""]


def test_into_an_existing_page_keeps_it_and_appends_with_headings_kept() -> None:
    head = teams()
    plan = preflight(DictHead(head), [merge(path="wiki/db.md", pages=["wiki/teams/sre.md"], headings="keep")])
    assert page_text(plan, head, "wiki/db.md") == (
        "# DB\n\n# SRE\n\nSee [[infra#Oncall]] and [[#Tools]].\n\n## Tools\n\nx\n"
    )
    assert page_text(plan, head, "wiki/x.md") == (
        "[[infra]] [[db#Tools]] [i](teams/infra.md) [[db#SRE]] `[[sre]]`\n"
    )


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"path": "wiki/db.md", "pages": ["wiki/teams/sre.md"], "title": "T"}, "INVALID_BATCH"),
        ({"path": "wiki/new.md", "pages": ["wiki/nope.md"]}, "NOT_FOUND"),
        ({"path": "wiki/db.md", "pages": ["wiki/db.md"]}, "INVALID_BATCH"),
        ({"path": "wiki/new.md", "pages": ["wiki/db.md", "wiki/db.md"]}, "INVALID_BATCH"),
        ({"path": "wiki/new.md", "pages": ["raw/r.md"]}, "ZONE_FORBIDDEN"),
    ],
)
def test_refusals(fields: dict[str, Any], code: str) -> None:
    with pytest.raises(BatchRejected) as refused:
        preflight(DictHead(teams()), [merge(**fields)])
    assert (refused.value.code, refused.value.index) == (code, 0)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_links_to_merged_pages_land_on_the_merged_page_and_nothing_else_changes(data: st.DataObject) -> None:
    """After merging one or two generated pages into a new page: no link anywhere (outside raw/) still
    points to a merged page; each link that did points to the new page; every other link of the other
    pages, their text around links and their code stay byte for byte; the new page holds every merged
    page's code pieces, unchanged and in order."""
    files, texts = data.draw(wikis())
    pages = sorted(p for p in texts if p.startswith("wiki/"))
    assume(pages)
    merged = data.draw(st.lists(st.sampled_from(pages), min_size=1, max_size=2, unique=True))
    into = "wiki/merged.md"
    assume(into not in files)
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    plan = preflight(DictHead(head), [merge(path=into, pages=merged)])
    after_files = (set(files) - set(merged)) | {into}
    for path, text in texts.items():
        if path in merged or path.startswith("raw/"):
            continue
        new_text = page_text(plan, head, path)
        code_before, links_before = code_and_links(text)
        code_after, links_after = code_and_links(new_text)
        assert code_after == code_before
        assert masked_links(new_text, links_after) == masked_links(text, links_before)
        for old, new in zip(links_before, links_after, strict=True):
            if ref_points(old, path, set(files)) in merged:
                assert ref_points(new, path, after_files) == into, (path, old, new)
            else:
                assert text[old.start : old.end] == new_text[new.start : new.end], (path, old, new)
    result = page_text(plan, head, into)
    code, links = code_and_links(result)
    assert code == [piece for page in merged for piece in code_and_links(texts[page])[0]]
    for link in links:
        assert ref_points(link, into, after_files) not in merged, link
