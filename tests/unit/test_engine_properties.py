"""Property tests: preflight agrees with a tiny independent replayer, in memory and on a real git repo.

The reference below re-states contract 3.1 (with rule 2 as amended: the head version or any version an
earlier edit gave the path) and, of section 7, ``append`` and folder renames, for a small path alphabet:
it applies edits one by one to a plain dict and says which edit fails and with which codes (any of them is
acceptable when an edit breaks several rules at once). It shares no code with ``worker.engine``; versions
come from ``hashlib`` directly.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gitutil import blob_id as git_blob_id
from tests.gitutil import git as _git
from tests.gitutil import tree_files
from worker.engine import DictHead, preflight
from worker.errors import BatchRejected
from worker.git import GitStore, Identity
from worker.schema.edits import Append, Create, Delete, Edit, Overwrite, Rename, Replace

HEAD_PATHS = [
    "wiki/a.md",
    "wiki/b.md",
    "wiki/d",
    "wiki/d/c.md",
    "wiki/a.md/x.md",
    "raw/r.md",
    "index.md",
    "notes.md",
]
EDIT_PATHS = [*HEAD_PATHS, "wiki/e.md"]
BAD_PATH = "wiki/../x.md"  # the one refused shape in the alphabet
FOLDERS = [
    "wiki/d",
    "wiki/d",
    "wiki",
    "wiki/a.md",
    "raw",
]  # folder renames (wiki/a.md is a folder in some heads)
FOLDER_TARGETS = ["wiki/f", "wiki/d/g", "wiki/d", "wiki/b.md", "raw/f", "other"]
CONTENTS = [b"", b"a", b"aa", b"ab\n", b"b\r\n", b"\xffa"]
TEXTS = ["", "a", "aa", "ab\n", "b\r\n", "ba"]
OLDS = ["a", "b", "\n", "ab", ""]
NEWS = ["", "a", "x", "bb"]
WRONG = hashlib.sha1(b"not a version").hexdigest()


# -- the reference -------------------------------------------------------------------------------------


@dataclass
class Refused:
    index: int | None  # None: the result has a file/folder conflict (no single edit to blame)
    codes: set[str]


@dataclass
class Accepted:
    files: dict[str, bytes]
    applied: list[dict[str, object]]


def _zone_codes(op: str, path: str) -> set[str]:
    op = "replace" if op == "append" else op
    if path.startswith("wiki/"):
        return set()
    if path.startswith("raw/"):
        return set() if op == "create" else {"ZONE_FORBIDDEN"}
    if path in ("index.md", "log.md", "schema.md"):
        return set() if op in ("create", "overwrite", "replace") else {"PROTECTED_PATH"}
    return {"ZONE_FORBIDDEN"}


def _bad_shape(path: str) -> bool:
    return not path or path.startswith("/") or any(s in ("", ".", "..") for s in path.split("/"))


def _content(edit: Create | Overwrite) -> bytes:
    return base64.b64decode(edit.content) if edit.encoding == "base64" else edit.content.encode()


def _line_break(data: bytes) -> bytes:
    """The line break an append puts first: the one the text last used (a CR without LF only when the
    text has no LF at all), else LF."""
    lf = data.rfind(b"\n")
    if lf >= 0:
        return b"\r\n" if data[:lf].endswith(b"\r") else b"\n"
    return b"\r" if b"\r" in data else b"\n"


def replay(head: dict[str, bytes], edits: list[Edit]) -> Accepted | Refused:
    """Apply ``edits`` one by one to a copy of ``head`` as contract 3.1 (and 7) describes."""
    files = dict(head)
    created: set[str] = set()
    seen: dict[str, set[str]] = {}  # every version an edit of the batch gave a path
    applied: list[dict[str, object]] = []

    def record(path: str) -> None:
        seen.setdefault(path, set()).add(git_blob_id(files[path]))

    for i, edit in enumerate(edits):
        codes: set[str] = set()
        targets = [edit.path, edit.new_path] if isinstance(edit, Rename) else [edit.path]
        if any(_bad_shape(p) for p in targets):
            codes.add("INVALID_PATH")
        codes |= _zone_codes(edit.op, edit.path)
        if isinstance(edit, Rename):
            codes |= _zone_codes("rename", edit.new_path)
        if isinstance(edit, Replace) and edit.old == "":
            codes.add("INVALID_BATCH")
        if codes:
            return Refused(i, codes)
        path = edit.path
        if isinstance(edit, Create):
            if path in files:
                return Refused(i, {"PATH_EXISTS"})
            files[path] = _content(edit)
            created.add(path)
            record(path)
            applied.append({"index": i, "op": "create", "path": path, "version": git_blob_id(files[path])})
            continue
        if isinstance(edit, Rename) and path not in files:
            under = sorted(p for p in files if p.startswith(path + "/"))
            if not under:
                return Refused(i, {"NOT_FOUND"})
            moves = {p: edit.new_path + p[len(path) :] for p in under}
            if edit.expected_version is not None:
                codes.add("INVALID_BATCH")
            if edit.new_path == path or any(n in files and n not in moves for n in moves.values()):
                codes.add("PATH_EXISTS")
            if any(_bad_shape(n) for n in moves.values()):
                codes.add("INVALID_PATH")
            if codes:
                return Refused(i, codes)
            moved = {n: files.pop(o) for o, n in moves.items()}
            files.update(moved)
            for old, new in moves.items():
                created.add(new)
                record(new)
                version = git_blob_id(files[new])
                applied.append({"index": i, "op": "rename", "path": old, "new_path": new, "version": version})
            continue
        if path not in files:
            return Refused(i, {"NOT_FOUND"})
        required = not isinstance(edit, Append)
        if path not in created:
            if edit.expected_version is None:
                if required:
                    codes.add("VERSION_REQUIRED")
            elif edit.expected_version != git_blob_id(head[path]) and edit.expected_version not in seen.get(
                path, ()
            ):
                codes.add("VERSION_MISMATCH")
        if isinstance(edit, Overwrite):
            new = _content(edit)
        elif isinstance(edit, Append):
            data = files[path]
            first = _line_break(data) if data and not data.endswith((b"\n", b"\r")) else b""
            new = data + first + edit.content.encode()
        elif isinstance(edit, Replace):
            count = files[path].count(edit.old.encode())
            if count == 0:
                codes.add("OLD_NOT_FOUND")
            if count and edit.expected_count is not None and count != edit.expected_count:
                codes.add("COUNT_MISMATCH")
            if count > 1 and not edit.replace_all:
                codes.add("OLD_NOT_UNIQUE")
            new = files[path].replace(edit.old.encode(), edit.new.encode(), -1 if edit.replace_all else 1)
        elif isinstance(edit, Rename) and edit.new_path in files:
            codes.add("PATH_EXISTS")
        if codes:
            return Refused(i, codes)
        if isinstance(edit, Overwrite | Replace | Append):
            files[path] = new
            record(path)
            applied.append({"index": i, "op": edit.op, "path": path, "version": git_blob_id(new)})
        elif isinstance(edit, Delete):
            del files[path]
            applied.append({"index": i, "op": "delete", "path": path, "version": None})
        elif isinstance(edit, Rename):
            files[edit.new_path] = files.pop(path)
            created.add(edit.new_path)
            record(edit.new_path)
            version = git_blob_id(files[edit.new_path])
            applied.append(
                {"index": i, "op": "rename", "path": path, "new_path": edit.new_path, "version": version}
            )
    for path in files:
        parts = path.split("/")
        if any("/".join(parts[:n]) in files for n in range(1, len(parts))):
            return Refused(None, {"PATH_CONFLICT"})
    return Accepted(files, applied)


# -- strategies ----------------------------------------------------------------------------------------


def _consistent(files: dict[str, bytes]) -> dict[str, bytes]:
    """Drop files that sit under another file, so the head is a possible git tree."""
    return {
        p: v
        for p, v in files.items()
        if not any("/".join(p.split("/")[:n]) in files for n in range(1, p.count("/") + 1))
    }


heads = st.dictionaries(st.sampled_from(HEAD_PATHS), st.sampled_from(CONTENTS), max_size=6).map(_consistent)


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, bytes], list[Edit]]:
    """A head and a batch; most edits are aimed at what plausibly exists so that many batches pass."""
    head = draw(heads)
    alive = dict(head)  # the files if every edit so far succeeded (only steers the drawing)

    def pick(existing: bool) -> str:
        if draw(st.integers(0, 5)) > 0:
            pool = sorted(p for p in EDIT_PATHS if (p in alive) == existing and p.startswith("wiki/"))
            if pool:
                return draw(st.sampled_from(pool))
        return draw(st.sampled_from([*EDIT_PATHS, BAD_PATH]))

    def version(path: str) -> str | None:
        choice = draw(st.sampled_from(["head", "head", "head", "chained", "chained", "none", "wrong"]))
        if choice == "none":
            return None
        if choice == "wrong":
            return WRONG
        if choice == "chained" and path in alive:  # what an earlier edit of the batch left there
            return git_blob_id(alive[path])
        return git_blob_id(head[path]) if path in head else None

    def content() -> tuple[str, Literal["utf-8", "base64"], bytes]:
        if draw(st.booleans()):
            text = draw(st.sampled_from(TEXTS))
            return text, "utf-8", text.encode()
        data = draw(st.sampled_from(CONTENTS))
        return base64.b64encode(data).decode(), "base64", data

    def old(path: str) -> str:
        present = sorted({chr(b) for b in alive.get(path, b"") if b < 0x80})
        use_present: bool = draw(st.booleans())
        if present and use_present:
            return draw(st.sampled_from(present))
        return draw(st.sampled_from(OLDS))

    edits: list[Edit] = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                [
                    "create",
                    "create",
                    "overwrite",
                    "replace",
                    "replace",
                    "delete",
                    "rename",
                    "append",
                    "folder",
                ]
            )
        )
        edit: Edit
        if op == "create":
            path = pick(existing=False)
            text, encoding, data = content()
            edit = Create(op="create", path=path, content=text, encoding=encoding)
            alive[path] = data
        elif op == "overwrite":
            path = pick(existing=True)
            text, encoding, data = content()
            edit = Overwrite(
                op="overwrite", path=path, content=text, encoding=encoding, expected_version=version(path)
            )
            alive[path] = data
        elif op == "replace":
            path = pick(existing=True)
            fields = {
                "op": "replace",
                "path": path,
                "old": old(path),
                "new": draw(st.sampled_from(NEWS)),
                "expected_version": version(path),
                "replace_all": draw(st.booleans()),
                "expected_count": draw(st.sampled_from([None, None, 1, 2])),
            }
            edit = Replace(**fields)
        elif op == "append":
            path = pick(existing=True)
            text = draw(st.sampled_from([t for t in TEXTS if t]))
            maybe = draw(st.sampled_from([None, None, "version"]))
            edit = Append(
                op="append", path=path, content=text, expected_version=version(path) if maybe else None
            )
        elif op == "folder":
            path = draw(st.sampled_from(FOLDERS))
            new_path = draw(st.sampled_from(FOLDER_TARGETS))
            versioned = draw(st.integers(0, 5)) == 0
            edit = Rename(
                op="rename", path=path, new_path=new_path, expected_version=WRONG if versioned else None
            )
            for p in [p for p in alive if p.startswith(path + "/")]:
                alive[new_path + p[len(path) :]] = alive.pop(p)
        elif op == "delete":
            path = pick(existing=True)
            edit = Delete(op="delete", path=path, expected_version=version(path))
            alive.pop(path, None)
        else:
            path, new_path = pick(existing=True), pick(existing=False)
            edit = Rename(op="rename", path=path, new_path=new_path, expected_version=version(path))
            alive[new_path] = alive.pop(path, b"")
        edits.append(edit)
    return head, edits


def _check_against_reference(
    expected: Accepted | Refused, outcome: BatchRejected | dict[str, bytes], applied: list[dict[str, object]]
) -> str:
    """Compare an engine outcome with the reference; return "accepted" or "refused" for the tally."""
    if isinstance(expected, Refused):
        assert isinstance(outcome, BatchRejected), f"engine accepted, reference refused with {expected}"
        assert outcome.code in expected.codes, (outcome, expected)
        if expected.index is not None:
            assert outcome.index == expected.index, (outcome, expected)
        return "refused"
    assert not isinstance(outcome, BatchRejected), f"engine refused {outcome!r}, reference accepted"
    assert outcome == expected.files
    assert applied == expected.applied
    return "accepted"


# -- (a) in memory -------------------------------------------------------------------------------------


def test_preflight_equals_reference_replay() -> None:
    """For random heads and batches, preflight refuses exactly when the reference does, else matches it."""
    tally: Counter[str] = Counter()

    @settings(max_examples=200, derandomize=True, database=None, deadline=None)
    @given(cases())
    def check(case: tuple[dict[str, bytes], list[Edit]]) -> None:
        head, edits = case
        expected = replay(head, edits)
        dict_head = DictHead(head)
        outcome: BatchRejected | dict[str, bytes]
        applied: list[dict[str, object]] = []
        try:
            plan = preflight(dict_head, edits)
        except BatchRejected as err:
            outcome = err
        else:
            outcome = dict(head)
            for path, new in plan.changes.items():
                if new is None:
                    del outcome[path]
                else:
                    outcome[path] = new.data if new.data is not None else head[new.source or ""]
            applied = [a.to_dict() for a in plan.applied]
        assert dict_head.files == head
        tally[_check_against_reference(expected, outcome, applied)] += 1

    check()
    # The strategy must exercise both outcomes, or the property says little.
    assert tally["accepted"] >= 30 and tally["refused"] >= 30, tally


# -- (b) end to end on git -----------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (path -> bytes) and directory (path -> None) under ``root``."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))
    }


def test_git_commit_equals_reference_replay(tmp_path_factory: pytest.TempPathFactory) -> None:
    """On a real repo a refused batch changes no byte, and an accepted one commits the reference's tree."""
    data = tmp_path_factory.mktemp("prop-git")
    store = GitStore(data)
    author = Identity("Prop Tester", "prop@example.org")
    numbers = itertools.count()
    tally: Counter[str] = Counter()

    @settings(
        max_examples=50,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(cases())
    def check(case: tuple[dict[str, bytes], list[Edit]]) -> None:
        head, edits = case
        wiki = f"w{next(numbers)}"
        store.create(wiki, author, files=head)
        repo = store.open(wiki)
        base = repo.head()
        assert base is not None
        before = _snapshot(repo.path)
        expected = replay(head, edits)
        try:
            plan = preflight(repo.snapshot(), edits)
        except BatchRejected as err:
            assert _snapshot(repo.path) == before
            assert repo.head() == base
            tally[_check_against_reference(expected, err, [])] += 1
            return
        commit = repo.commit_plan(plan, base, "property batch", author, job_id=f"job-{wiki}")
        assert repo.head() == commit
        assert _git(repo.path, "rev-parse", f"{commit}^@").decode().split() == [base]
        subprocess.run(
            ["git", "--git-dir", str(repo.path), "fsck", "--strict"], check=True, capture_output=True
        )
        applied = [a.to_dict() for a in plan.applied]
        tally[
            _check_against_reference(expected, tree_files(repo.path, commit, regular_only=True), applied)
        ] += 1

    try:
        check()
    finally:
        store.close()
    assert tally["accepted"] >= 5 and tally["refused"] >= 5, tally
