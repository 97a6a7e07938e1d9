"""What preflight reads and what it answers: the head (``HeadView``, ``DictHead`` for tests), a file of the
result (``NewFile``), the ``applied`` entries, a dry run's warnings and the ``Plan``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from worker.engine.budget import Budget
from worker.engine.markdown import FileIndex


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

    def paths(self) -> Iterable[str]:
        """Every file path of the tree."""

    def file_index(self) -> FileIndex:
        """The ``FileIndex`` of every file of the tree (a view may cache it: it is rebuilt often)."""

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        """The bytes of each file at ``paths`` (which exist), in one go where that is cheaper."""

    def mentioning(self, needles: Sequence[str]) -> Iterable[str] | None:
        """Paths of the files whose bytes contain at least one of ``needles``, ASCII case ignored (more
        paths are fine, fewer are not), or None when the view cannot tell cheaply."""


@dataclass(frozen=True, init=False)
class NewFile:
    """A file of the result: its version, and its bytes or the head path they can be read from."""

    version: str
    data: bytes | None = None
    source: str | None = None

    def __init__(self, version: str, data: bytes | None = None, source: str | None = None) -> None:
        # Set through the instance dict: the generated __init__ of a frozen dataclass pays for an
        # ``object.__setattr__`` per field, and a batch builds a few of these per edit.
        fields = self.__dict__
        fields["version"] = version
        fields["data"] = data
        fields["source"] = source


@dataclass(frozen=True, init=False)
class Applied:
    """One entry of a job's ``applied`` list: the path's version after the edit (None once deleted);
    ``new_path`` on renames, ``count`` (links or occurrences changed) on rewrite_links and replace_across."""

    index: int
    op: str
    path: str
    version: str | None
    new_path: str | None = None
    count: int | None = None

    def __init__(
        self,
        index: int,
        op: str,
        path: str,
        version: str | None,
        new_path: str | None = None,
        count: int | None = None,
    ) -> None:
        # Set through the instance dict, as ``NewFile``: one of these per edit.
        fields = self.__dict__
        fields["index"] = index
        fields["op"] = op
        fields["path"] = path
        fields["version"] = version
        fields["new_path"] = new_path
        fields["count"] = count

    def to_dict(self) -> dict[str, object]:
        """The contract's JSON form; ``new_path`` and ``count`` appear only where they apply."""
        out: dict[str, object] = {"index": self.index, "op": self.op, "path": self.path}
        if self.new_path is not None:
            out["new_path"] = self.new_path
        out["version"] = self.version
        if self.count is not None:
            out["count"] = self.count
        return out


@dataclass(frozen=True)
class BatchWarning:
    """Something a dry run reports without refusing: ``code`` (LINK_BROKEN, NOT_IN_INDEX,
    NOT_REWRITTEN, ...), the page it is about, the line and link text when one link is meant."""

    code: str
    path: str
    message: str
    line: int | None = None
    link: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The JSON form: ``line`` and ``link`` only when set."""
        out: dict[str, object] = {"code": self.code, "path": self.path}
        if self.line is not None:
            out["line"] = self.line
        if self.link is not None:
            out["link"] = self.link
        out["message"] = self.message
        return out


@dataclass
class Plan:
    """What a batch does: ``changes`` maps each changed path to its new file, or None when deleted.

    For a dry run's review: ``renamed`` maps a file's final path to the head path it moved from,
    ``created`` lists the paths ``create`` edits made, ``warnings`` what preflight noticed on the way.
    """

    changes: dict[str, NewFile | None] = field(default_factory=dict)
    applied: list[Applied] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    warnings: list[BatchWarning] = field(default_factory=list)
    budget: Budget | None = None  # what is left of the batch's budget, for the review of a dry run


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

    def paths(self) -> Iterable[str]:
        return list(self.files)

    def file_index(self) -> FileIndex:
        return FileIndex(self.files)

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        return {path: self.files[path] for path in paths}

    def mentioning(self, needles: Sequence[str]) -> Iterable[str]:
        wanted = [needle.encode("utf-8", "surrogatepass").lower() for needle in needles]
        return [p for p, data in self.files.items() if any(n in data.lower() for n in wanted)]
