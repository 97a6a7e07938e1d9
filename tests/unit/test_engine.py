"""Preflight (contract 3.1) against ``DictHead``: every rule and every error code, with its index."""

from __future__ import annotations

import subprocess

import pytest

from worker.engine import Applied, DictHead, NewFile, Plan, blob_id, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Create, Delete, Edit, Overwrite, Rename, Replace

A = b"# A\nalpha\n"
B = b"# B\nbeta beta\n"
C = b"# C\n"


def std() -> DictHead:
    return DictHead({"wiki/a.md": A, "wiki/b.md": B, "wiki/dir/x.md": C, "index.md": b"# Index\n"})


def v(data: bytes) -> str:
    return blob_id(data)


def create(path: str, content: str = "new\n") -> Create:
    return Create(op="create", path=path, content=content)


def overwrite(path: str, content: str, version: str | None = None) -> Overwrite:
    return Overwrite(op="overwrite", path=path, content=content, expected_version=version)


def replace(
    path: str,
    old: str,
    new: str,
    version: str | None = None,
    replace_all: bool = False,
    expected_count: int | None = None,
) -> Replace:
    return Replace(
        op="replace",
        path=path,
        old=old,
        new=new,
        expected_version=version,
        replace_all=replace_all,
        expected_count=expected_count,
    )


def delete(path: str, version: str | None = None) -> Delete:
    return Delete(op="delete", path=path, expected_version=version)


def rename(path: str, new_path: str, version: str | None = None) -> Rename:
    return Rename(op="rename", path=path, new_path=new_path, expected_version=version)


def refused(h: DictHead, edits: list[Edit]) -> tuple[str, int | None]:
    with pytest.raises(BatchRejected) as info:
        preflight(h, edits)
    return info.value.code, info.value.index


def result(h: DictHead, plan: Plan) -> dict[str, bytes]:
    """The files after applying ``plan`` to ``h``."""
    files = dict(h.files)
    for path, new in plan.changes.items():
        if new is None:
            files.pop(path, None)
        else:
            files[path] = new.data if new.data is not None else h.read(new.source or "")
            assert blob_id(files[path]) == new.version
    return files


# -- versions are git blob ids -------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"hello\n", b"\x00\xff\r\n", "é日本".encode(), b"x" * 100_000])
def test_blob_id_equals_git_hash_object(data: bytes) -> None:
    """blob_id prints exactly what `git hash-object --stdin` prints for the same bytes."""
    out = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True)
    assert blob_id(data) == out.stdout.decode().strip()


def test_dicthead_reports_versions_folders_and_files_under() -> None:
    """DictHead answers versions, folders (at any depth) and files under a folder."""
    h = DictHead({"wiki/d/e/f.md": b"f", "wiki/a.md": b"a"})
    assert h.version("wiki/a.md") == blob_id(b"a")
    assert h.version("wiki/d") is None
    assert h.is_dir("wiki") and h.is_dir("wiki/d") and h.is_dir("wiki/d/e")
    assert not h.is_dir("wiki/a.md") and not h.is_dir("wiki/d/e/f.md")
    assert list(h.files_under("wiki/d")) == ["wiki/d/e/f.md"]


# -- rule 1: in order, chained -------------------------------------------------------------------------


def test_create_then_replace_then_rename_chain_on_one_path() -> None:
    """Edits chain: a created page is replaced and then renamed within one batch, without versions."""
    h = std()
    plan = preflight(
        h,
        [
            create("wiki/new.md", "one two\n"),
            replace("wiki/new.md", "two", "three"),
            rename("wiki/new.md", "wiki/final.md"),
        ],
    )
    files = result(h, plan)
    assert files["wiki/final.md"] == b"one three\n"
    assert "wiki/new.md" not in files
    assert "wiki/new.md" not in plan.changes  # created and moved away: no change at that path
    assert [a.op for a in plan.applied] == ["create", "replace", "rename"]


def test_later_edit_sees_earlier_edit_content() -> None:
    """A replace after an overwrite of the same head path matches the overwritten text, not the head's."""
    h = std()
    plan = preflight(
        h,
        [overwrite("wiki/a.md", "fresh text\n", v(A)), replace("wiki/a.md", "fresh", "new", v(A))],
    )
    assert result(h, plan)["wiki/a.md"] == b"new text\n"


