"""rename_section with ``rewrite_links``: the links to the section follow its new heading, in each link's
own form, everywhere; every other link, the text around them and all code stay byte for byte.

Examples through preflight, then a property test against the independent reference of
``test_relink_properties`` (its scanner, resolver and fragment rule share no code with the engine).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.unit.engine.markdown.test_rewrite_properties import code_and_links, masked_links
from tests.unit.engine.test_relink_properties import headings_of, page_text, ref_named, ref_points, wikis
from worker.engine import DictHead, blob_id, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Edit, written_paths

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
POLICY = "# Incident response\n\n## Paging policy\n\nwho is paged\n\n[[#Paging policy]] [x](#paging-policy)\n"
LINKS = (
    "[[incident-response#Paging policy]] [[incident-response#paging  POLICY|the policy]]\n"
    "[t](incident-response.md#paging-policy) [u](incident-response.md#Paging%20policy)\n"
    "[[incident-response]] [[incident-response#Other]]\n"
    "`[[incident-response#Paging policy]]`\n\n```\n[t](incident-response.md#paging-policy)\n```\n"
)


def wiki() -> dict[str, bytes]:
    files = {
        "wiki/incident-response.md": POLICY,
        "wiki/ops/oncall.md": LINKS.replace("incident-response.md", "../incident-response.md"),
        "wiki/b.md": "[[incident-response]] only\n",
        "raw/notes.md": "[[incident-response#Paging policy]]\n",
    }
    return {path: text.encode() for path, text in files.items()}


def rename(path: str, heading: str, new_heading: str, **extra: object) -> Edit:
    return EDIT.validate_python(
        {"op": "rename_section", "path": path, "heading": heading, "new_heading": new_heading, **extra}
    )


def test_links_to_the_section_follow_the_new_heading_in_their_own_form() -> None:
    """Wikilinks get the new text (label kept), markdown links the new slug (or the text, percent-encoded,
    when they named it by text), same-page links too; links to the page or other headings, code, and raw/
    stay, raw/ reported."""
    head = wiki()
    version = blob_id(head["wiki/incident-response.md"])
    edit = rename(
        "wiki/incident-response.md",
        "Paging policy",
        "Escalation",
        expected_version=version,
        rewrite_links=True,
    )
    plan = preflight(DictHead(head), [edit])
    assert page_text(plan, head, "wiki/incident-response.md") == POLICY.replace(
        "## Paging policy", "## Escalation"
    ).replace("[[#Paging policy]] [x](#paging-policy)", "[[#Escalation]] [x](#escalation)")
    assert page_text(plan, head, "wiki/ops/oncall.md") == (
        "[[incident-response#Escalation]] [[incident-response#Escalation|the policy]]\n"
        "[t](../incident-response.md#escalation) [u](../incident-response.md#Escalation)\n"
        "[[incident-response]] [[incident-response#Other]]\n"
        "`[[incident-response#Paging policy]]`\n\n```\n[t](../incident-response.md#paging-policy)\n```\n"
    )
    assert "wiki/b.md" not in plan.changes and "raw/notes.md" not in plan.changes
    assert [(a.op, a.path, a.count) for a in plan.applied] == [
        ("rename_section", "wiki/incident-response.md", None),
        ("rewrite_links", "wiki/incident-response.md", 2),
        ("rewrite_links", "wiki/ops/oncall.md", 4),
    ]
    assert [(w.code, w.path) for w in plan.warnings] == [("NOT_REWRITTEN", "raw/notes.md")]
    assert written_paths(edit) == ["wiki/incident-response.md", ""]


def test_without_rewrite_links_no_other_page_changes() -> None:
    head = wiki()
    version = blob_id(head["wiki/incident-response.md"])
    plan = preflight(
        DictHead(head),
        [rename("wiki/incident-response.md", "Paging policy", "Escalation", expected_version=version)],
    )
    assert set(plan.changes) == {"wiki/incident-response.md"}
    assert "[[#Paging policy]]" in page_text(plan, head, "wiki/incident-response.md")


def test_a_new_heading_an_earlier_heading_has_is_refused_with_rewrite_links() -> None:
    """A link names the first heading with its text: renaming to an earlier heading's text would send
    the repointed links there, so it is SECTION_AMBIGUOUS, nothing planned."""
    head = wiki()
    version = blob_id(head["wiki/incident-response.md"])
    edit = rename(
        "wiki/incident-response.md",
        "Paging policy",
        "incident RESPONSE",
        expected_version=version,
        rewrite_links=True,
    )
    with pytest.raises(BatchRejected) as refused:
        preflight(DictHead(head), [edit])
    assert (refused.value.code, refused.value.index) == ("SECTION_AMBIGUOUS", 0)
    assert "earlier heading" in refused.value.message


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_rename_section_repoints_exactly_the_links_to_the_section(data: st.DataObject) -> None:
    """Every link that named the renamed section (the reference's fragment rule on the page's old
    headings, same-page links included) names the new heading of the same page; every other link, the
    text around links and all code stay byte for byte; raw/ never changes; applied counts the changes."""
    files, texts = data.draw(wikis())
    pages = sorted(p for p in texts if p.startswith("wiki/") and headings_of(texts[p]))
    assume(pages)
    page = data.draw(st.sampled_from(pages))
    old_headings = headings_of(texts[page])
    heading = data.draw(st.sampled_from(old_headings))
    new_heading = data.draw(st.sampled_from(["Renamed", "Paging policy now", "Héading two"]))
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    edit = rename(page, heading, new_heading, expected_version=blob_id(head[page]), rewrite_links=True)
    plan = preflight(DictHead(head), [edit])
    new_headings = [new_heading if name == heading else name for name in old_headings]
    assert headings_of(page_text(plan, head, page)) == new_headings
    rewritten = {a.path: a.count for a in plan.applied if a.op == "rewrite_links"}
    for path, text in texts.items():
        new_text = page_text(plan, head, path)
        if path.startswith("raw/"):
            assert new_text == text
            continue
        code_before, links_before = code_and_links(text)
        code_after, links_after = code_and_links(new_text)
        assert code_after == code_before
        if path != page:  # the renamed page's heading line changed too, outside its links
            assert masked_links(new_text, links_after) == masked_links(text, links_before)
        changed = 0
        for old, new in zip(links_before, links_after, strict=True):
            same = text[old.start : old.end] == new_text[new.start : new.end]
            changed += not same
            if ref_points(old, path, files) == page and ref_named(old, old_headings) == heading:
                assert ref_points(new, path, files) == page, (path, old, new)
                assert ref_named(new, new_headings) == new_heading, (path, old, new)
                assert (old.kind, old.embed, old.label) == (new.kind, new.embed, new.label)
            else:
                assert same, (path, old, new)
        assert rewritten.get(path, 0) == changed
        event(f"links repointed: {changed > 0}")
