"""Contract rule 5 (path shapes) and the zone policy of section 2, checked through ``worker.paths``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from worker.engine import DictHead, blob_id, check_static, preflight
from worker.engine.paths import (
    DEFAULT_POLICY,
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    ZonePolicy,
    check_path,
    checked_path_problem,
    path_problem,
)
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Create, Delete, Edit, Overwrite, Rename, Replace


def _long_path(total: int) -> str:
    """A valid-looking path under wiki/ of exactly ``total`` bytes, every segment under 255 bytes."""
    segments = ["wiki"]
    length = len("wiki")
    while length < total:
        room = total - length - 1
        segment = "s" * min(200, room) if room > 0 else ""
        if not segment:
            break
        segments.append(segment)
        length += 1 + len(segment)
    path = "/".join(segments)
    assert len(path.encode()) == total
    return path


REFUSED = {
    "empty": "",
    "absolute": "/etc/passwd",
    "absolute wiki": "/wiki/a.md",
    "dot segment": "wiki/./a.md",
    "leading dot": "./wiki/a.md",
    "dotdot segment": "wiki/../../x",
    "leading dotdot": "../x",
    "dotdot only": "..",
    "dot only": ".",
    "trailing dotdot": "wiki/..",
    "backslash": "wiki\\x.md",
    "backslash traversal": "wiki\\..\\x.md",
    "nul": "wiki/a\x00.md",
    "newline": "wiki/a\n.md",
    "tab": "wiki/a\t.md",
    "escape": "wiki/\x1b[31m.md",
    "delete char": "wiki/a\x7f.md",
    "c1 control": "wiki/a\x85.md",
    "trailing slash": "wiki/a/",
    "trailing slash top": "wiki/",
    "double slash": "wiki//a.md",
    "dot git root": ".git/hooks/post-commit",
    "dot git config": ".git/config",
    "dot git upper nested": "wiki/.GIT/config",
    "dot git mixed case": "wiki/.Git/x.md",
    "dot git as file": "wiki/.git",
    "dot git trailing dot": "wiki/.git./config",
    "dot git trailing space": "wiki/.git /config",
    "dot git short name": "wiki/GIT~1/config",
    "dot git stream": "wiki/team-a/.git:x",
    "dot git index allocation": ".git::$INDEX_ALLOCATION/config",
    "dot git short name stream": "wiki/GIT~1:abc",
    "dot git dot space stream": "wiki/.git .:x",
    "dot git hfs zwnj": ".g\u200cit/config",
    "dot git hfs bom": ".git\ufeff/config",
    "gitmodules": "wiki/.gitmodules",
    "gitmodules short name": "wiki/GITMOD~1/a.md",
    "gitattributes": "wiki/a/.gitattributes",
    "gitattributes trailing dot": "wiki/.gitattributes.",
    "over 4096 bytes": _long_path(MAX_PATH_BYTES + 1),
    "5000 bytes": _long_path(5000),
    "segment over 255": "wiki/" + "x" * (MAX_SEGMENT_BYTES + 1) + ".md",
    "multibyte segment over 255": "wiki/" + "é" * 128,
    "lone surrogate": "wiki/\ud800.md",
}

ACCEPTED = {
    "plain": "wiki/a.md",
    "nested": "wiki/redis/persistence.md",
    "unicode": "wiki/Straße/日本語.md",
    "emoji": "wiki/🦀 crab.md",
    "spaces": "wiki/a page with spaces.md",
    "dot file": "wiki/.hidden",
    "dots inside": "wiki/a..b.md",
    "gitignore-like": "wiki/.gitignore",
    "gitkeep": "wiki/.gitkeep",
    "github folder": "wiki/.github/x.md",
    "git page": "wiki/git.md",
    "colon": "wiki/foo: bar.md",
    "dot git then more": "wiki/.git x.md",
    "other short name": "wiki/git~2/x.md",
    "git word": "wiki/git/x.md",
    "segment of 255": "wiki/" + "x" * MAX_SEGMENT_BYTES,
    "exactly 4096 bytes": _long_path(MAX_PATH_BYTES),
    "root file": "index.md",
}


@pytest.mark.parametrize("path", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_path_shapes_are_invalid_path(path: str) -> None:
    """Every refused path shape of rule 5 raises INVALID_PATH carrying the edit's index."""
    assert path_problem(path) is not None
    with pytest.raises(BatchRejected) as info:
        check_path(path, 7)
    assert info.value.code == "INVALID_PATH"
    assert info.value.index == 7