def test_replace_of_head_text_after_overwrite_is_old_not_found() -> None:
    """Once overwritten, the head's old text is gone for later edits of the batch."""
    edits: list[Edit] = [overwrite("wiki/a.md", "fresh\n", v(A)), replace("wiki/a.md", "alpha", "x", v(A))]
    assert refused(std(), edits) == ("OLD_NOT_FOUND", 1)


def test_delete_then_create_same_path() -> None:
    """A head page deleted then created again in the batch ends with the new content."""
    h = std()
    plan = preflight(h, [delete("wiki/a.md", v(A)), create("wiki/a.md", "again\n")])
    assert result(h, plan)["wiki/a.md"] == b"again\n"


def test_edit_after_delete_is_not_found() -> None:
    """An edit of a path deleted earlier in the batch is NOT_FOUND at that edit."""
    assert refused(std(), [delete("wiki/a.md", v(A)), overwrite("wiki/a.md", "x", v(A))]) == ("NOT_FOUND", 1)


def test_edit_of_rename_source_after_rename_is_not_found() -> None:
    """After a rename, the old path no longer exists for later edits."""
    edits: list[Edit] = [rename("wiki/a.md", "wiki/z.md", v(A)), delete("wiki/a.md", v(A))]
    assert refused(std(), edits) == ("NOT_FOUND", 1)


# -- rule 2: expected_version --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        overwrite("wiki/a.md", "x"),
        replace("wiki/a.md", "alpha", "x"),
        delete("wiki/a.md"),
        rename("wiki/a.md", "wiki/z.md"),
    ],
    ids=["overwrite", "replace", "delete", "rename"],
)
def test_expected_version_required_on_head_path(edit: Edit) -> None:
    """Modifying, deleting or renaming a head path without expected_version is VERSION_REQUIRED."""
    assert refused(std(), [create("wiki/n.md"), edit]) == ("VERSION_REQUIRED", 1)


@pytest.mark.parametrize(
    "edit",
    [
        overwrite("wiki/a.md", "x", v(B)),
        replace("wiki/a.md", "alpha", "x", v(B)),
        delete("wiki/a.md", v(B)),
        rename("wiki/a.md", "wiki/z.md", v(B)),
    ],
    ids=["overwrite", "replace", "delete", "rename"],
)
def test_expected_version_mismatch(edit: Edit) -> None:
    """An expected_version other than the head's version is VERSION_MISMATCH."""
    assert refused(std(), [create("wiki/n.md"), edit]) == ("VERSION_MISMATCH", 1)


def test_expected_version_may_be_the_head_version_or_one_the_batch_produced() -> None:
    """Rule 2 (amended): a later edit of a head path may name the head's version or any version an
    earlier edit of the batch gave it (chained); any other version is VERSION_MISMATCH naming both."""
    h = std()
    first = overwrite("wiki/a.md", "mid\n", v(A))
    for expected in (v(A), v(b"mid\n")):
        plan = preflight(h, [first, overwrite("wiki/a.md", "end\n", expected)])
        assert result(h, plan)["wiki/a.md"] == b"end\n"
    chained = [first, overwrite("wiki/a.md", "end\n", v(b"mid\n")), delete("wiki/a.md", v(b"mid\n"))]
    assert "wiki/a.md" not in result(h, preflight(h, chained))
    with pytest.raises(BatchRejected) as info:
        preflight(h, [first, overwrite("wiki/a.md", "end\n", v(b"never"))])
    assert (info.value.code, info.value.index) == ("VERSION_MISMATCH", 1)
    assert v(A) in info.value.message and v(b"mid\n") in info.value.message
    assert f"you gave version {v(b'never')} for 'wiki/a.md'; the head has {v(A)}" in info.value.message
    mid = v(b"mid\n")
    assert f"earlier edits of this batch gave it {mid}" in info.value.message


