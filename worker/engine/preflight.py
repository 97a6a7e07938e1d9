"""The preflight engine: pure, in memory, no git, no Redis, no HTTP.

``preflight(head, edits, policy)`` applies a batch's edits in order to a view of the head, materialising every
resulting file, and returns a ``Plan``: the new content (or deletion) of every changed path plus the
``applied`` list. It refuses with one ``BatchRejected(code, message, index)`` on the first broken rule of
contract section 3.1; on refusal nothing has been written anywhere, because nothing here writes.

The head is anything with the ``HeadView`` methods; tests pass ``DictHead``, the worker a git snapshot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from worker.engine.paths import DEFAULT_POLICY, ZonePolicy, check_path
from worker.errors import BatchRejected
from worker.schema.edits import (
    Batch,
    Create,
    Delete,
    Edit,
    Limits,
    Overwrite,
    Rename,
    Replace,
    check_limits,
    decoded,
    utf8,
)


def blob_id(data: bytes) -> str:
    """The page version of ``data``: its git blob id, as ``git hash-object`` prints it."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class HeadView(Protocol):
    """Read access to the tree a batch is checked against."""

    def version(self, path: str) -> str | None:
        """The blob id of the file at ``path``, or None when no file is there."""

    def read(self, path: str) -> bytes:
        """The bytes of the file at ``path`` (which exists)."""

    def is_dir(self, path: str) -> bool:
        """True when ``path`` is a folder holding at least one file."""

    def files_under(self, folder: str) -> Iterable[str]:
        """Every file path below ``folder``."""


@dataclass(frozen=True)
class NewFile:
    """A file of the result: its version, and its bytes or the head path they can be read from."""

    version: str
    data: bytes | None = None
    source: str | None = None


@dataclass(frozen=True)
class Applied:
    """One entry of a job's ``applied`` list: the path's version after the edit (None once deleted)."""

    index: int
    op: str
    path: str
    version: str | None
    new_path: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The contract's JSON form; ``new_path`` appears on renames only."""
        out: dict[str, object] = {"index": self.index, "op": self.op, "path": self.path}
        if self.new_path is not None:
            out["new_path"] = self.new_path
        out["version"] = self.version
        return out


@dataclass
class Plan:
    """What a batch does: ``changes`` maps each changed path to its new file, or None when deleted."""

    changes: dict[str, NewFile | None] = field(default_factory=dict)
    applied: list[Applied] = field(default_factory=list)