@pytest.mark.parametrize("path", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_path_shapes_are_refused_by_check_static(path: str) -> None:
    """A batch naming a refused path is refused with INVALID_PATH at that edit, before any zone check."""
    batch = Batch(
        message="m",
        edits=[
            Create(op="create", path="wiki/ok.md", content="x"),
            Create(op="create", path=path, content="x"),
        ],
    )
    with pytest.raises(BatchRejected) as info:
        check_static(batch)
    assert (info.value.code, info.value.index) == ("INVALID_PATH", 1)


@pytest.mark.parametrize("path", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_path_as_rename_target_is_invalid_path(path: str) -> None:
    """A refused shape as a rename's new_path is INVALID_PATH too, also when preflight runs alone."""
    head = DictHead({"wiki/a.md": b"a"})
    edit = Rename(op="rename", path="wiki/a.md", new_path=path, expected_version=blob_id(b"a"))
    with pytest.raises(BatchRejected) as info:
        preflight(head, [edit])
    assert (info.value.code, info.value.index) == ("INVALID_PATH", 0)


@pytest.mark.parametrize("path", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_accepted_path_shapes_pass(path: str) -> None:
    """Unicode names, spaces, dot files and paths at the exact byte limits are accepted shapes."""
    assert path_problem(path) is None
    check_path(path, 0)


def test_limits_are_the_contract_values() -> None:
    """The path limits are 4096 bytes a path and 255 bytes a segment, counted in UTF-8 bytes."""
    assert (MAX_PATH_BYTES, MAX_SEGMENT_BYTES) == (4096, 255)
    assert path_problem("wiki/" + "é" * 127) is None  # 254 bytes
    assert path_problem("wiki/" + "é" * 128) is not None  # 256 bytes


# -- zones ---------------------------------------------------------------------------------------------


def _edit(op: str, path: str, new_path: str = "wiki/target.md") -> Edit:
    if op == "create":
        return Create(op="create", path=path, content="x")
    if op == "overwrite":
        return Overwrite(op="overwrite", path=path, content="x")
    if op == "replace":
        return Replace(op="replace", path=path, old="x", new="y")
    if op == "delete":
        return Delete(op="delete", path=path)
    return Rename(op="rename", path=path, new_path=new_path)


def _static_code(edit: Edit, policy: ZonePolicy = DEFAULT_POLICY) -> str | None:
    try:
        check_static(Batch(message="m", edits=[edit]), policy)
    except BatchRejected as err:
        assert err.index == 0
        return err.code
    return None


ALL_OPS = ["create", "overwrite", "replace", "delete", "rename"]


@pytest.mark.parametrize("op", ALL_OPS)
def test_wiki_zone_allows_every_op(op: str) -> None:
    """Every op is allowed under wiki/, at any depth."""
    assert _static_code(_edit(op, "wiki/a.md")) is None
    assert _static_code(_edit(op, "wiki/deep/er/a.md")) is None
    DEFAULT_POLICY.check(op, "wiki/x/y.md", 0)  # type: ignore[arg-type]


def test_raw_zone_allows_create() -> None:
    """A create under raw/ is allowed."""
    assert _static_code(_edit("create", "raw/source.pdf")) is None


@pytest.mark.parametrize("op", ["overwrite", "replace", "delete", "rename"])
def test_raw_zone_refuses_everything_but_create(op: str) -> None:
    """Overwrite, replace, delete and rename of a raw/ path are ZONE_FORBIDDEN."""
    assert _static_code(_edit(op, "raw/source.md")) == "ZONE_FORBIDDEN"


def test_rename_into_raw_is_zone_forbidden() -> None:
    """Renaming a wiki/ page into raw/ is ZONE_FORBIDDEN (raw is create-only)."""
    assert _static_code(_edit("rename", "wiki/a.md", new_path="raw/a.md")) == "ZONE_FORBIDDEN"


@pytest.mark.parametrize("root", ["index.md", "log.md", "schema.md"])
@pytest.mark.parametrize("op", ["create", "overwrite", "replace"])
def test_root_files_may_be_written(root: str, op: str) -> None:
    """index.md, log.md and schema.md may be created, overwritten and replaced."""
    assert _static_code(_edit(op, root)) is None


@pytest.mark.parametrize("root", ["index.md", "log.md", "schema.md"])
@pytest.mark.parametrize("op", ["delete", "rename"])
def test_root_files_are_never_deleted_or_renamed(root: str, op: str) -> None:
    """Deleting or renaming index.md, log.md or schema.md is PROTECTED_PATH."""
    assert _static_code(_edit(op, root)) == "PROTECTED_PATH"


@pytest.mark.parametrize("root", ["index.md", "log.md", "schema.md"])
def test_root_files_are_protected_as_rename_target(root: str) -> None:
    """Renaming a wiki/ page onto index.md, log.md or schema.md is PROTECTED_PATH."""
    assert _static_code(_edit("rename", "wiki/a.md", new_path=root)) == "PROTECTED_PATH"


@pytest.mark.parametrize(
    "path", ["notes.md", "wiki2/x.md", "raw.md", "wiki", "Wiki/a.md", "README", "index.md/x.md", "docs/a.md"]
)
@pytest.mark.parametrize("op", ALL_OPS)
def test_paths_outside_every_zone_are_zone_forbidden(path: str, op: str) -> None:
    """Any op on a path outside wiki/, raw/ and the three root files is ZONE_FORBIDDEN."""
    assert _static_code(_edit(op, path)) == "ZONE_FORBIDDEN"


def test_rename_to_outside_zone_is_zone_forbidden() -> None:
    """Renaming a wiki/ page to a path outside the zones is ZONE_FORBIDDEN."""
    assert _static_code(_edit("rename", "wiki/a.md", new_path="notes.md")) == "ZONE_FORBIDDEN"


def test_zone_refusal_in_preflight_names_the_edit() -> None:
    """Preflight alone also applies zones, naming the failing edit's index."""
    head = DictHead({"raw/r.md": b"r"})
    edits: list[Edit] = [
        Create(op="create", path="wiki/n.md", content="n"),
        Delete(op="delete", path="raw/r.md"),
    ]
    with pytest.raises(BatchRejected) as info:
        preflight(head, edits)
    assert (info.value.code, info.value.index) == ("ZONE_FORBIDDEN", 1)


CUSTOM = {
    "zones": [
        {"pattern": "docs/", "ops": ["create", "overwrite", "replace", "delete", "rename"]},
        {"pattern": "README.md", "ops": ["overwrite"], "refusal": "PROTECTED_PATH"},
        {"pattern": "raw/", "ops": ["create", "delete"]},
    ]
}


def test_custom_policy_from_data_overrides_default() -> None:
    """A ZonePolicy loaded from a dict replaces the default zones entirely."""
    policy = ZonePolicy.model_validate(CUSTOM)
    assert _static_code(_edit("create", "docs/a.md"), policy) is None
    assert _static_code(_edit("rename", "docs/a.md", new_path="docs/b.md"), policy) is None
    assert _static_code(_edit("delete", "raw/a.md"), policy) is None
    assert _static_code(_edit("overwrite", "README.md"), policy) is None
    assert _static_code(_edit("delete", "README.md"), policy) == "PROTECTED_PATH"
    assert _static_code(_edit("overwrite", "raw/a.md"), policy) == "ZONE_FORBIDDEN"
    assert _static_code(_edit("create", "wiki/a.md"), policy) == "ZONE_FORBIDDEN"
    assert _static_code(_edit("create", "index.md"), policy) == "ZONE_FORBIDDEN"
    # The default is unchanged by loading another policy.
    assert _static_code(_edit("create", "wiki/a.md")) is None


def test_custom_policy_applies_in_preflight() -> None:
    """Preflight honours the policy it is given rather than the default."""
    policy = ZonePolicy.model_validate(CUSTOM)
    plan = preflight(DictHead({}), [_edit("create", "docs/a.md")], policy)
    assert list(plan.changes) == ["docs/a.md"]
    with pytest.raises(BatchRejected) as info:
        preflight(DictHead({}), [_edit("create", "wiki/a.md")], policy)
    assert info.value.code == "ZONE_FORBIDDEN"


def test_custom_policy_refuses_unknown_fields_and_ops() -> None:
    """A policy document with an unknown field or an unknown op name does not load."""
    with pytest.raises(ValidationError):
        ZonePolicy.model_validate({"zones": [{"pattern": "docs/", "ops": ["create"], "extra": 1}]})
    with pytest.raises(ValidationError):
        ZonePolicy.model_validate({"zones": [{"pattern": "docs/", "ops": ["chmod"]}]})


# Paths near the plain shape: its characters, every character with a rule of its own, long segments.
_NEAR_PLAIN = st.lists(
    st.one_of(
        st.sampled_from(["a", "Z", "0", "_", "-", ".", "/", "~", " ", "\\", "\x00", "\u200c", "é"]),
        st.sampled_from([".git", "git~1", ".gitmodules", "..", "s" * 255, "s" * 256]),
    ),
    max_size=12,
).map("".join)


@given(_NEAR_PLAIN)
def test_the_plain_path_shortcut_agrees_with_every_rule(path: str) -> None:
    """``path_problem`` (which passes plain paths at once) answers what the rule-by-rule check answers."""
    assert (path_problem(path) is None) == (checked_path_problem(path) is None)
