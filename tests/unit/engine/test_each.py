"""``each``: one edit for many pages, through preflight. Examples of every ``do`` and selector test, the
refusals (each with its code, nothing planned), and a property test of the selection against an
independent reference (its own glob rule, a line-based front matter reader, and the places the generator
put the needle)."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from worker.engine import DictHead, Plan, check_static, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Edit, written_paths

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)


def each(**fields: Any) -> Edit:
    return EDIT.validate_python({"op": "each", **fields})


def page(status: str | None, body: str) -> str:
    return (f"---\nstatus: {status}\nowner: ops\n---\n" if status else "") + body


def projects() -> dict[str, bytes]:
    files = {
        f"wiki/projects/p{n}.md": page("archived" if n % 3 == 0 else "active", f"# P{n}\n") for n in range(9)
    }
    files["wiki/projects/notes.md"] = "# Notes\n[[p0]] [[p3]] [see](p6.md)\n"
    files["wiki/team.md"] = "[[p3]] and [[projects/p6]]\n"
    files["raw/p0.md"] = page("archived", "# raw\n")
    files["index.md"] = "# Index\n"
    return {path: text.encode() for path, text in files.items()}


def text(plan: Plan, head: dict[str, bytes], path: str) -> str | None:
    if path in plan.changes:
        file = plan.changes[path]
        if file is None:
            return None
        return (file.data if file.data is not None else head[file.source or path]).decode()
    return head[path].decode() if path in head else None


def test_pages_chosen_by_front_matter_move_to_a_folder_with_their_links() -> None:
    """rename of the pages whose front matter says status: archived, into wiki/archive, links rewritten:
    one rename per page, in path order, every link to them repointed, nothing else changed."""
    head = projects()
    edit = each(
        select={"prefix": "wiki/projects/", "frontmatter": {"status": "archived"}},
        expected_count=3,
        do="rename",
        new_path="wiki/archive/",
        rewrite_links=True,
    )
    plan = preflight(DictHead(head), [edit])
    renames = [(a.path, a.new_path) for a in plan.applied if a.op == "rename"]
    assert renames == [(f"wiki/projects/p{n}.md", f"wiki/archive/p{n}.md") for n in (0, 3, 6)]
    assert text(plan, head, "wiki/projects/notes.md") == "# Notes\n[[p0]] [[p3]] [see](../archive/p6.md)\n"
    assert text(plan, head, "wiki/team.md") == "[[p3]] and [[archive/p6]]\n"
    assert text(plan, head, "wiki/archive/p3.md") == head["wiki/projects/p3.md"].decode()
    assert all(a.index == 0 for a in plan.applied)
    assert written_paths(edit) == ["wiki/projects/", "wiki/archive/", ""]


def test_front_matter_is_set_across_a_folder_and_made_where_there_is_none() -> None:
    head = projects()
    plan = preflight(
        DictHead(head),
        [each(select={"prefix": "wiki/"}, expected_count=11, do="frontmatter", set={"team": "core"})],
    )
    assert text(plan, head, "wiki/team.md") == "---\nteam: core\n---\n[[p3]] and [[projects/p6]]\n"
    assert (
        text(plan, head, "wiki/projects/p1.md") == "---\nstatus: active\nowner: ops\nteam: core\n---\n# P1\n"
    )
    assert sorted(a.path for a in plan.applied) == sorted(p for p in head if p.startswith("wiki/"))


def test_append_and_delete_with_a_redirect() -> None:
    head = projects()
    plan = preflight(
        DictHead(head),
        [
            each(
                select={"prefix": "wiki/", "glob": "wiki/projects/p?.md"},
                expected_count=9,
                do="append",
                content="end\n",
            ),
            each(
                select={"prefix": "wiki/projects/", "frontmatter": {"status": "active"}, "contains": "# P1"},
                expected_count=1,
                do="delete",
                redirect_links_to="wiki/team.md",
            ),
        ],
    )
    assert text(plan, head, "wiki/projects/p2.md") == page("active", "# P2\nend\n")
    assert text(plan, head, "wiki/projects/p1.md") is None
    assert next((a.op, a.path) for a in plan.applied if a.index == 1) == ("delete", "wiki/projects/p1.md")


def test_contains_outside_code_skips_pages_that_hold_it_only_in_code() -> None:
    head = {
        "wiki/a.md": b"a teh typo\n",
        "wiki/b.md": b"```\nteh\n```\n",
        "wiki/c.md": b"`teh` in a span\n",
        "wiki/d.md": b"---\nx: teh\n---\nclean\n",
    }
    plan = preflight(
        DictHead(head),
        [
            each(
                select={"prefix": "", "contains": "teh", "outside_code": True},
                expected_count=1,
                do="append",
                content="ok\n",
            )
        ],
    )
    assert set(plan.changes) == {"wiki/a.md"}
    plan = preflight(
        DictHead(head),
        [each(select={"prefix": "", "contains": "teh"}, expected_count=4, do="append", content="ok\n")],
    )
    assert set(plan.changes) == set(head)


def test_a_wrong_expected_count_names_the_pages_and_plans_nothing() -> None:
    head = projects()
    with pytest.raises(BatchRejected) as refused:
        preflight(
            DictHead(head),
            [
                each(
                    select={"prefix": "wiki/projects/", "frontmatter": {"status": "archived"}},
                    expected_count=2,
                    do="frontmatter",
                    set={"k": 1},
                )
            ],
        )
    assert (refused.value.code, refused.value.index) == ("COUNT_MISMATCH", 0)
    assert "matches 3 page(s), expected_count is 2" in refused.value.message
    assert "wiki/projects/p0.md, wiki/projects/p3.md, wiki/projects/p6.md" in refused.value.message
    assert refused.value.details == {
        "actual_count": 3,
        "pages": ["wiki/projects/p0.md", "wiki/projects/p3.md", "wiki/projects/p6.md"],
    }


def test_without_a_count_every_page_picked_is_taken_and_named() -> None:
    """A dry run may leave expected_count out to learn the selection: the plan names every page."""
    head = projects()
    plan = preflight(
        DictHead(head),
        [
            each(
                select={"prefix": "wiki/projects/", "frontmatter": {"status": "archived"}},
                do="append",
                content="x",
            )
        ],
    )
    assert [entry.path for entry in plan.applied] == [f"wiki/projects/p{n}.md" for n in (0, 3, 6)]


def batch(dry_run: bool, expect: list[dict[str, Any]] | None = None, **fields: Any) -> Batch:
    edit = {"op": "each", "select": {"prefix": "wiki/"}, "do": "append", "content": "x", **fields}
    return Batch.model_validate({"message": "m", "edits": [edit], "dry_run": dry_run, "expect": expect})


def test_a_written_batch_states_the_count_unless_it_commits_a_checked_plan() -> None:
    """At submission: an each without expected_count is COUNT_REQUIRED in a batch that is written, and
    passes in a dry run, with the count, or with a plan's expect (which guards every page it names)."""
    with pytest.raises(BatchRejected) as refused:
        check_static(batch(dry_run=False))
    assert (refused.value.code, refused.value.index) == ("COUNT_REQUIRED", 0)
    assert "check the batch first" in refused.value.message
    check_static(batch(dry_run=True))
    check_static(batch(dry_run=False, expected_count=4))
    check_static(batch(dry_run=False, expect=[{"index": 0, "op": "append", "path": "wiki/a.md"}]))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"do": "append"}, "needs content"),
        ({"do": "rename"}, "needs new_path"),
        ({"do": "frontmatter"}, "keys to set or unset"),
        ({"do": "append", "content": "x", "new_path": "wiki/a"}, "takes no new_path"),
        ({"do": "delete", "rewrite_links": True}, "takes no rewrite_links"),
        ({"do": "frontmatter", "set": {"a": 1}, "unset": ["a"]}, "both set and unset"),
    ],
)
def test_fields_that_do_not_fit_do_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(BatchRejected) as refused:
        preflight(DictHead(projects()), [each(select={"prefix": "wiki/"}, expected_count=1, **fields)])
    assert refused.value.code == "INVALID_BATCH" and message in refused.value.message


