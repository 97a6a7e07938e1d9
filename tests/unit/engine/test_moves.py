"""rename of files and folders, with rewrite_links, through preflight."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from pydantic import TypeAdapter

from worker.engine import DictHead, Plan, blob_id, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Edit, Limits

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)

FILES = {
    "index.md": "# Index\n\n- [[redis]]\n- [Redis](wiki/db/redis.md)\n",
    "wiki/db/redis.md": "# Redis\n\nSee [Postgres](postgres.md) and [[postgres#Setup|pg]].\n",
    "wiki/db/postgres.md": "# Postgres\n\nUnlike ![[redis]], see [r](./redis.md#Persistence).\n",
    "wiki/notes/cache.md": (
        "Use [[db/redis]] or [[/wiki/db/redis.md]].\n\n```\n[[redis]]\n```\n\n`[[redis]]`\n"
    ),
    "wiki/other/redis.txt": "not a page\n",
    "raw/paper.md": "Cites [[redis]].\n",
}


def head(files: dict[str, str] | None = None) -> DictHead:
    return DictHead({path: text.encode() for path, text in (files or FILES).items()})


def v(path: str, files: dict[str, str] | None = None) -> str:
    return blob_id((files or FILES)[path].encode())


def rename(path: str, new_path: str, version: str | None = None, rewrite: bool = True) -> Edit:
    raw: dict[str, Any] = {"op": "rename", "path": path, "new_path": new_path, "rewrite_links": rewrite}
    if version is not None:
        raw["expected_version"] = version
    return EDIT.validate_python(raw)


def result(h: DictHead, plan: Plan) -> dict[str, str]:
    files = {path: data.decode("utf-8", "replace") for path, data in h.files.items()}
    for path, new in plan.changes.items():
        if new is None:
            files.pop(path, None)
        else:
            files[path] = (new.data if new.data is not None else h.files[new.source or ""]).decode()
    return files


def refused(h: DictHead, edits: Sequence[Edit]) -> tuple[str, int | None]:
    with pytest.raises(BatchRejected) as info:
        preflight(h, edits)
    return info.value.code, info.value.index


def test_rename_with_rewrite_links_fixes_every_form_and_leaves_code() -> None:
    """Every link to the moved page is rewritten in its own form; links in code and other text stay."""
    h = head()
    plan = preflight(h, [rename("wiki/db/redis.md", "wiki/db/keyvalue.md", v("wiki/db/redis.md"))])
    files = result(h, plan)
    assert files["index.md"] == "# Index\n\n- [[keyvalue]]\n- [Redis](wiki/db/keyvalue.md)\n"
    assert files["wiki/db/postgres.md"] == (
        "# Postgres\n\nUnlike ![[keyvalue]], see [r](./keyvalue.md#Persistence).\n"
    )
    assert files["wiki/notes/cache.md"] == (
        "Use [[db/keyvalue]] or [[/wiki/db/keyvalue.md]].\n\n```\n[[redis]]\n```\n\n`[[redis]]`\n"
    )
    assert files["wiki/db/keyvalue.md"] == FILES["wiki/db/redis.md"]
    assert files["raw/paper.md"] == FILES["raw/paper.md"]
    entries = [a.to_dict() for a in plan.applied]
    assert entries[0] == {
        "index": 0,
        "op": "rename",
        "path": "wiki/db/redis.md",
        "new_path": "wiki/db/keyvalue.md",
        "version": v("wiki/db/redis.md"),
    }
    rewritten = {e["path"]: e["count"] for e in entries[1:]}
    assert rewritten == {"index.md": 2, "wiki/db/postgres.md": 2, "wiki/notes/cache.md": 2}
    assert all(e["op"] == "rewrite_links" and e["index"] == 0 for e in entries[1:])
    assert [w.code for w in plan.warnings] == ["NOT_REWRITTEN"]
    assert plan.warnings[0].path == "raw/paper.md"


def test_a_bare_name_that_still_resolves_is_left_as_written() -> None:
    """Moving a page to another folder keeps bare [[name]] links; relative links are fixed."""
    h = head()
    plan = preflight(h, [rename("wiki/db/redis.md", "wiki/cache/redis.md", v("wiki/db/redis.md"))])
    files = result(h, plan)
    assert "- [[redis]]\n- [Redis](wiki/cache/redis.md)" in files["index.md"]
    assert files["wiki/cache/redis.md"] == (
        "# Redis\n\nSee [Postgres](../db/postgres.md) and [[postgres#Setup|pg]].\n"
    )
    assert "[[cache/redis]]" in files["wiki/notes/cache.md"]


def test_a_bare_name_made_ambiguous_by_the_move_is_qualified() -> None:
    """A page moved next to a namesake: the links to the other namesake are made unambiguous."""
    files = {"wiki/a/x.md": "# A\n", "wiki/b/y.md": "# B\n", "wiki/c.md": "[[x]] and [[y]]\n"}
    h = head(files)
    plan = preflight(h, [rename("wiki/b/y.md", "wiki/b/x.md", v("wiki/b/y.md", files))])
    assert result(h, plan)["wiki/c.md"] == "[[a/x]] and [[b/x]]\n"


def test_rewrite_sees_pages_as_the_batch_left_them() -> None:
    """A page created and a page changed earlier in the batch get their links rewritten too."""
    h = head()
    edits = [
        EDIT.validate_python({"op": "create", "path": "wiki/new.md", "content": "[[redis]]\n"}),
        EDIT.validate_python({"op": "append", "path": "index.md", "content": "- [[db/redis]]\n"}),
        rename("wiki/db/redis.md", "wiki/db/kv.md", v("wiki/db/redis.md")),
    ]
    files = result(h, preflight(h, edits))
    assert files["wiki/new.md"] == "[[kv]]\n"
    assert files["index.md"].endswith("- [[db/kv]]\n")


def test_without_rewrite_links_nothing_but_the_file_moves() -> None:
    """rewrite_links defaults to false: a rename touches only its own path."""
    h = head()
    plan = preflight(h, [rename("wiki/db/redis.md", "wiki/db/kv.md", v("wiki/db/redis.md"), rewrite=False)])
    assert set(plan.changes) == {"wiki/db/redis.md", "wiki/db/kv.md"}


def test_folder_rename_moves_every_file_and_fixes_links() -> None:
    """A folder rename moves each file under it (one applied entry each) and rewrites links to them."""
    h = head()
    plan = preflight(h, [rename("wiki/db", "wiki/data")])
    files = result(h, plan)
    assert {p for p in files if p.startswith("wiki/data/")} == {"wiki/data/redis.md", "wiki/data/postgres.md"}
    assert not any(p.startswith("wiki/db/") for p in files)
    assert "[Redis](wiki/data/redis.md)" in files["index.md"]
    assert "[[data/redis]]" in files["wiki/notes/cache.md"]
    moved = [(a.path, a.new_path) for a in plan.applied if a.op == "rename"]
    assert moved == [
        ("wiki/db/postgres.md", "wiki/data/postgres.md"),
        ("wiki/db/redis.md", "wiki/data/redis.md"),
    ]


def test_folder_rename_into_its_own_subfolder() -> None:
    """wiki/db to wiki/db/old: every file lands under the new folder, none is lost."""
    h = head()
    files = result(h, preflight(h, [rename("wiki/db", "wiki/db/old")]))
    assert sorted(p for p in files if p.startswith("wiki/db")) == [
        "wiki/db/old/postgres.md",
        "wiki/db/old/redis.md",
    ]


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (rename("wiki/db", "wiki/data", version="0" * 40), "INVALID_BATCH"),
        (rename("wiki/db", "wiki/db"), "PATH_EXISTS"),
        (rename("wiki/db", "raw/db"), "ZONE_FORBIDDEN"),
        (rename("wiki/none", "wiki/data"), "NOT_FOUND"),
        (rename("wiki/db/redis.md", "wiki/db/postgres.md", v("wiki/db/redis.md")), "PATH_EXISTS"),
        (rename("wiki/db/redis.md", "wiki/kv.md"), "VERSION_REQUIRED"),
        (rename("raw/paper.md", "wiki/paper.md"), "ZONE_FORBIDDEN"),
        (rename("index.md", "wiki/index.md", v("index.md")), "PROTECTED_PATH"),
    ],
    ids=[
        "folder-with-version",
        "folder-onto-itself",
        "into-raw",
        "missing",
        "onto-file",
        "no-version",
        "out-of-raw",
        "index",
    ],
)
def test_rename_refusals(edit: Edit, code: str) -> None:
    """Folder renames take no version; targets must be free and zoned; files need their version."""
    assert refused(head(), [edit]) == (code, 0)


def test_folder_rename_onto_existing_files_is_path_exists() -> None:
    """A file of the folder landing on a file that stays is PATH_EXISTS."""
    files = {"wiki/a/x.md": "a", "wiki/b/x.md": "b"}
    assert refused(head(files), [rename("wiki/a", "wiki/b")]) == ("PATH_EXISTS", 0)


def test_chained_version_after_a_rewrite() -> None:
    """An edit after a rewrite may name the page's head version or the version the rewrite gave it."""
    h = head()
    first = rename("wiki/db/redis.md", "wiki/db/kv.md", v("wiki/db/redis.md"))
    rewritten = next(a.version for a in preflight(h, [first]).applied if a.path == "index.md")
    assert rewritten is not None
    for version in (v("index.md"), rewritten):
        edit = EDIT.validate_python(
            {
                "op": "replace",
                "path": "index.md",
                "old": "# Index",
                "new": "# Home",
                "expected_version": version,
            }
        )
        assert result(h, preflight(h, [first, edit]))["index.md"].startswith("# Home\n")


