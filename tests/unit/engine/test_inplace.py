"""append, frontmatter and the section ops through preflight: rules, versions (head or chained), zones."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from worker.engine import DictHead, Plan, blob_id, check_static, preflight
from worker.engine.markdown import outline
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Edit, Limits

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
PAGE = "# Redis\n\nIntro.\n\n## Persistence\n\nAOF.\n\n## Clients\n\nMany.\n"
LOG = "# Log\n- one"


def head() -> DictHead:
    return DictHead(
        {
            "wiki/redis.md": PAGE.encode(),
            "log.md": LOG.encode(),
            "index.md": b"# Index\r\n",
            "raw/src.md": b"source\n",
            "wiki/fm.md": b"---\ntitle: Old  # keep me\ntags: [a]\n---\nBody\n",
            "wiki/bin.md": b"\xff\xfe",
        }
    )


def edits(*raw: dict[str, Any]) -> list[Edit]:
    return [EDIT.validate_python(item) for item in raw]


def run(*raw: dict[str, Any], limits: Limits | None = None) -> tuple[DictHead, Plan]:
    h = head()
    return h, preflight(h, edits(*raw), limits=limits)


def text_of(h: DictHead, plan: Plan, path: str) -> str:
    file = plan.changes[path]
    assert file is not None and file.data is not None
    assert blob_id(file.data) == file.version
    return file.data.decode()


def refused(*raw: dict[str, Any]) -> tuple[str, int | None, str]:
    with pytest.raises(BatchRejected) as info:
        preflight(head(), edits(*raw))
    return info.value.code, info.value.index, info.value.message


def v(text: str | bytes) -> str:
    return blob_id(text.encode() if isinstance(text, str) else text)


# -- append --------------------------------------------------------------------------------------------


def test_append_puts_a_line_break_first_when_the_file_lacks_one() -> None:
    """log.md does not end with a line break: append adds one, then the content."""
    h, plan = run({"op": "append", "path": "log.md", "content": "- two\n"})
    assert text_of(h, plan, "log.md") == "# Log\n- one\n- two\n"
    assert [a.to_dict()["op"] for a in plan.applied] == ["append"]


def test_append_keeps_the_files_own_line_ending_and_adds_nothing_after_one() -> None:
    """A CRLF file that ends with a line break gets the content right after it."""
    h, plan = run({"op": "append", "path": "index.md", "content": "- [[redis]]\r\n"})
    assert text_of(h, plan, "index.md") == "# Index\r\n- [[redis]]\r\n"
    h, plan = run(
        {"op": "overwrite", "path": "index.md", "content": "a\r\nb", "expected_version": v(b"# Index\r\n")},
        {"op": "append", "path": "index.md", "content": "c"},
    )
    assert text_of(h, plan, "index.md") == "a\r\nb\r\nc"


def test_append_without_version_applies_to_what_the_batch_left() -> None:
    """Two appends and an overwrite in one batch chain without any version."""
    h, plan = run(
        {"op": "append", "path": "log.md", "content": "- a\n"},
        {"op": "append", "path": "log.md", "content": "- b\n"},
    )
    assert text_of(h, plan, "log.md") == "# Log\n- one\n- a\n- b\n"


def test_append_version_may_be_head_or_chained_but_not_another() -> None:
    """expected_version on append is optional, and when given it follows rule 2 as amended."""
    first = {"op": "append", "path": "log.md", "content": "- a"}
    after_first = LOG + "\n- a"
    for version in (v(after_first), v(LOG)):
        h, plan = run(
            first, {"op": "append", "path": "log.md", "content": "- b", "expected_version": version}
        )
        assert text_of(h, plan, "log.md") == after_first + "\n- b"
    code, index, message = refused(
        first, {"op": "append", "path": "log.md", "content": "x", "expected_version": v("no")}
    )
    assert (code, index) == ("VERSION_MISMATCH", 1)
    assert v(LOG) in message and v(after_first) in message


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        ({"op": "append", "path": "raw/src.md", "content": "x"}, "ZONE_FORBIDDEN"),
        ({"op": "append", "path": "notes.md", "content": "x"}, "ZONE_FORBIDDEN"),
        ({"op": "append", "path": "wiki/none.md", "content": "x"}, "NOT_FOUND"),
        ({"op": "append", "path": "log.md", "content": ""}, "INVALID_BATCH"),
        ({"op": "append", "path": "wiki/../x.md", "content": "x"}, "INVALID_PATH"),
        ({"op": "append", "path": "log.md", "content": "\ud800"}, "INVALID_ENCODING"),
    ],
    ids=["raw-zone", "outside-zones", "missing", "empty", "bad-path", "surrogate"],
)
def test_append_refusals(edit: dict[str, Any], code: str) -> None:
    """append is zoned like replace (never raw/), needs an existing file and non-empty UTF-8 content."""
    assert refused({"op": "create", "path": "wiki/n.md", "content": ""}, edit)[:2] == (code, 1)


def test_append_is_refused_at_submission_for_static_rules() -> None:
    """The zone and the empty content are answered by check_static, before any repository."""
    for edit, code in (
        ({"op": "append", "path": "raw/src.md", "content": "x"}, "ZONE_FORBIDDEN"),
        ({"op": "append", "path": "log.md", "content": ""}, "INVALID_BATCH"),
    ):
        with pytest.raises(BatchRejected) as info:
            check_static(Batch.model_validate({"message": "m", "edits": [edit]}))
        assert (info.value.code, info.value.index) == (code, 0)


def test_append_cannot_grow_a_file_past_max_file_bytes() -> None:
    """The size is checked before the appended file is built."""
    with pytest.raises(BatchRejected) as info:
        run({"op": "append", "path": "log.md", "content": "x" * 2000}, limits=Limits(max_file_bytes=1024))
    assert (info.value.code, info.value.index) == ("BATCH_TOO_LARGE", 0)


# -- frontmatter ---------------------------------------------------------------------------------------


def test_frontmatter_merges_keys_and_keeps_the_rest_byte_for_byte() -> None:
    """A new key is added at the end of the block; the comment of an untouched key stays."""
    h, plan = run({"op": "frontmatter", "path": "wiki/fm.md", "set": {"status": "draft"}, "unset": ["tags"]})
    assert text_of(h, plan, "wiki/fm.md") == "---\ntitle: Old  # keep me\nstatus: draft\n---\nBody\n"


def test_frontmatter_is_created_on_a_page_without_one() -> None:
    """A page without front matter gets a block before its content."""
    h, plan = run({"op": "frontmatter", "path": "wiki/redis.md", "set": {"tags": ["db", "cache"]}})
    assert text_of(h, plan, "wiki/redis.md") == "---\ntags:\n  - db\n  - cache\n---\n" + PAGE


def test_frontmatter_without_version_merges_into_what_the_batch_left() -> None:
    """Two frontmatter edits of one page chain; neither needs a version."""
    h, plan = run(
        {"op": "frontmatter", "path": "wiki/fm.md", "set": {"a": 1}},
        {"op": "frontmatter", "path": "wiki/fm.md", "set": {"b": True}},
    )
    assert text_of(h, plan, "wiki/fm.md").startswith(
        "---\ntitle: Old  # keep me\ntags: [a]\na: 1\nb: true\n---"
    )


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        ({"op": "frontmatter", "path": "wiki/fm.md"}, "INVALID_BATCH"),
        ({"op": "frontmatter", "path": "wiki/fm.md", "set": {"a": 1}, "unset": ["a"]}, "INVALID_BATCH"),
        ({"op": "frontmatter", "path": "raw/src.md", "set": {"a": 1}}, "ZONE_FORBIDDEN"),
        ({"op": "frontmatter", "path": "wiki/bin.md", "set": {"a": 1}}, "INVALID_ENCODING"),
        (
            {"op": "frontmatter", "path": "wiki/fm.md", "set": {"a": 1}, "expected_version": v("x")},
            "VERSION_MISMATCH",
        ),
    ],
    ids=["nothing", "set-and-unset", "raw", "binary", "stale"],
)
def test_frontmatter_refusals(edit: dict[str, Any], code: str) -> None:
    """frontmatter needs keys, distinct set/unset, a zone allowing in-place changes, UTF-8 text."""
    assert refused(edit)[:2] == (code, 0)


def test_frontmatter_that_is_not_a_mapping_is_frontmatter_invalid() -> None:
    """A front matter block holding a list is FRONTMATTER_INVALID, with the edit's index."""
    h = DictHead({"wiki/l.md": b"---\n- a\n- b\n---\nx\n"})
    with pytest.raises(BatchRejected) as info:
        preflight(h, edits({"op": "frontmatter", "path": "wiki/l.md", "set": {"a": 1}}))
    assert (info.value.code, info.value.index) == ("FRONTMATTER_INVALID", 0)