def test_expected_version_ignored_for_path_created_in_batch() -> None:
    """Edits of a path created earlier in the batch need no version and ignore a wrong one."""
    h = std()
    plan = preflight(
        h,
        [
            create("wiki/n.md", "one\n"),
            overwrite("wiki/n.md", "two\n"),
            replace("wiki/n.md", "two", "three", version=v(b"unrelated")),
            delete("wiki/n.md", v(b"also wrong")),
        ],
    )
    assert "wiki/n.md" not in plan.changes
    assert [a.version for a in plan.applied] == [v(b"one\n"), v(b"two\n"), v(b"three\n"), None]


def test_expected_version_ignored_for_rename_target() -> None:
    """A rename target counts as created in the batch: later edits of it need no version."""
    h = std()
    plan = preflight(
        h,
        [
            rename("wiki/a.md", "wiki/z.md", v(A)),
            replace("wiki/z.md", "alpha", "omega"),
            delete("wiki/b.md", v(B)),
        ],
    )
    files = result(h, plan)
    assert files["wiki/z.md"] == b"# A\nomega\n"
    assert "wiki/a.md" not in files and "wiki/b.md" not in files


def test_expected_version_ignored_after_delete_and_recreate() -> None:
    """A head path deleted and created again is a path created in the batch."""
    h = std()
    plan = preflight(
        h, [delete("wiki/a.md", v(A)), create("wiki/a.md", "x\n"), overwrite("wiki/a.md", "y\n")]
    )
    assert result(h, plan)["wiki/a.md"] == b"y\n"


def test_version_of_a_path_not_at_head_is_never_required() -> None:
    """A create needs no version, and a matching version on an existing path passes."""
    h = std()
    plan = preflight(h, [create("wiki/n.md"), overwrite("wiki/a.md", "x", v(A))])
    assert sorted(plan.changes) == ["wiki/a.md", "wiki/n.md"]


# -- rule 3: existence ---------------------------------------------------------------------------------


def test_create_on_existing_is_path_exists() -> None:
    """Creating a path that exists at the head is PATH_EXISTS."""
    assert refused(std(), [create("wiki/n.md"), create("wiki/a.md")]) == ("PATH_EXISTS", 1)


def test_create_twice_in_batch_is_path_exists() -> None:
    """Creating the same path twice in one batch is PATH_EXISTS at the second create."""
    assert refused(std(), [create("wiki/n.md"), create("wiki/n.md")]) == ("PATH_EXISTS", 1)


@pytest.mark.parametrize(
    "edit",
    [
        overwrite("wiki/missing.md", "x", v(A)),
        replace("wiki/missing.md", "a", "b", v(A)),
        delete("wiki/missing.md", v(A)),
        rename("wiki/missing.md", "wiki/z.md", v(A)),
    ],
    ids=["overwrite", "replace", "delete", "rename"],
)
def test_ops_on_missing_path_are_not_found(edit: Edit) -> None:
    """Overwrite, replace, delete and rename of a missing path are NOT_FOUND."""
    assert refused(std(), [create("wiki/n.md"), edit]) == ("NOT_FOUND", 1)


def test_folder_is_not_a_file() -> None:
    """A path that is a folder at the head is NOT_FOUND for a delete."""
    assert refused(std(), [delete("wiki/dir", v(C))]) == ("NOT_FOUND", 0)


def test_rename_onto_existing_is_path_exists() -> None:
    """Renaming onto a path that exists at the head is PATH_EXISTS."""
    assert refused(std(), [rename("wiki/a.md", "wiki/b.md", v(A))]) == ("PATH_EXISTS", 0)


def test_rename_onto_path_created_in_batch_is_path_exists() -> None:
    """Renaming onto a path created earlier in the batch is PATH_EXISTS."""
    edits: list[Edit] = [create("wiki/n.md"), rename("wiki/a.md", "wiki/n.md", v(A))]
    assert refused(std(), edits) == ("PATH_EXISTS", 1)


def test_rename_onto_itself_is_path_exists() -> None:
    """Renaming a page onto its own path is PATH_EXISTS (the target exists)."""
    assert refused(std(), [rename("wiki/a.md", "wiki/a.md", v(A))]) == ("PATH_EXISTS", 0)


def test_rename_onto_path_deleted_in_batch_is_allowed() -> None:
    """A rename may target a path deleted earlier in the batch."""
    h = std()
    plan = preflight(h, [delete("wiki/b.md", v(B)), rename("wiki/a.md", "wiki/b.md", v(A))])
    files = result(h, plan)
    assert files["wiki/b.md"] == A and "wiki/a.md" not in files


