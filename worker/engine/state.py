"""The working state of one preflight: the head a batch is checked against, plus what its edits did so far.

``BatchState`` overlays the edits on the head (a ``plan.HeadView``: tests pass ``DictHead``, the worker a
git snapshot) and enforces, for every op module, the rules all ops share:

- **versions** (contract rule 2, amended): an edit that names ``expected_version`` passes when it is the
  path's version at the head (so the version a writer read holds for the whole batch, also after earlier
  edits changed the path) or any version an earlier edit of the batch gave the path; ``"batch"``
  passes when an earlier edit of the batch changed the path (for an edit that drops text it read —
  ``overwrite``, ``delete``, ``replace_section``, ``remove_section`` — one that checked a version id:
  link rewriting and ``replace_across`` check none, nor does an edit that gives ``"batch"``, only a
  section's version, or (``append``, ``frontmatter``) no version; the refusal names those edits); a path
  created earlier in the batch (a ``create`` or a rename target) needs none;
- **zones**: an in-place change (``append``, ``frontmatter``, the section ops, ``replace_across``, a
  rewritten link) is allowed exactly where the zone policy allows ``replace``;
- **output size**: ``put`` keeps every file under ``limits.max_file_bytes`` and all new bytes of the batch
  under ``limits.max_output_bytes``;
- **file/folder conflicts** in the result (``check_conflicts``).

Each edit is applied between ``begin`` and the next ``begin``; ``rollback`` takes back everything it
changed, so preflight can go on checking the edits after a failing one as if it were not in the batch.
Nothing here writes anywhere: a refused batch leaves no trace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import NoReturn

from worker.engine.markdown import FileIndex
from worker.engine.markdown.bounds import TooLarge
from worker.engine.paths import OpName, ZonePolicy
from worker.engine.plan import Applied, BatchWarning, HeadView, NewFile, Plan, blob_id
from worker.errors import BatchRejected
from worker.schema.edits import BATCH_VERSION, Limits

_NO_VERSIONS: frozenset[str] = frozenset()

# The zone rule each op is checked under: in-place changes are what ``replace`` is.
ZONE_OPS: dict[str, OpName] = {
    "create": "create",
    "overwrite": "overwrite",
    "replace": "replace",
    "delete": "delete",
    "rename": "rename",
    "append": "replace",
    "frontmatter": "replace",
    "replace_section": "replace",
    "append_section": "replace",
    "insert_section_after": "replace",
    "remove_section": "replace",
    "rename_section": "replace",
    "extract_section": "replace",
    "replace_across": "replace",
    "merge_pages": "replace",
    "rewrite_links": "replace",
}


class BatchState:
    """The head plus the edits applied so far (see the module docstring for the shared rules).

    ``output`` is the number of new bytes held in ``state`` (files this batch materialised), kept under
    ``limits.max_output_bytes``; no file grows past ``limits.max_file_bytes``. Ops compute a result's size
    before building it where that is cheap, so memory never grows far past the limits.
    """

    def __init__(self, head: HeadView, policy: ZonePolicy, limits: Limits) -> None:
        self.head = head
        self.policy = policy
        self.limits = limits
        self.output = 0
        self.state: dict[str, NewFile | None] = {}
        # how to undo each change of the edit being applied, in order (``begin``, ``rollback``)
        self._undo: list[Callable[[], object]] = []
        self._mark = (0, 0, 0, 0)
        self.created: set[str] = _UndoneSet(self._undo)
        self.made: list[str] = []  # paths made by create edits, in order
        self.origin: dict[str, int] = {}
        self.versions: dict[str, set[str]] = {}  # every version an edit of the batch gave a path
        self.vouched: set[str] = _UndoneSet(self._undo)  # paths an edit checked by a version id
        # a moved file's path -> the path it had before the batch
        self.moved_from: dict[str, str] = _UndoneDict(self._undo)
        self.applied: list[Applied] = []
        self.warnings: list[BatchWarning] = []
        self._files: set[str] | None = None
        self._read: dict[str, bytes] = {}  # head files read ahead (prefetch)

    # -- one edit at a time ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Start applying an edit: what it changes from here on can be taken back (``rollback``). What the
        edit replaces is kept until the next ``begin``, so an edit holds at most twice its output."""
        self._undo.clear()
        self._mark = (len(self.applied), len(self.warnings), len(self.made), self.output)

    def close(self) -> None:
        """Drop the undo records of the last edit: they point back at this state, and a state no longer
        in use should be freed at once rather than left to the cycle collector."""
        self._undo.clear()

    def rollback(self) -> None:
        """Take back every change since ``begin``: the state is as if the edit being applied had not been
        in the batch (how ``preflight`` goes on checking the edits after a failing one)."""
        while self._undo:
            self._undo.pop()()
        applied, warnings, made, self.output = self._mark
        del self.applied[applied:]
        del self.warnings[warnings:]
        del self.made[made:]
        self.forget()

    # -- reading the current state --------------------------------------------------------------------

    def current(self, path: str) -> NewFile | None:
        """The file at ``path`` as the batch left it so far, or None."""
        if path in self.state:
            return self.state[path]
        version = self.head.version(path)
        return None if version is None else NewFile(version, source=path)

    def existing(self, index: int, path: str) -> NewFile:
        """The file at ``path``, or ``NOT_FOUND`` naming the edit."""
        file = self.current(path)
        if file is None:
            raise BatchRejected("NOT_FOUND", f"{path!r} does not exist at this point of the batch", index)
        return file

    def content(self, file: NewFile) -> bytes:
        """The bytes of ``file``."""
        if file.data is not None:
            return file.data
        assert file.source is not None
        found = self._read.get(file.source)
        return found if found is not None else self.head.read(file.source)

    def text(self, index: int, path: str, file: NewFile) -> str:
        """The content of ``file`` as text; ``INVALID_ENCODING`` when it is not UTF-8."""
        try:
            return self.content(file).decode("utf-8")
        except UnicodeDecodeError:
            raise BatchRejected(
                "INVALID_ENCODING",
                f"{path!r} is not UTF-8 text, so this op cannot edit it; use overwrite",
                index,
            ) from None

    def page_text(self, path: str) -> str | None:
        """The text at ``path`` as the batch left it, or None when no file is there or it is not UTF-8:
        what the ops that sweep many pages (link rewriting, replace_across) read and skip."""
        file = self.current(path)
        if file is None:
            return None
        try:
            return self.content(file).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def over_file_size(self, index: int, path: str, exc: TooLarge) -> NoReturn:
        """Refuse an edit whose rewrite of ``path`` grew past the per-file limit: ``TooLarge`` counted at
        least ``exc.size`` characters, so at least as many bytes (``BATCH_TOO_LARGE``)."""
        self.check_file_size(index, path, exc.size)
        raise AssertionError("unreachable: over max_file_bytes") from exc

    def files(self) -> set[str]:
        """Every file path as the batch left it so far (built on first use, then kept up to date)."""
        if self._files is None:
            found = set(self.head.file_index().files)
            for path, file in self.state.items():
                if file is None:
                    found.discard(path)
                else:
                    found.add(path)
            self._files = found
        return self._files

    def index(self) -> FileIndex:
        """The ``FileIndex`` of the files as the batch left them so far (derived from the head's)."""
        removed = [path for path, file in self.state.items() if file is None]
        added = [path for path, file in self.state.items() if file is not None]
        return self.head.file_index().changed(removed, added)

    def prefetch(self, paths: Iterable[str]) -> None:
        """Read the head files at ``paths`` in one go for ``content`` (``forget`` drops them)."""
        wanted = [p for p in paths if p not in self.state and p not in self._read]
        if wanted:
            self._read.update(self.head.read_many(wanted))

    def forget(self) -> None:
        """Drop what ``prefetch`` read."""
        self._read.clear()

    def files_under(self, folder: str) -> list[str]:
        """Every file below ``folder`` as the batch left it so far, sorted."""
        prefix = folder + "/"
        found = {p for p in self.head.files_under(folder) if self.state.get(p, True) is not None}
        found |= {p for p, f in self.state.items() if f is not None and p.startswith(prefix)}
        return sorted(found)

    def is_file(self, path: str) -> bool:
        """True when a file is at ``path`` as the batch left it so far."""
        if path in self.state:
            return self.state[path] is not None
        return self.head.version(path) is not None

    # -- rules ----------------------------------------------------------------------------------------

    def check_zone(self, op: str, path: str, index: int | None) -> None:
        """``ZONE_FORBIDDEN`` / ``PROTECTED_PATH`` unless the zone policy lets ``op`` touch ``path``."""
        check_zone(self.policy, op, path, index)

    def zone_allows(self, op: str, path: str) -> bool:
        """True when the zone policy lets ``op`` touch ``path``."""
        try:
            check_zone(self.policy, op, path, None)
        except BatchRejected:
            return False
        return True

    def check_version(
        self, index: int, path: str, expected: str | None, *, required: bool = True, whole: bool = False
    ) -> None:
        """Rule 2: ``expected`` must be the head version, one an earlier edit gave ``path``, or ``"batch"``
        when an earlier edit changed ``path`` (``whole``, for an edit replacing all of it: one that checked
        a version id); None is ``VERSION_REQUIRED`` when ``required``. A path created earlier in the batch
        is never checked."""
        if path in self.created:
            return
        actual = self.head.version(path)
        if expected is None:
            if required:
                raise BatchRejected(
                    "VERSION_REQUIRED",
                    f"{path!r} exists; give expected_version (its version is in read_page or the pages list)",
                    index,
                )
            return
        if expected == BATCH_VERSION:
            self._check_batch_version(index, path, whole)
            return
        produced = self.versions.get(path, _NO_VERSIONS)
        if expected == actual or expected in produced:
            self.vouched.add(path)
            return
        accepted = f"the head has {actual}"
        if produced:
            accepted += ", and earlier edits of this batch gave it " + ", ".join(sorted(produced))
        raise BatchRejected(
            "VERSION_MISMATCH",
            f"you gave version {expected} for {path!r}; {accepted}. It changed since you read it: read it "
            "again and redo this edit",
            index,
            {"path": path, "current_version": actual},
        )

    def _check_batch_version(self, index: int, path: str, whole: bool) -> None:
        """``expected_version: "batch"``: the edit is written against ``path`` as this batch left it."""
        if path not in self.versions:
            raise BatchRejected(
                "VERSION_REQUIRED",
                f'expected_version "batch" means {path!r} as earlier edits of this batch left it, but none '
                "changed it: give the version you read (read_page or list_pages), which holds for the whole "
                "batch",
                index,
            )
        if whole and path not in self.vouched:
            raise BatchRejected(
                "VERSION_REQUIRED",
                f"{path!r} was changed earlier in this batch only by {self._unchecked_changes(path)}, "
                'which checked no version id of it, so this edit with "batch" could drop what another '
                "writer changed since you read it: give the version you read (read_page or list_pages), "
                "which holds for the whole batch, also after earlier edits changed the page",
                index,
            )

    def _unchecked_changes(self, path: str) -> str:
        """The earlier edits that changed ``path``, for a message: ``the link rewriting of edit 0
        (rename)`` for a page a rename or delete rewrote the links of, ``edit 1 (append)`` for an op of
        its own."""
        ops = {entry.index: entry.op for entry in self.applied if entry.op != "rewrite_links"}
        found: dict[int, str] = {}
        for entry in self.applied:
            if entry.path == path and entry.index not in found:
                what = f"edit {entry.index} ({ops.get(entry.index, entry.op)})"
                found[entry.index] = f"the link rewriting of {what}" if entry.op == "rewrite_links" else what
        named = list(found.values())
        return ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else "".join(named)

    def check_file_size(self, index: int, path: str, size: int) -> None:
        """``BATCH_TOO_LARGE`` when a file of ``size`` bytes would be over the per-file limit."""
        if size > self.limits.max_file_bytes:
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"{path!r} would be {size} bytes, over the limit of {self.limits.max_file_bytes} bytes a "
                "file; split the page",
                index,
            )

    # -- writing the state ----------------------------------------------------------------------------

    def put(self, index: int, path: str, file: NewFile | None) -> None:
        """Set ``path`` to ``file`` (None: deleted), within the output limits; remembers its version."""
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
        before = (self.state[path], self.origin[path]) if path in self.state else None
        self._undo.append(functools.partial(self._unput, path, before, self.versions.get(path)))
        self.output = output
        self.state[path] = file
        self.origin[path] = index
        if file is not None:  # a new set: the one ``_unput`` may restore stays as it was
            self.versions[path] = {*self.versions.get(path, ()), file.version}
        if self._files is not None:
            if file is None:
                self._files.discard(path)
            else:
                self._files.add(path)

    def _unput(self, path: str, before: tuple[NewFile | None, int] | None, versions: set[str] | None) -> None:
        """Undo one ``put`` of ``path`` (``rollback``): what the state, origin and versions held before."""
        if before is None:
            del self.state[path], self.origin[path]
        else:
            self.state[path], self.origin[path] = before
        if versions is None:
            self.versions.pop(path, None)
        else:
            self.versions[path] = versions
        if self._files is not None:
            if self.is_file(path):
                self._files.add(path)
            else:
                self._files.discard(path)

    def write(
        self,
        index: int,
        op: str,
        path: str,
        data: bytes,
        count: int | None = None,
        new_path: str | None = None,
    ) -> None:
        """Put ``data`` at ``path`` and record the applied entry of ``op``."""
        version = blob_id(data)
        self.put(index, path, NewFile(version, data))
        self.applied.append(Applied(index, op, path, version, new_path=new_path, count=count))

    def rewrite_page(
        self,
        index: int,
        op: str,
        page: str,
        rewrite: Callable[[str, str], tuple[str, int]],
        refused: Callable[[str, int], str],
    ) -> int:
        """Rewrite ``page`` as the batch left it in place, as ``op``: ``rewrite(page, text)`` gives the new
        text and how many changes it made. Returns how many changes were written: 0 when ``page`` is not
        UTF-8 text or nothing changed, and when its zone allows ``op`` no in-place change, where nothing is
        written and a ``NOT_REWRITTEN`` warning says ``refused(page, count)``. A new text over the per-file
        limit (``TooLarge``) refuses the edit (``over_file_size``)."""
        text = self.page_text(page)
        if text is None:
            return 0
        try:
            new_text, count = rewrite(page, text)
        except TooLarge as exc:
            self.over_file_size(index, page, exc)
        if not count:
            return 0
        if not self.zone_allows(op, page):
            self.warn("NOT_REWRITTEN", page, refused(page, count))
            return 0
        self.write(index, op, page, new_text.encode("utf-8"), count=count)
        return count

    def warn(
        self, code: str, path: str, message: str, line: int | None = None, link: str | None = None
    ) -> None:
        """Remember a warning for a dry run's answer."""
        self.warnings.append(BatchWarning(code, path, message, line, link))

    # -- the result -----------------------------------------------------------------------------------

    def check_conflicts(self) -> None:
        """No file may sit where a folder is, nor under a path that is a file, in the result."""
        new_folders: dict[str, int] = {}
        for path, file in self.state.items():
            if file is not None:
                origin = self.origin[path]
                for folder in folders_of(path):
                    new_folders.setdefault(folder, origin)
        # every folder asked about below is one of these: each is looked up once
        file_at = {folder: self.is_file(folder) for folder in new_folders}
        for path, file in self.state.items():
            if file is None or (self.head.version(path) is not None):
                continue
            index = self.origin[path]
            for folder in folders_of(path):
                if file_at[folder]:
                    raise BatchRejected(
                        "PATH_CONFLICT", f"{path!r} would be under {folder!r}, which is a file", index
                    )
            if path in new_folders or self._head_folder_survives(path):
                raise BatchRejected("PATH_CONFLICT", f"{path!r} would be a file where a folder is", index)
        for folder, index in new_folders.items():
            if file_at[folder]:
                raise BatchRejected(
                    "PATH_CONFLICT", f"a file would be under {folder!r}, which is a file", index
                )

    def _head_folder_survives(self, folder: str) -> bool:
        if not self.head.is_dir(folder):
            return False
        return any(self.state.get(p, True) is not None for p in self.head.files_under(folder))

    def plan(self) -> Plan:
        """The plan of the batch so far: changed paths (a path created and deleted again is no change)."""
        changes = {p: f for p, f in self.state.items() if f is not None or self.head.version(p) is not None}
        renamed = {
            new: old
            for new, old in self.moved_from.items()
            if new != old and changes.get(new) is not None and self.head.version(old) is not None
        }
        made = [p for p in dict.fromkeys(self.made) if changes.get(p) is not None]
        return Plan(changes, self.applied, renamed, made, self.warnings)