class DictHead:
    """A ``HeadView`` over a plain ``{path: bytes}`` mapping (tests, benchmarks, replay)."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.files = dict(files)
        self._folders = {p.rsplit("/", i)[0] for p in self.files for i in range(1, p.count("/") + 1)}

    def version(self, path: str) -> str | None:
        data = self.files.get(path)
        return None if data is None else blob_id(data)

    def read(self, path: str) -> bytes:
        return self.files[path]

    def is_dir(self, path: str) -> bool:
        return path in self._folders

    def files_under(self, folder: str) -> Iterable[str]:
        prefix = folder + "/"
        return [p for p in self.files if p.startswith(prefix)]


def check_static(batch: Batch, policy: ZonePolicy = DEFAULT_POLICY, limits: Limits | None = None) -> None:
    """Every check that needs no repository: limits, encodings, path shapes and zones."""
    check_limits(batch, limits or Limits())
    for index, edit in enumerate(batch.edits):
        _check_edit_shape(edit, index, policy)


def _check_edit_shape(edit: Edit, index: int, policy: ZonePolicy) -> None:
    check_path(edit.path, index)
    if isinstance(edit, Rename):
        check_path(edit.new_path, index)
    policy.check(edit.op, edit.path, index)
    if isinstance(edit, Rename):
        policy.check("rename", edit.new_path, index)
    if isinstance(edit, Create | Overwrite):
        decoded(edit, index)
    if isinstance(edit, Replace):
        if not utf8(edit.old, index, "old"):
            raise BatchRejected("INVALID_BATCH", "replace needs a non-empty 'old'", index)
        utf8(edit.new, index, "new")


class _Batch:
    """The working state of one preflight: the head plus the edits applied so far.

    ``output`` is the number of new bytes held in ``state`` (files this batch materialised), kept under
    ``limits.max_output_bytes``; no file grows past ``limits.max_file_bytes``. A replace's result size is
    computed before the result is built, so memory never grows past the limits.
    """

    def __init__(self, head: HeadView, policy: ZonePolicy, limits: Limits) -> None:
        self.head = head
        self.policy = policy
        self.limits = limits
        self.output = 0
        self.state: dict[str, NewFile | None] = {}
        self.created: set[str] = set()
        self.origin: dict[str, int] = {}
        self.applied: list[Applied] = []

    def current(self, path: str) -> NewFile | None:
        if path in self.state:
            return self.state[path]
        version = self.head.version(path)
        return None if version is None else NewFile(version, source=path)

    def content(self, file: NewFile) -> bytes:
        if file.data is not None:
            return file.data
        assert file.source is not None
        return self.head.read(file.source)

    def check_version(self, index: int, path: str, expected: str | None) -> None:
        if path in self.created:
            return
        actual = self.head.version(path)
        if expected is None:
            raise BatchRejected(
                "VERSION_REQUIRED",
                f"{path!r} exists; give expected_version (its version is in read_page or the pages list)",
                index,
            )
        if expected != actual:
            raise BatchRejected(
                "VERSION_MISMATCH",
                f"{path!r} changed since you read it (expected {expected}, now {actual}); read it again",
                index,
            )

    def put(self, index: int, path: str, file: NewFile | None) -> None:
        size = _held(file)
        self.check_file_size(index, path, size)
        output = self.output - _held(self.state.get(path)) + size
        if output > self.limits.max_output_bytes:
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"the batch would write {output} bytes of new content, over the limit of "
                f"{self.limits.max_output_bytes}; split it into smaller batches",
                index,
            )
        self.output = output
        self.state[path] = file
        self.origin[path] = index

    def check_file_size(self, index: int, path: str, size: int) -> None:
        if size > self.limits.max_file_bytes:
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"{path!r} would be {size} bytes, over the limit of {self.limits.max_file_bytes} bytes a "
                "file; split the page",
                index,
            )

    def apply(self, index: int, edit: Edit) -> None:
        _check_edit_shape(edit, index, self.policy)
        path = edit.path
        existing = self.current(path)
        if isinstance(edit, Create):
            if existing is not None:
                raise BatchRejected(
                    "PATH_EXISTS", f"{path!r} already exists; use overwrite or replace", index
                )
            data = decoded(edit, index)
            self.put(index, path, NewFile(blob_id(data), data))
            self.created.add(path)
            self.applied.append(Applied(index, "create", path, blob_id(data)))
            return
        if existing is None:
            raise BatchRejected("NOT_FOUND", f"{path!r} does not exist at this point of the batch", index)
        self.check_version(index, path, edit.expected_version)
        if isinstance(edit, Overwrite):
            data = decoded(edit, index)
            self.put(index, path, NewFile(blob_id(data), data))
            self.applied.append(Applied(index, "overwrite", path, blob_id(data)))
        elif isinstance(edit, Replace):
            data = self.replaced(index, edit, self.content(existing), self.limits.max_file_bytes)
            self.put(index, path, NewFile(blob_id(data), data))
            self.applied.append(Applied(index, "replace", path, blob_id(data)))
        elif isinstance(edit, Delete):
            self.put(index, path, None)
            self.applied.append(Applied(index, "delete", path, None))
        elif isinstance(edit, Rename):
            target = edit.new_path
            if self.current(target) is not None:
                raise BatchRejected("PATH_EXISTS", f"rename target {target!r} already exists", index)
            self.put(index, path, None)
            self.put(index, target, existing)
            self.created.add(target)
            self.applied.append(Applied(index, "rename", path, existing.version, new_path=target))

    @staticmethod
    def replaced(index: int, edit: Replace, data: bytes, max_size: int) -> bytes:
        old, new = edit.old.encode("utf-8"), edit.new.encode("utf-8")
        count = data.count(old)
        if count == 0:
            raise BatchRejected(
                "OLD_NOT_FOUND",
                f"'old' does not occur in {edit.path!r}; read the page raw and copy it",
                index,
            )
        if edit.expected_count is not None and count != edit.expected_count:
            raise BatchRejected(
                "COUNT_MISMATCH",
                f"'old' occurs {count} times, expected_count is {edit.expected_count}",
                index,
            )
        if count > 1 and not edit.replace_all:
            raise BatchRejected(
                "OLD_NOT_UNIQUE",
                f"'old' occurs {count} times in {edit.path!r}; add context or set replace_all",
                index,
            )
        size = len(data) + (count if edit.replace_all else 1) * (len(new) - len(old))
        if size > max_size:  # refused before the result is built: it may be huge
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"the replace would make {edit.path!r} {size} bytes, over the limit of {max_size} bytes a "
                "file; split the page",
                index,
            )
        return data.replace(old, new) if edit.replace_all else data.replace(old, new, 1)

    def check_conflicts(self) -> None:
        """No file may sit where a folder is, nor under a path that is a file, in the result."""
        new_folders: dict[str, int] = {}
        for path, file in self.state.items():
            if file is not None:
                parts = path.split("/")
                for depth in range(1, len(parts)):
                    new_folders.setdefault("/".join(parts[:depth]), self.origin[path])
        for path, file in self.state.items():
            if file is None or (self.head.version(path) is not None):
                continue
            index = self.origin[path]
            parts = path.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if self.is_file(folder):
                    raise BatchRejected(
                        "PATH_CONFLICT", f"{path!r} would be under {folder!r}, which is a file", index
                    )
            if path in new_folders or self.head_folder_survives(path):
                raise BatchRejected("PATH_CONFLICT", f"{path!r} would be a file where a folder is", index)
        for folder, index in new_folders.items():
            if self.is_file(folder):
                raise BatchRejected(
                    "PATH_CONFLICT", f"a file would be under {folder!r}, which is a file", index
                )

    def is_file(self, path: str) -> bool:
        if path in self.state:
            return self.state[path] is not None
        return self.head.version(path) is not None

    def head_folder_survives(self, folder: str) -> bool:
        if not self.head.is_dir(folder):
            return False
        return any(self.state.get(p, True) is not None for p in self.head.files_under(folder))


def _held(file: NewFile | None) -> int:
    """New bytes ``file`` holds in memory (none when it is a head file or a deletion)."""
    return 0 if file is None or file.data is None else len(file.data)


def preflight(
    head: HeadView, edits: Sequence[Edit], policy: ZonePolicy = DEFAULT_POLICY, limits: Limits | None = None
) -> Plan:
    """Check ``edits`` against ``head`` in order and return the plan, or raise ``BatchRejected``."""
    work = _Batch(head, policy, limits or Limits())
    for index, edit in enumerate(edits):
        work.apply(index, edit)
    work.check_conflicts()
    # A path created and deleted again inside the batch is no change at all.
    changes = {p: f for p, f in work.state.items() if f is not None or head.version(p) is not None}
    return Plan(changes=changes, applied=work.applied)
