"""retarget_links through preflight: which links it repoints (page or page#heading, by the fragment rule of
``markdown.anchors``), how each keeps its form, and its refusals (each with its code, nothing changed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from worker.engine import DictHead, Plan, check_static, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Edit, RetargetLinks, written_paths

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)

RUNBOOK = "# Runbook\n\n## Redis failover\n\nsteps\n\n## Other\n\nmore\n"
LINKS = (
    "[[runbook]] [[runbook#Redis failover]] [[runbook#redis  FAILOVER|alias]] ![[runbook#Other]]\n"
    '[a](runbook.md#redis-failover) [b](runbook.md#Redis%20failover "t") '
    "[c](runbook.md) [d](runbook.md#other)\n"
    "[[runbook#^blk]] [[runbook#Runbook#Redis failover]]\n"
    "`[[runbook#Redis failover]]` and\n\n    [[runbook#Redis failover]]\n\n"
    "```\n[a](runbook.md#redis-failover)\n```\n\n<div>\n[[runbook#Redis failover]]\n</div>\n"
)
FRONT = "---\nsee: '[[runbook#Redis failover]]'\n---\n"


def wiki(**extra: str) -> dict[str, bytes]:
    files = {
        "wiki/runbook.md": RUNBOOK,
        "wiki/ops/a.md": FRONT + LINKS.replace("runbook.md", "../runbook.md"),
        "wiki/b.md": "[[runbook]] only\n",
        "wiki/redis.md": "# Redis\n\n## Failover\n\n## Setup\n",
        "raw/r.md": "[[runbook#Redis failover]]\n",
        **extra,
    }
    return {path: text.encode() for path, text in files.items()}


def retarget(source: str, to: str) -> Edit:
    return EDIT.validate_python({"op": "retarget_links", "from": source, "to": to})


def run(head: dict[str, bytes], *edits: Edit) -> Plan:
    return preflight(DictHead(head), list(edits))


def text(plan: Plan, head: dict[str, bytes], path: str) -> str:
    file = plan.changes.get(path)
    return (head[path] if file is None or file.data is None else file.data).decode()


def test_heading_to_page_drops_the_fragment_of_links_naming_it_only() -> None:
    """from page#heading: only links whose fragment names it (wikilink text in any case and spacing, the
    last part of a nested one; markdown slug or percent-encoded text) move, their fragment gone; links to
    the page alone, to other headings, block links and anything in code, HTML or front matter stay."""
    head = wiki()
    plan = run(head, retarget("wiki/runbook.md#Redis failover", "wiki/redis.md"))
    after = text(plan, head, "wiki/ops/a.md")
    original = head["wiki/ops/a.md"].decode()
    code = original[original.index("`") :]  # from the inline code on: code, HTML, nothing to change
    assert (
        after
        == FRONT
        + (
            "[[runbook]] [[redis]] [[redis|alias]] ![[runbook#Other]]\n"
            '[a](../redis.md) [b](../redis.md "t") [c](../runbook.md) [d](../runbook.md#other)\n'
            "[[runbook#^blk]] [[redis]]\n"
        )
        + code
    )
    assert code.startswith("`[[runbook#Redis failover]]` and\n\n    [[runbook#Redis failover]]\n")
    assert "wiki/b.md" not in plan.changes and "wiki/runbook.md" not in plan.changes
    assert [(a.op, a.path, a.count) for a in plan.applied] == [("rewrite_links", "wiki/ops/a.md", 5)]
    assert [(w.code, w.path) for w in plan.warnings] == [("NOT_REWRITTEN", "raw/r.md")]
    assert "raw/r.md" not in plan.changes


def test_heading_to_heading_replaces_the_fragment_in_each_links_form() -> None:
    """to page#heading: a wikilink gets the heading's text, a markdown link its slug, or its text
    percent-encoded when the old fragment was text; a same-page link in the from page moves too."""
    head = wiki(**{"wiki/runbook.md": RUNBOOK + "\nsee [[#Redis failover]] and [x](#redis-failover)\n"})
    plan = run(head, retarget("wiki/runbook.md#Redis failover", "wiki/redis.md#Failover"))
    after = text(plan, head, "wiki/ops/a.md")
    assert "[[runbook]] [[redis#Failover]] [[redis#Failover|alias]] ![[runbook#Other]]\n" in after
    assert '[a](../redis.md#failover) [b](../redis.md#Failover "t") [c](../runbook.md)' in after
    assert text(plan, head, "wiki/runbook.md").endswith("see [[redis#Failover]] and [x](redis.md#failover)\n")


def test_page_to_page_keeps_fragments_and_page_to_heading_sets_them() -> None:
    """from a page: every link to it moves; without a heading in to, fragments stay as written; with one,
    every link (with or without a fragment) gets it."""
    head = wiki()
    kept = text(run(head, retarget("wiki/runbook.md", "wiki/redis.md")), head, "wiki/ops/a.md")
    assert kept.startswith(FRONT + "[[redis]] [[redis#Redis failover]] [[redis#redis  FAILOVER|alias]]")
    assert "[[redis#^blk]]" in kept and "`[[runbook#Redis failover]]`" in kept
    plan = run(head, retarget("wiki/runbook.md", "wiki/redis.md#Failover"))
    assert text(plan, head, "wiki/b.md") == "[[redis#Failover]] only\n"
    assert "[c](../redis.md#failover) [d](../redis.md#failover)" in text(plan, head, "wiki/ops/a.md")
    assert [a.path for a in plan.applied] == ["wiki/b.md", "wiki/ops/a.md"]  # path order


def test_no_link_to_from_is_no_change() -> None:
    """Nothing links to from: the edit is accepted and changes nothing."""
    plan = run(wiki(), retarget("wiki/redis.md#Failover", "wiki/b.md"))
    assert plan.changes == {} and plan.applied == []


def test_to_may_be_created_earlier_in_the_batch() -> None:
    """to must exist at that point of the batch: a create before it is enough."""
    head = wiki()
    create = EDIT.validate_python({"op": "create", "path": "wiki/new.md", "content": "# New\n"})
    plan = run(head, create, retarget("wiki/runbook.md", "wiki/new.md"))
    assert text(plan, head, "wiki/b.md") == "[[new]] only\n"


@pytest.mark.parametrize(
    ("source", "to", "code"),
    [
        ("wiki/runbook.md", "wiki/none.md", "NOT_FOUND"),
        ("wiki/none.md", "wiki/runbook.md", "NOT_FOUND"),
        ("wiki/runbook.md#Nowhere", "wiki/redis.md", "SECTION_NOT_FOUND"),
        ("wiki/runbook.md", "wiki/redis.md#Nowhere", "SECTION_NOT_FOUND"),
        ("wiki/runbook.md#Redis failover", "wiki/redis.md", "SECTION_AMBIGUOUS"),
        ("wiki/b.md", "wiki/redis.md#Failover [2]", "SECTION_AMBIGUOUS"),
    ],
)
def test_refusals_in_the_worker(source: str, to: str, code: str) -> None:
    """Missing pages are NOT_FOUND, missing headings SECTION_NOT_FOUND; an ambiguous from heading, or a to
    heading that is not the first of its text (links name the first), SECTION_AMBIGUOUS."""
    head = wiki(
        **{"wiki/runbook.md": RUNBOOK + "\n## Redis failover\n", "wiki/redis.md": "## Failover\n" * 2}
    )
    with pytest.raises(BatchRejected) as info:
        run(head, retarget(source, to))
    assert (info.value.code, info.value.index) == (code, 0)


@pytest.mark.parametrize(
    ("source", "to", "code"),
    [
        ("wiki/a.md", "wiki/a.md", "INVALID_BATCH"),
        ("wiki/a.md#X", "wiki/a.md# X ", "INVALID_BATCH"),
        ("wiki/a.md#  ", "wiki/b.md", "INVALID_BATCH"),
        ("wiki/a.md#x\ny", "wiki/b.md", "INVALID_BATCH"),
        ("wiki/a.md#" + "x" * 4096, "wiki/b.md", "INVALID_BATCH"),
        ("wiki/../a.md", "wiki/b.md", "INVALID_PATH"),
        ("wiki/a.md", "/wiki/b.md#X", "INVALID_PATH"),
    ],
)
def test_refusals_at_submission(source: str, to: str, code: str) -> None:
    """to equal to from, a blank heading and a bad page path are refused before any repository is read."""
    batch = Batch.model_validate(
        {"message": "m", "edits": [{"op": "retarget_links", "from": source, "to": to}]}
    )
    with pytest.raises(BatchRejected) as info:
        check_static(batch)
    assert (info.value.code, info.value.index) == (code, 0)


def test_schema_names_from_and_to_and_rights_see_anywhere() -> None:
    """The JSON field is 'from' (also in a dump, so a stored batch reads back); unknown fields are
    refused; write-prefix rights see "" (it may change any page)."""
    edit = retarget("wiki/a.md#X", "wiki/b.md")
    assert isinstance(edit, RetargetLinks)
    assert edit.model_dump(mode="json") == {"op": "retarget_links", "from": "wiki/a.md#X", "to": "wiki/b.md"}
    assert EDIT.validate_python(edit.model_dump(mode="json")) == edit
    assert written_paths(edit) == [""]
    assert edit.path == "wiki/a.md"
    assert "from" in RetargetLinks.model_json_schema()["properties"]
    raw: dict[str, Any] = {"op": "retarget_links", "from": "wiki/a.md", "to": "wiki/b.md", "path": "x"}
    with pytest.raises(ValidationError):
        EDIT.validate_python(raw)


def test_same_page_links_follow_a_heading_not_a_page() -> None:
    """A same-page link in from's page moves with from's heading, but not when from is the page itself
    (its anchors stay inside it)."""
    head = wiki(**{"wiki/runbook.md": RUNBOOK + "\nsee [[#Other]]\n"})
    plan = run(head, retarget("wiki/runbook.md", "wiki/redis.md"))
    assert "wiki/runbook.md" not in plan.changes
    plan = run(head, retarget("wiki/runbook.md#Other", "wiki/redis.md#Setup"))
    assert text(plan, head, "wiki/runbook.md").endswith("see [[redis#Setup]]\n")