# -- sections ------------------------------------------------------------------------------------------


def section_version(text: str, address: str) -> str:
    return next(s.version for s in outline(text) if s.address == address)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            {"op": "replace_section", "heading": "Persistence", "content": "RDB.\n"},
            PAGE.replace("\nAOF.\n\n", "RDB.\n"),
        ),
        (
            {"op": "append_section", "heading": "Redis > Persistence", "content": "RDB too.\n"},
            PAGE.replace("AOF.\n", "AOF.\nRDB too.\n"),
        ),
        (
            {
                "op": "insert_section_after",
                "heading": "Persistence",
                "new_heading": "Backups",
                "level": 2,
                "content": "Daily.\n",
            },
            PAGE.replace("AOF.\n\n", "AOF.\n\n## Backups\nDaily.\n\n"),
        ),
        ({"op": "remove_section", "heading": "Clients"}, PAGE.replace("## Clients\n\nMany.\n", "")),
        (
            {"op": "rename_section", "heading": "Clients", "new_heading": "Client libraries"},
            PAGE.replace("## Clients", "## Client libraries"),
        ),
    ],
    ids=["replace", "append", "insert-after", "remove", "rename"],
)
def test_section_ops_change_only_their_section(edit: dict[str, Any], expected: str) -> None:
    """Each section op with the page's version changes exactly what it names."""
    h, plan = run({**edit, "path": "wiki/redis.md", "expected_version": v(PAGE)})
    assert text_of(h, plan, "wiki/redis.md") == expected
    assert plan.applied[0].op == edit["op"]