def test_a_selected_page_where_the_op_is_not_allowed_is_refused() -> None:
    """raw/ is create-only: a selection that reaches it is refused with the op's own zone error."""
    with pytest.raises(BatchRejected) as refused:
        preflight(
            DictHead(projects()),
            [
                each(
                    select={"prefix": "", "frontmatter": {"status": "archived"}},
                    expected_count=4,
                    do="frontmatter",
                    set={"a": 1},
                )
            ],
        )
    assert refused.value.code == "ZONE_FORBIDDEN" and "raw/p0.md" in refused.value.message


def test_an_each_edit_without_its_selector_is_invalid() -> None:
    with pytest.raises(ValidationError):
        EDIT.validate_python({"op": "each", "expected_count": 1, "do": "append", "content": "x"})


# ---------------------------------------------------------------- the selection against a reference

NEEDLE = "zebra"
FOLDERS = ["wiki", "wiki/a", "wiki/a/b", "wiki/c"]
NAMES = ["one", "two", "draft-1", "x"]


def ref_glob(glob: str, path: str) -> bool:
    """The glob rule restated: split on '**' then match each piece's folders with fnmatch (no '/')."""
    pattern = ""
    for piece in re.split(r"(\*\*/|\*\*)", glob):
        if piece == "**/":
            pattern += "(?:.*/)?"
        elif piece == "**":
            pattern += ".*"
        else:
            pattern += fnmatch.translate(piece)[4:-3].replace(".*", "[^/]*").replace("(?s:", "(?:")
    return re.fullmatch(pattern, path, re.S) is not None


