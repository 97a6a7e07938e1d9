"""Property tests of the refactor-grade ops through preflight, each against an independent reference.

- rename (file or folder) with rewrite_links over generated wikis: links of every form, in and out of
  code, relative markdown links from nested folders, ambiguous bare names — checked with the reference
  scanner and resolver of ``markdown/test_rewrite_properties`` (regexes over code-masked text, the
  resolution rule re-stated), on every page of the result, raw/ pages included;
- section ops addressed by heading path, chained in one batch with section versions computed by a
  reference heading scanner on the text as the batch left it;
- front matter merged by the frontmatter op after another edit of the page: untouched lines byte for
  byte (the reference block of ``markdown/test_frontmatter_properties``);
- replace_across with RE2 patterns against Python's ``re`` on patterns where both agree, with
  expected_count right, wrong or absent;
- all or nothing: any accepted batch followed by a failing edit is refused at that edit.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Any

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.unit.engine.markdown.test_frontmatter_properties import KEYS, existing_blocks, json_values
from tests.unit.engine.markdown.test_rewrite_properties import (
    code_and_links,
    masked_links,
    moves_of,
    ref_resolve,
    wikis,
)
from tests.unit.engine.markdown.test_sections_properties import pages, reference_headings
from worker.engine import DictHead, Plan, preflight
from worker.engine.markdown import read_frontmatter
from worker.engine.paths import ALL_OPS, Zone, ZonePolicy
from worker.errors import BatchRejected
from worker.schema.edits import Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
# The generated wikis put pages at the root, under wiki/ and raw/, and move them to archive/ too.
ROOT_NAMES = ["x.md", "y.md", "Note.md", "my note.md", "pic.png", "renamed.md"]
POLICY = ZonePolicy(
    zones=(
        Zone(pattern="wiki/", ops=ALL_OPS),
        Zone(pattern="archive/", ops=ALL_OPS),
        Zone(pattern="raw/", ops=frozenset({"create"})),
        *(Zone(pattern=name, ops=ALL_OPS) for name in ROOT_NAMES),
    )
)


def git_version(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def edit(**raw: Any) -> Edit:
    return EDIT.validate_python(raw)


def outcome(head: dict[str, bytes], plan: Plan) -> dict[str, bytes]:
    files = dict(head)
    for path, new in plan.changes.items():
        if new is None:
            files.pop(path, None)
        else:
            files[path] = new.data if new.data is not None else head[new.source or ""]
    return files


# -- rename with rewrite_links ---------------------------------------------------------------------------


@st.composite
def folder_moves(draw: st.DrawFn, files: set[str]) -> dict[str, str]:
    """A folder rename below wiki/ (more of them than ``moves_of`` draws), landing on no file."""
    folders = sorted({f.rsplit("/", 1)[0] for f in files if f.startswith("wiki/") and f.count("/") > 1})
    if not folders:
        return {}
    old = draw(st.sampled_from(folders))
    new = draw(
        st.sampled_from([f for f in ("wiki/d", "wiki/b", "archive", "archive/s", "wiki/a/e") if f != old])
    )
    moves = {f: new + f[len(old) :] for f in files if f.startswith(old + "/")}
    if (files - moves.keys()) & set(moves.values()):
        return {}
    return moves


def may_move(path: str) -> bool:
    """The reference zone rule of ``POLICY`` for renames: wiki/, archive/ and the listed root names."""
    return path.startswith(("wiki/", "archive/")) or path in ROOT_NAMES


def as_rename(files: set[str], moves: dict[str, str]) -> Edit | None:
    """The rename edit that makes ``moves``: a file rename, or a folder rename (then every file of the
    folder moves with the same prefix change), or None when ``moves`` is neither."""
    if len(moves) == 1:
        old, new = next(iter(moves.items()))
        if old in files:
            return edit(op="rename", path=old, new_path=new, rewrite_links=True)
    if any("/" not in old for old in moves):
        return None
    folder = posixpath.commonpath([old.rsplit("/", 1)[0] for old in moves])
    new_folder = {new[: len(new) - len(old) + len(folder)] for old, new in moves.items()}
    if len(new_folder) != 1:
        return None
    return edit(op="rename", path=folder, new_path=new_folder.pop(), rewrite_links=True)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_rename_rewrites_every_link_to_its_files_new_place(data: st.DataObject) -> None:
    """After a rename with rewrite_links every link outside code resolves where it did (its file's new
    place), in every page but raw/ ones; code and all other text stay byte for byte; raw/ pages are
    untouched and reported NOT_REWRITTEN exactly when a link there no longer resolves to its file; a
    rename from or into a zone without renames (raw/, a bare folder name) is ZONE_FORBIDDEN."""
    files, texts = data.draw(wikis())
    moves = data.draw(st.one_of(moves_of(files), folder_moves(files)))
    assume(moves)
    rename = as_rename(files, moves)
    assume(rename is not None)
    assert rename is not None
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    if rename.path in head:
        rename = rename.model_copy(update={"expected_version": git_version(head[rename.path])})
    touched = {rename.path, rename.new_path, *moves, *moves.values()}
    try:
        plan = preflight(DictHead(head), [rename], POLICY)
    except BatchRejected as refused:
        assert refused.code == "ZONE_FORBIDDEN", refused
        assert not all(may_move(p) for p in touched)
        event("refused")
        return
    event("folder" if rename.path not in head else "file")
    assert all(may_move(p) for p in touched)
    after = outcome(head, plan)
    after_files = set(after)
    assert after_files == {moves.get(f, f) for f in files}
    warned = {w.path for w in plan.warnings if w.code == "NOT_REWRITTEN"}
    rewritten = {a.path: a.count for a in plan.applied if a.op == "rewrite_links"}
    for page, text in texts.items():
        new_page = moves.get(page, page)
        new_text = after[new_page].decode()
        code_before, links_before = code_and_links(text)
        code_after, links_after = code_and_links(new_text)
        assert code_after == code_before
        assert masked_links(new_text, links_after) == masked_links(text, links_before)
        stale = [
            link
            for link in links_before
            if (was := ref_resolve(link, page, files)) is not None
            and ref_resolve(link, new_page, after_files) != moves.get(was, was)
        ]
        if page.startswith("raw/"):
            event(f"raw page, stale links: {bool(stale)}")
            assert new_text == text
            assert (page in warned) == bool(stale), (page, stale)
            continue
        changed = 0
        for old, new in zip(links_before, links_after, strict=True):
            was = ref_resolve(old, page, files)
            if was is not None:
                assert ref_resolve(new, new_page, after_files) == moves.get(was, was), (page, old, new)
            changed += text[old.start : old.end] != new_text[new.start : new.end]
        assert rewritten.get(new_page, 0) == changed
        event(f"page rewritten: {changed > 0}")


# -- section ops ---------------------------------------------------------------------------------------


def reference_sections(text: str) -> list[tuple[tuple[str, ...], int, int, int]]:
    """(path of heading texts, level, first line, end line) of every section of a generated page."""
    heads = reference_headings(text)
    total = len(text.splitlines())
    found = []
    stack: list[tuple[int, str]] = []
    for number, (line, level, name) in enumerate(heads):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name))
        end = next((later for later, lvl, _ in heads[number + 1 :] if lvl <= level), total)
        found.append((tuple(name for _, name in stack), level, line, end))
    return found


def unique_address(text: str, draw: st.DrawFn) -> tuple[str, int, int, int, str] | None:
    """A section found by its full heading path alone: (address, level, start, end, version)."""
    sections = reference_sections(text)
    usable = [s for s in sections if sum(other[0][-len(s[0]) :] == s[0] for other in sections) == 1]
    if not usable:
        return None
    path, level, start, end = draw(st.sampled_from(usable))
    lines = text.splitlines(keepends=True)
    return " > ".join(path), level, start, end, git_version("".join(lines[start:end]).encode())


@settings(max_examples=200, deadline=None)
@given(pages(), st.data())
def test_chained_section_ops_by_heading_path(text: str, data: st.DataObject) -> None:
    """rename_section then remove_section on one page in one batch, each addressed by its heading path
    and guarded by its section version as the batch left the page, give the reference's splice; a
    section version from before the first edit still passes unless the first edit changed that
    section."""
    first = unique_address(text, data.draw)
    assume(first is not None)
    assert first is not None
    address, level, start, _, version = first
    lines = text.splitlines(keepends=True)
    ending = lines[start][len(lines[start].rstrip("\r\n")) :]
    renamed_lines = [*lines[:start], "#" * level + " Renamed" + ending, *lines[start + 1 :]]
    middle = "".join(renamed_lines)
    second = unique_address(middle, data.draw)
    assume(second is not None)
    assert second is not None
    address2, _, start2, end2, version2 = second
    expected = "".join(renamed_lines[:start2] + renamed_lines[end2:])
    head = {"wiki/p.md": text.encode()}
    rename = edit(
        op="rename_section",
        path="wiki/p.md",
        heading=address,
        new_heading="Renamed",
        expected_section_version=version,
    )
    remove = edit(op="remove_section", path="wiki/p.md", heading=address2, expected_section_version=version2)
    plan = preflight(DictHead(head), [rename, remove])
    assert outcome(head, plan)["wiki/p.md"].decode() == expected
    # the same section's version read before the batch: valid exactly when the rename left it alone
    old_sections = {" > ".join(p): (s, e) for p, _, s, e in reference_sections(text)}
    span = old_sections.get(address2)
    if span is None:
        return
    old_version = git_version("".join(lines[span[0] : span[1]]).encode())
    stale = remove.model_copy(update={"expected_section_version": old_version})
    if old_version == version2:
        assert outcome(head, preflight(DictHead(head), [rename, stale]))["wiki/p.md"].decode() == expected
    else:
        try:
            preflight(DictHead(head), [rename, stale])
        except BatchRejected as refused:
            assert (refused.code, refused.index) == ("VERSION_MISMATCH", 1)
        else:
            raise AssertionError("a stale section version passed")


# -- front matter --------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    existing_blocks(),
    st.dictionaries(st.sampled_from([*KEYS, "new"]), json_values, min_size=1, max_size=3),
    st.sampled_from(["\n", "\r\n"]),
)
def test_frontmatter_after_another_edit_keeps_untouched_lines(
    block: tuple[list[tuple[str, str]], dict[str, Any]], updates: dict[str, Any], newline: str
) -> None:
    """An append then a frontmatter edit of one page (no versions): the body keeps its bytes plus the
    appended line, every untouched entry keeps its lines in order, and the block reads back as the
    merge."""
    entries, data = block
    yaml = "# header\n" + "".join(lines + "\n" for _, lines in entries)
    body = "# Page\n\nSome text.\n"
    text = ("---\n" + yaml + "---\n" + body).replace("\n", newline)
    head = {"wiki/p.md": text.encode()}
    plan = preflight(
        DictHead(head),
        [
            edit(op="append", path="wiki/p.md", content="More." + newline),
            edit(op="frontmatter", path="wiki/p.md", set=updates),
        ],
    )
    result = outcome(head, plan)["wiki/p.md"].decode()
    assert result.endswith(("---\n" + body + "More.\n").replace("\n", newline))
    found = read_frontmatter(result)
    assert json.dumps(found) == json.dumps({**data, **updates})
    position = 0
    for key, lines in entries:
        if key in updates and json.dumps(updates[key]) != json.dumps(data[key]):
            continue
        written = (lines + "\n").replace("\n", newline)
        position = result.find(written, position) + len(written)
        assert position >= len(written), (key, written, result)


# -- replace_across ------------------------------------------------------------------------------------

PATTERNS = [
    (r"ab", r"X"),
    (r"a+b?", r"<\g<0>>"),
    (r"(a|bc)(d)?", r"\2\1"),
    (r"[b-d]+", r"_"),
    (r"(?i)AB", r"ba"),
    (r"b\b", r"B"),
    (r"^a", r"Z"),
    (r"(?m)c$", r"C"),
]
TEXTS = st.text(alphabet="abcd \n", max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["wiki/a.md", "wiki/b/c.md", "wiki/b/d.md", "index.md", "raw/r.md"]), TEXTS
    ),
    st.sampled_from(PATTERNS),
    st.sampled_from(["wiki/", "wiki/b/", ""]),
    st.sampled_from(["right", "off", "none"]),
)
def test_replace_across_agrees_with_python_re(
    pages: dict[str, str], case: tuple[str, str], prefix: str, guard: str
) -> None:
    """Every page under the prefix (raw/ never) is replaced as Python's re.subn replaces it; the total
    count is checked against expected_count; no match at all is OLD_NOT_FOUND."""
    pattern, new = case
    head = {path: text.encode() for path, text in pages.items()}
    expected: dict[str, str] = {}
    total = 0
    for path, text in pages.items():
        if path.startswith(prefix) and not path.startswith("raw/"):
            replaced, count = re.subn(pattern, new, text)
            total += count
            if count:
                expected[path] = replaced
    fields: dict[str, Any] = {"op": "replace_across", "prefix": prefix, "pattern": pattern, "new": new}
    if guard != "none":
        fields["expected_count"] = max(1, total + (guard == "off"))
    try:
        plan = preflight(DictHead(head), [EDIT.validate_python(fields)])
    except BatchRejected as refused:
        wanted = "OLD_NOT_FOUND" if total == 0 else "COUNT_MISMATCH"
        assert refused.code == wanted, (refused, total)
        assert total == 0 or guard == "off"
        return
    assert total and guard != "off"
    assert {p: d.decode() for p, d in outcome(head, plan).items() if p in plan.changes} == expected
    assert sum(a.count or 0 for a in plan.applied) == total


# -- all or nothing ------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_batch_with_a_failing_last_edit_is_refused_there(data: st.DataObject) -> None:
    """A rename with rewrite_links (accepted alone) followed by an edit that must fail is refused at
    that edit: nothing of the rename survives, and the head is untouched."""
    files, texts = data.draw(wikis())
    moves = data.draw(moves_of(files))
    rename = as_rename(files, moves) if moves else None
    assume(rename is not None and rename.path.startswith("wiki/") and rename.new_path.startswith("wiki/"))
    assert rename is not None
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    if rename.path in head:
        rename = rename.model_copy(update={"expected_version": git_version(head[rename.path])})
    snapshot = dict(head)
    failing = edit(op="append", path="wiki/never-there.md", content="x")
    try:
        preflight(DictHead(head), [rename, failing], POLICY)
    except BatchRejected as refused:
        assert (refused.code, refused.index) == ("NOT_FOUND", 1)
    else:
        raise AssertionError("a batch with a failing edit was accepted")
    assert head == snapshot