def test_section_version_lets_another_section_change_first() -> None:
    """With expected_section_version, an earlier edit of another section does not conflict."""
    clients = section_version(PAGE, "Clients")
    h, plan = run(
        {
            "op": "replace_section",
            "path": "wiki/redis.md",
            "heading": "Persistence",
            "content": "RDB.\n",
            "expected_version": v(PAGE),
        },
        {
            "op": "append_section",
            "path": "wiki/redis.md",
            "heading": "Clients",
            "content": "Go.\n",
            "expected_section_version": clients,
        },
    )
    assert text_of(h, plan, "wiki/redis.md").endswith("## Clients\n\nMany.\nGo.\n")


def test_section_version_of_a_changed_section_is_version_mismatch() -> None:
    """A section version read before an earlier edit changed that section no longer matches."""
    persistence = section_version(PAGE, "Persistence")
    code, index, message = refused(
        {
            "op": "append_section",
            "path": "wiki/redis.md",
            "heading": "Persistence",
            "content": "x\n",
            "expected_version": v(PAGE),
        },
        {
            "op": "append_section",
            "path": "wiki/redis.md",
            "heading": "Persistence",
            "content": "y\n",
            "expected_section_version": persistence,
        },
    )
    assert (code, index) == ("VERSION_MISMATCH", 1) and "sections=true" in message


def test_section_op_needs_a_page_or_section_version() -> None:
    """Without either version a section op on a head page is VERSION_REQUIRED naming both fields."""
    code, index, message = refused({"op": "remove_section", "path": "wiki/redis.md", "heading": "Clients"})
    assert (code, index) == ("VERSION_REQUIRED", 0)
    assert "expected_section_version" in message


def test_section_op_on_a_page_created_in_the_batch_needs_no_version() -> None:
    """A page created earlier in the batch is edited by section without any version."""
    h, plan = run(
        {"op": "create", "path": "wiki/new.md", "content": "# A\n\nx\n"},
        {"op": "rename_section", "path": "wiki/new.md", "heading": "A", "new_heading": "B"},
    )
    assert text_of(h, plan, "wiki/new.md") == "# B\n\nx\n"


def test_section_addressing_errors_name_what_to_use() -> None:
    """A missing heading is SECTION_NOT_FOUND; a duplicate is SECTION_AMBIGUOUS listing addresses;
    headings inside code are no headings."""
    page = "# A\n\n## Notes\n\nx\n\n# B\n\n## Notes\n\n```\n## Hidden\n```\n"
    h = DictHead({"wiki/p.md": page.encode()})
    with pytest.raises(BatchRejected) as info:
        preflight(
            h,
            edits(
                {"op": "remove_section", "path": "wiki/p.md", "heading": "Notes", "expected_version": v(page)}
            ),
        )
    assert info.value.code == "SECTION_AMBIGUOUS" and "'A > Notes'" in info.value.message
    with pytest.raises(BatchRejected) as info:
        preflight(
            h,
            edits(
                {
                    "op": "remove_section",
                    "path": "wiki/p.md",
                    "heading": "Hidden",
                    "expected_version": v(page),
                }
            ),
        )
    assert info.value.code == "SECTION_NOT_FOUND"
    plan = preflight(
        h,
        edits(
            {"op": "remove_section", "path": "wiki/p.md", "heading": "B > Notes", "expected_version": v(page)}
        ),
    )
    assert text_of(h, plan, "wiki/p.md") == "# A\n\n## Notes\n\nx\n\n# B\n\n"


@pytest.mark.parametrize(
    "edit",
    [
        {"op": "remove_section", "path": "wiki/redis.md", "heading": "  "},
        {"op": "rename_section", "path": "wiki/redis.md", "heading": "Clients", "new_heading": "a\nb"},
        {
            "op": "insert_section_after",
            "path": "wiki/redis.md",
            "heading": "Clients",
            "new_heading": "",
            "level": 2,
        },
    ],
    ids=["blank-heading", "two-line-heading", "empty-new-heading"],
)
def test_section_shape_refusals_are_static(edit: dict[str, Any]) -> None:
    """Blank headings and new headings that are not one line are INVALID_BATCH at submission."""
    with pytest.raises(BatchRejected) as info:
        check_static(Batch.model_validate({"message": "m", "edits": [edit]}))
    assert (info.value.code, info.value.index) == ("INVALID_BATCH", 0)