@st.composite
def wikis(draw: st.DrawFn) -> tuple[dict[str, bytes], dict[str, tuple[str | None, str]]]:
    """Pages with an optional status line in front matter and the needle nowhere, in prose or in code;
    what the generator did with each page, for the reference."""
    places = draw(
        st.sets(st.tuples(st.sampled_from(FOLDERS), st.sampled_from(NAMES)), min_size=1, max_size=10)
    )
    files: dict[str, bytes] = {}
    truth: dict[str, tuple[str | None, str]] = {}
    for folder, name in sorted(places):
        path = f"{folder}/{name}.md"
        status = draw(st.sampled_from([None, "archived", "active"]))
        where = draw(st.sampled_from(["none", "prose", "code", "span"]))
        body = {
            "none": "text\n",
            "prose": f"a {NEEDLE} here\n",
            "code": f"```\n{NEEDLE}\n```\n",
            "span": f"`{NEEDLE}`\n",
        }
        files[path] = ((f"---\nstatus: {status}\n---\n" if status else "") + "# T\n" + body[where]).encode()
        truth[path] = (status, where)
    files["wiki/pic.png"] = b"\x89PNG"
    return files, truth


@settings(max_examples=200, deadline=None)
@given(
    wikis(),
    st.sampled_from(["", "wiki/", "wiki/a/", "wiki/c"]),
    st.sampled_from(
        [
            None,
            "**/draft-*.md",
            "wiki/*.md",
            "wiki/**",
            "wiki/a/**/x.md",
            "*/?/*.md",
            "wiki/[ac]/*",
            "**/[!o]*.md",
        ]
    ),
    st.sampled_from([None, {"status": "archived"}, {"status": None}, {"status": "active"}]),
    st.sampled_from([None, (NEEDLE, False), (NEEDLE, True)]),
)
def test_each_selects_exactly_what_the_reference_selects(
    wiki: tuple[dict[str, bytes], dict[str, tuple[str | None, str]]],
    prefix: str,
    glob: str | None,
    frontmatter: dict[str, Any] | None,
    contains: tuple[str, bool] | None,
) -> None:
    files, truth = wiki
    wanted = []
    for path, (status, where) in sorted(truth.items()):
        if not path.startswith(prefix) or (glob is not None and not ref_glob(glob, path)):
            continue
        if frontmatter is not None and status != frontmatter["status"]:
            continue
        if contains is not None and (where == "none" or (contains[1] and where != "prose")):
            continue
        wanted.append(path)
    select: dict[str, Any] = {"prefix": prefix}
    if glob is not None:
        select["glob"] = glob
    if frontmatter is not None:
        select["frontmatter"] = frontmatter
    if contains is not None:
        select["contains"], select["outside_code"] = contains
    plan = preflight(
        DictHead(files), [each(select=select, expected_count=len(wanted), do="append", content="!\n")]
    )
    assert [a.path for a in plan.applied] == wanted
    assert all(
        plan.changes[path] is not None and plan.changes[path].data == files[path] + b"!\n" for path in wanted
    )
    assert set(plan.changes) == set(wanted)