class _UndoneSet(set[str]):
    """A set of ``BatchState`` whose changes ``rollback`` can take back: ``add`` and ``discard`` (the only
    mutators the ops use) record their undoing. A ``set`` itself, so lookups cost what a set's do."""

    def __init__(self, undo: list[Callable[[], object]]) -> None:
        super().__init__()
        self._undo = undo

    def add(self, value: str) -> None:
        if value not in self:
            self._undo.append(functools.partial(super().discard, value))
            super().add(value)

    def discard(self, value: object) -> None:
        if isinstance(value, str) and value in self:
            self._undo.append(functools.partial(super().add, value))
            super().discard(value)


class _UndoneDict(dict[str, str]):
    """A mapping of ``BatchState`` whose changes ``rollback`` can take back: item assignment, ``del`` and
    ``pop`` (the only mutators the ops use) record their undoing. A ``dict`` itself, so reads cost what a
    dict's do."""

    def __init__(self, undo: list[Callable[[], object]]) -> None:
        super().__init__()
        self._undo = undo

    def __setitem__(self, key: str, value: str) -> None:
        self._saving(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._saving(key)
        super().__delitem__(key)

    def pop(self, key: str, *default: str) -> str:  # type: ignore[override]
        if key in self:
            self._saving(key)
        return super().pop(key, *default)

    def _saving(self, key: str) -> None:
        """Record how to bring ``key`` back to what it holds now."""
        if key in self:
            self._undo.append(functools.partial(super().__setitem__, key, self[key]))
        else:
            self._undo.append(functools.partial(super().pop, key, None))


def check_count(expected: int | None, actual: int, found: str, index: int | None) -> None:
    """``COUNT_MISMATCH`` (with ``actual_count``) when an edit's ``expected_count`` is set and ``actual``
    is not it; ``found`` says how often what it matched was found, the message ends ", expected_count is
    <expected>"."""
    if expected is not None and actual != expected:
        raise BatchRejected(
            "COUNT_MISMATCH", f"{found}, expected_count is {expected}", index, {"actual_count": actual}
        )


def check_zone(policy: ZonePolicy, op: str, path: str, index: int | None) -> None:
    """``ZONE_FORBIDDEN`` / ``PROTECTED_PATH`` unless ``policy`` lets ``op`` touch ``path``; in-place
    ops are checked as ``replace`` and say so."""
    zone_op = ZONE_OPS.get(op, "replace")
    try:
        policy.check(zone_op, path, index)
    except BatchRejected as exc:
        if zone_op == op:
            raise
        raise BatchRejected(
            exc.code, f"{op} changes a file in place, which needs replace here: {exc.message}", index
        ) from None


def folders_of(path: str) -> list[str]:
    """The folders ``path`` is in, outermost first (``a/b/c``: ``a``, ``a/b``)."""
    out = []
    at = path.find("/")
    while at >= 0:
        out.append(path[:at])
        at = path.find("/", at + 1)
    return out


def _held(file: NewFile | None) -> int:
    """New bytes ``file`` holds in memory (none when it is a head file or a deletion)."""
    return 0 if file is None or file.data is None else len(file.data)