# -- rule 4: replace -----------------------------------------------------------------------------------


def test_replace_old_not_found() -> None:
    """A replace whose old does not occur is OLD_NOT_FOUND."""
    assert refused(std(), [create("wiki/n.md"), replace("wiki/a.md", "gamma", "x", v(A))]) == (
        "OLD_NOT_FOUND",
        1,
    )


def test_replace_old_not_unique() -> None:
    """A replace whose old occurs twice, without replace_all, is OLD_NOT_UNIQUE."""
    assert refused(std(), [replace("wiki/b.md", "beta", "x", v(B))]) == ("OLD_NOT_UNIQUE", 0)


def test_replace_single_occurrence_replaces_it() -> None:
    """A unique old is replaced once, byte-exact."""
    h = std()
    plan = preflight(h, [replace("wiki/a.md", "alpha", "ALPHA", v(A))])
    assert result(h, plan)["wiki/a.md"] == b"# A\nALPHA\n"


def test_replace_all_replaces_every_occurrence() -> None:
    """replace_all replaces every occurrence."""
    h = std()
    plan = preflight(h, [replace("wiki/b.md", "beta", "gamma", v(B), replace_all=True)])
    assert result(h, plan)["wiki/b.md"] == b"# B\ngamma gamma\n"


def test_replace_expected_count_match() -> None:
    """With replace_all and an expected_count equal to the occurrences, the replace applies."""
    h = std()
    plan = preflight(h, [replace("wiki/b.md", "beta", "x", v(B), replace_all=True, expected_count=2)])
    assert result(h, plan)["wiki/b.md"] == b"# B\nx x\n"


def test_replace_expected_count_mismatch() -> None:
    """An expected_count different from the occurrences is COUNT_MISMATCH."""
    edits: list[Edit] = [replace("wiki/b.md", "beta", "x", v(B), replace_all=True, expected_count=3)]
    assert refused(std(), edits) == ("COUNT_MISMATCH", 0)
    assert refused(std(), [replace("wiki/a.md", "alpha", "x", v(A), expected_count=2)]) == (
        "COUNT_MISMATCH",
        0,
    )


def test_replace_expected_count_one_matches_unique() -> None:
    """expected_count=1 on a unique old applies like a plain replace."""
    h = std()
    plan = preflight(h, [replace("wiki/a.md", "alpha", "x", v(A), expected_count=1)])
    assert result(h, plan)["wiki/a.md"] == b"# A\nx\n"


def test_replace_empty_old_is_invalid_batch() -> None:
    """A replace with an empty old is INVALID_BATCH."""
    assert refused(std(), [create("wiki/n.md"), replace("wiki/a.md", "", "x", v(A))]) == ("INVALID_BATCH", 1)


def test_replace_is_byte_exact_crlf_does_not_match_lf() -> None:
    """Matching is byte-exact: an LF old does not match CRLF text, and the CRLF old does."""
    h = DictHead({"wiki/w.md": b"line one\r\nline two\r\n"})
    ver = blob_id(b"line one\r\nline two\r\n")
    assert refused(h, [replace("wiki/w.md", "one\nline", "x", ver)]) == ("OLD_NOT_FOUND", 0)
    plan = preflight(h, [replace("wiki/w.md", "one\r\nline", "1\r\n2", ver)])
    assert result(h, plan)["wiki/w.md"] == b"line 1\r\n2 two\r\n"


def test_replace_is_case_sensitive_and_unicode_exact() -> None:
    """Matching does not fold case or normalise Unicode (NFC é vs NFD e + accent)."""
    h = DictHead({"wiki/u.md": "Café\n".encode()})
    ver = blob_id("Café\n".encode())
    assert refused(h, [replace("wiki/u.md", "café", "x", ver)]) == ("OLD_NOT_FOUND", 0)
    assert refused(h, [replace("wiki/u.md", "Cafe\u0301", "x", ver)]) == ("OLD_NOT_FOUND", 0)