def test_section_op_on_raw_is_zone_forbidden_and_on_binary_is_invalid_encoding() -> None:
    """Section ops are in-place changes: never in raw/; and they need UTF-8 text."""
    base = {"op": "remove_section", "heading": "A", "expected_version": v(b"source\n")}
    assert refused({**base, "path": "raw/src.md"})[:2] == ("ZONE_FORBIDDEN", 0)
    assert refused({**base, "path": "wiki/bin.md", "expected_version": v(b"\xff\xfe")})[:2] == (
        "INVALID_ENCODING",
        0,
    )


def _details(*raw: dict[str, Any]) -> tuple[int | None, dict[str, object] | None]:
    with pytest.raises(BatchRejected) as info:
        preflight(head(), edits(*raw))
    assert info.value.code == "VERSION_MISMATCH"
    return info.value.index, info.value.details


def test_version_mismatch_carries_the_current_version() -> None:
    """A stale expected_version is refused with the page's version at the head in details, so a caller
    knows what it would have to match without reading the page again."""
    index, details = _details(
        {"op": "append", "path": "log.md", "content": "x\n"},
        {"op": "replace", "path": "wiki/redis.md", "old": "AOF", "new": "RDB", "expected_version": v("old")},
    )
    assert (index, details) == (1, {"path": "wiki/redis.md", "current_version": v(PAGE)})


def test_section_version_mismatch_carries_the_section_version_as_the_batch_left_it() -> None:
    """A stale expected_section_version is refused with the page's head version and the section's
    current version (after the batch's earlier edits of the page); sending that one succeeds."""
    first = {"op": "append_section", "path": "wiki/redis.md", "heading": "Persistence", "content": "more\n"}
    stale = {
        "op": "replace_section",
        "path": "wiki/redis.md",
        "heading": "Persistence",
        "content": "RDB.\n",
        "expected_section_version": v("stale"),
    }
    index, details = _details(first | {"expected_version": v(PAGE)}, stale)
    assert index == 1 and details is not None
    assert details["path"] == "wiki/redis.md" and details["current_version"] == v(PAGE)
    h, plan = run(first | {"expected_version": v(PAGE)})
    now = {s.address: s.version for s in outline(text_of(h, plan, "wiki/redis.md"))}["Persistence"]
    assert details["current_section_version"] == now != v("stale")
    h, plan = run(first | {"expected_version": v(PAGE)}, stale | {"expected_section_version": now})
    assert "RDB.\n" in text_of(h, plan, "wiki/redis.md")


def test_overwrite_against_the_head_after_an_earlier_edit_warns() -> None:
    """An overwrite naming the head's version of a page an earlier edit of the batch changed is allowed,
    but warned about (its content likely drops that change); naming the version the batch gave the page,
    or overwriting an untouched page, is not."""
    append = {"op": "append", "path": "wiki/redis.md", "content": "More.\n"}
    over = {"op": "overwrite", "path": "wiki/redis.md", "content": "# Redis\n", "expected_version": v(PAGE)}
    _, plan = run(append, over)
    assert [(w.code, w.path) for w in plan.warnings] == [("OVERWRITES_BATCH_EDIT", "wiki/redis.md")]
    assert "edit 1 overwrites" in plan.warnings[0].message and "edit(s) 0 " in plan.warnings[0].message
    chained = over | {"expected_version": v(PAGE + "More.\n")}
    assert run(append, chained)[1].warnings == []
    assert run(over)[1].warnings == []


@pytest.mark.parametrize("op", ["rename_section", "insert_section_after"])
@pytest.mark.parametrize("given", ["## New", "# New", "  ### New"])
def test_a_new_heading_with_its_marks_is_refused_naming_the_text_to_send(op: str, given: str) -> None:
    """new_heading is text: '## New' would read back as a heading '## New' under the level kept, so it is
    refused at submission (INVALID_BATCH) with the text to send instead; '#1 New' or 'C# notes' is text."""
    fields = {"op": op, "path": "wiki/a.md", "heading": "Old", "new_heading": given}
    if op == "insert_section_after":
        fields["level"] = 2
    with pytest.raises(BatchRejected) as refused:
        check_static(Batch.model_validate({"message": "m", "edits": [fields]}))
    assert refused.value.code == "INVALID_BATCH" and "send 'New'" in refused.value.message
    for text in ("#1 New", "C# notes"):
        check_static(Batch.model_validate({"message": "m", "edits": [fields | {"new_heading": text}]}))