@pytest.mark.parametrize(
    ("glob", "picked"),
    [
        ("wiki/**/x.md", ["wiki/a/b/x.md", "wiki/a/x.md", "wiki/x.md"]),
        ("wiki/*/x.md", ["wiki/a/x.md"]),
        ("wiki/**", ["wiki/a/b/x.md", "wiki/a/x.md", "wiki/x.md", "wiki/y-1.md"]),
        ("**/y-?.md", ["wiki/y-1.md"]),
        ("wiki/a/**/x.md", ["wiki/a/b/x.md", "wiki/a/x.md"]),
        ("wiki/[a-c]/*.md", ["wiki/a/x.md"]),
        ("wiki/[!a]*.md", ["wiki/x.md", "wiki/y-1.md"]),
    ],
)
def test_glob_star_stays_in_a_folder_and_double_star_spans_any(glob: str, picked: list[str]) -> None:
    files = {path: b"x\n" for path in ("wiki/x.md", "wiki/a/x.md", "wiki/a/b/x.md", "wiki/y-1.md")}
    plan = preflight(
        DictHead(files),
        [each(select={"prefix": "", "glob": glob}, expected_count=len(picked), do="append", content="!\n")],
    )
    assert [a.path for a in plan.applied] == picked


def test_replace_across_takes_a_selector_to_narrow_its_pages() -> None:
    """replace_across with select: only the pages under prefix that pass its tests are changed, and
    expected_count counts their matches."""
    head = {
        "wiki/a.md": b"---\nstatus: draft\n---\nteh\n",
        "wiki/b.md": b"teh\n",
        "wiki/c/d.md": b"---\nstatus: draft\n---\nteh teh\n",
    }
    edit = EDIT.validate_python(
        {
            "op": "replace_across",
            "prefix": "wiki/",
            "old": "teh",
            "new": "the",
            "expected_count": 3,
            "select": {"frontmatter": {"status": "draft"}},
        }
    )
    plan = preflight(DictHead(head), [edit])
    assert [(a.path, a.count) for a in plan.applied] == [("wiki/a.md", 1), ("wiki/c/d.md", 2)]
    narrowed = EDIT.validate_python(
        {
            "op": "replace_across",
            "prefix": "wiki/",
            "old": "teh",
            "new": "the",
            "select": {"glob": "wiki/*.md"},
        }
    )
    assert sorted(preflight(DictHead(head), [narrowed]).changes) == ["wiki/a.md", "wiki/b.md"]
    with pytest.raises(BatchRejected) as refused:
        preflight(
            DictHead(head),
            [
                EDIT.validate_python(
                    {
                        "op": "replace_across",
                        "prefix": "",
                        "old": "x",
                        "new": "y",
                        "select": {"outside_code": True},
                    }
                )
            ],
        )
    assert refused.value.code == "INVALID_BATCH" and "takes select.contains" in refused.value.message