def test_a_refused_later_edit_refuses_the_whole_rename() -> None:
    """All or nothing: a rewrite followed by a failing edit gives no plan at all."""
    h = head()
    before = dict(h.files)
    bad = EDIT.validate_python({"op": "delete", "path": "wiki/none.md", "expected_version": "0" * 40})
    assert refused(h, [rename("wiki/db", "wiki/data"), bad]) == ("NOT_FOUND", 1)
    assert h.files == before


def test_a_rewrite_cannot_grow_a_page_past_max_file_bytes() -> None:
    """Many short links rewritten to a long path: BATCH_TOO_LARGE before the page is built."""
    long_name = "wiki/" + "d" * 200 + "/" + "n" * 200 + ".md"
    files = {"wiki/a.md": "# A\n", "wiki/links.md": "[x](a.md) " * 200}
    edit = rename("wiki/a.md", long_name, v("wiki/a.md", files))
    with pytest.raises(BatchRejected) as info:
        preflight(head(files), [edit], limits=Limits(max_file_bytes=20_000))
    assert (info.value.code, info.value.index) == ("BATCH_TOO_LARGE", 0)


class NoSearchHead(DictHead):
    """A head that cannot search text: the engine must then read every page."""

    def mentioning(self, needles: Sequence[str]) -> Iterable[str] | None:  # type: ignore[override]
        return None


def test_a_head_without_text_search_gives_the_same_plan() -> None:
    """mentioning() is only a shortcut: without it every page is read and the plan is identical."""
    edit = rename("wiki/db", "wiki/data")
    plain, searched = preflight(NoSearchHead(head().files), [edit]), preflight(head(), [edit])
    assert plain.changes == searched.changes
    assert [a.to_dict() for a in plain.applied] == [a.to_dict() for a in searched.applied]