def test_replace_works_on_non_utf8_file() -> None:
    """A replace matches UTF-8 bytes inside a file that is not valid UTF-8 and keeps the other bytes."""
    data = b"\xff\xfe head \xff\n"
    h = DictHead({"wiki/bin.md": data})
    plan = preflight(h, [replace("wiki/bin.md", "head", "tail", blob_id(data))])
    assert result(h, plan)["wiki/bin.md"] == b"\xff\xfe tail \xff\n"


# -- rule 5: file/folder conflicts ---------------------------------------------------------------------


def test_file_under_a_file_is_path_conflict() -> None:
    """Creating wiki/a.md/x.md where wiki/a.md is a file is PATH_CONFLICT at that create."""
    assert refused(std(), [create("wiki/n.md"), create("wiki/a.md/x.md")]) == ("PATH_CONFLICT", 1)


def test_file_over_a_folder_is_path_conflict() -> None:
    """Creating wiki/dir where wiki/dir/x.md exists is PATH_CONFLICT at that create."""
    assert refused(std(), [create("wiki/n.md"), create("wiki/dir")]) == ("PATH_CONFLICT", 1)


def test_rename_onto_a_folder_is_path_conflict() -> None:
    """Renaming a page onto a path that is a folder is PATH_CONFLICT."""
    assert refused(std(), [rename("wiki/a.md", "wiki/dir", v(A))]) == ("PATH_CONFLICT", 0)


def test_rename_under_a_file_is_path_conflict() -> None:
    """Renaming a page under a path that is a file is PATH_CONFLICT."""
    assert refused(std(), [rename("wiki/a.md", "wiki/b.md/a.md", v(A))]) == ("PATH_CONFLICT", 0)


@pytest.mark.parametrize(
    "edits",
    [[create("wiki/f"), create("wiki/f/g.md")], [create("wiki/f/g.md"), create("wiki/f")]],
    ids=["file-then-under", "under-then-file"],
)
def test_conflict_between_two_created_paths_names_one_of_them(edits: list[Edit]) -> None:
    """A file and a file under it both created in the batch is PATH_CONFLICT naming one of the two edits."""
    with pytest.raises(BatchRejected) as info:
        preflight(std(), edits)
    assert info.value.code == "PATH_CONFLICT"
    assert info.value.index in (0, 1)
    assert repr(edits[info.value.index].path) in info.value.message


def test_file_over_folder_allowed_when_its_only_file_is_deleted_first() -> None:
    """Deleting a folder's only file lets a file take the folder's name in the same batch."""
    h = std()
    plan = preflight(h, [delete("wiki/dir/x.md", v(C)), create("wiki/dir", "now a file\n")])
    files = result(h, plan)
    assert files["wiki/dir"] == b"now a file\n" and "wiki/dir/x.md" not in files


def test_file_over_folder_allowed_when_its_only_file_is_deleted_after() -> None:
    """Conflicts are judged on the batch's result: deleting the folder's file later also works."""
    h = std()
    plan = preflight(h, [create("wiki/dir", "file\n"), delete("wiki/dir/x.md", v(C))])
    assert result(h, plan)["wiki/dir"] == b"file\n"


def test_file_over_folder_refused_when_other_files_remain() -> None:
    """A folder with a file left in it still blocks a file of its name."""
    h = DictHead({"wiki/dir/x.md": C, "wiki/dir/sub/y.md": C})
    assert refused(h, [delete("wiki/dir/x.md", v(C)), create("wiki/dir")]) == ("PATH_CONFLICT", 1)


def test_folder_over_file_allowed_when_file_is_deleted() -> None:
    """Deleting a file lets a folder of its name hold new files in the same batch."""
    h = std()
    plan = preflight(h, [delete("wiki/a.md", v(A)), create("wiki/a.md/x.md", "inside\n")])
    files = result(h, plan)
    assert files["wiki/a.md/x.md"] == b"inside\n" and "wiki/a.md" not in files


def test_file_under_file_deep_ancestor_is_path_conflict() -> None:
    """A file two levels under a file is a PATH_CONFLICT too."""
    assert refused(std(), [create("wiki/a.md/deep/x.md")]) == ("PATH_CONFLICT", 0)


# -- applied list and plan -----------------------------------------------------------------------------


def test_applied_has_one_entry_per_edit_with_version_after_it() -> None:
    """applied lists every edit in order with the version after it (None on delete, new_path on rename)."""
    h = std()
    plan = preflight(
        h,
        [
            create("wiki/n.md", "n\n"),
            overwrite("index.md", "# I\n", v(b"# Index\n")),
            replace("wiki/b.md", "beta", "x", v(B), replace_all=True),
            rename("wiki/a.md", "wiki/z.md", v(A)),
            delete("wiki/dir/x.md", v(C)),
        ],
    )
    assert plan.applied == [
        Applied(0, "create", "wiki/n.md", v(b"n\n")),
        Applied(1, "overwrite", "index.md", v(b"# I\n")),
        Applied(2, "replace", "wiki/b.md", v(b"# B\nx x\n")),
        Applied(3, "rename", "wiki/a.md", v(A), new_path="wiki/z.md"),
        Applied(4, "delete", "wiki/dir/x.md", None),
    ]
    assert plan.applied[3].to_dict() == {
        "index": 3,
        "op": "rename",
        "path": "wiki/a.md",
        "new_path": "wiki/z.md",
        "version": v(A),
    }
    assert plan.applied[4].to_dict() == {"index": 4, "op": "delete", "path": "wiki/dir/x.md", "version": None}
    assert "new_path" not in plan.applied[0].to_dict()


def test_plan_changes_hold_only_changed_paths() -> None:
    """The plan names each changed path once: new bytes, a head source for a rename, None for a delete."""
    h = std()
    plan = preflight(h, [rename("wiki/a.md", "wiki/z.md", v(A)), delete("wiki/b.md", v(B))])
    assert plan.changes == {
        "wiki/a.md": None,
        "wiki/z.md": NewFile(v(A), source="wiki/a.md"),
        "wiki/b.md": None,
    }


def test_create_then_delete_is_no_change() -> None:
    """A path created and deleted again in the batch does not appear in the plan's changes."""
    plan = preflight(std(), [create("wiki/tmp.md"), delete("wiki/tmp.md")])
    assert plan.changes == {}
    assert [a.version for a in plan.applied] == [v(b"new\n"), None]


def test_empty_content_is_the_empty_blob() -> None:
    """An empty file's version is git's empty blob id."""
    out = subprocess.run(["git", "hash-object", "--stdin"], input=b"", capture_output=True, check=True)
    plan = preflight(std(), [create("wiki/empty.md", "")])
    assert plan.applied[0].version == out.stdout.decode().strip()


def test_preflight_refuses_undecodable_content() -> None:
    """Preflight alone refuses invalid base64 or a lone surrogate with INVALID_ENCODING at that edit."""
    bad_base64 = Create(op="create", path="raw/b.bin", content="%%%", encoding="base64")
    assert refused(std(), [create("wiki/n.md"), bad_base64]) == ("INVALID_ENCODING", 1)
    assert refused(std(), [overwrite("wiki/a.md", "\ud800", v(A))]) == ("INVALID_ENCODING", 0)


def test_first_failing_edit_wins() -> None:
    """When several edits are wrong, the error names the first one in batch order."""
    edits: list[Edit] = [
        create("wiki/ok.md"),
        delete("wiki/missing.md", v(A)),
        create("wiki/a.md"),
    ]
    assert refused(std(), edits) == ("NOT_FOUND", 1)


def test_preflight_does_not_mutate_the_head() -> None:
    """A rejected or accepted preflight leaves the head view unchanged."""
    h = std()
    before = dict(h.files)
    preflight(h, [delete("wiki/a.md", v(A)), create("wiki/q.md")])
    refused(h, [delete("wiki/a.md", v(A)), create("wiki/b.md")])
    assert h.files == before


def test_preflight_applies_path_shape_and_zone_rules() -> None:
    """Preflight alone refuses an invalid path or a zone breach at the right index."""
    assert refused(std(), [create("wiki/n.md"), create("wiki/../x.md")]) == ("INVALID_PATH", 1)
    assert refused(std(), [create("wiki/n.md"), delete("index.md", v(b"# Index\n"))]) == ("PROTECTED_PATH", 1)
    assert refused(std(), [overwrite("raw/r.md", "x")]) == ("ZONE_FORBIDDEN", 0)
