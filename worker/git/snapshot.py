"""Reading trees: the process-wide caches of parsed trees and of commit-to-tree ids, and ``Snapshot``, the
engine's view of one commit's tree.

Both caches are shared by every repository of the process (``TREES``, ``COMMIT_TREES``): ids are content
hashes, so a tree or commit id means the same bytes in any repository, and a repository evicted from the
store and opened again finds its trees still parsed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from worker.engine.markdown import FileIndex
from worker.git.grep import files_mentioning, read_blobs
from worker.git.objects import TREE_MODE, Tree
from worker.lru import Lru

if TYPE_CHECKING:
    from worker.git.reader import ObjectReader

TREE_CACHE_ENTRIES = 250_000  # per process: ~100k pages of head plus recent versions; ~45 MB at most

COMMIT_CACHE = 16_384

FILE_MODE = 0o100644
EXEC_MODE = 0o100755


class TreeCache(Lru[Tree]):
    """Parsed trees by id, least recently used dropped first, bounded by their total number of entries.

    Trees never change, so none goes stale. Counting entries rather than trees keeps one wide folder (whose
    every version is a full copy) from holding thousands of big trees. Thread-safe: snapshots read it from
    API threads while a commit writes it. A commit ``demote``s the trees it has just replaced: they are
    rarely read again.
    """

    def __init__(self, capacity: int = TREE_CACHE_ENTRIES) -> None:
        super().__init__(capacity, lambda tree: tree.size + 1)


class CommitTrees:
    """Root tree id by commit id (filled by ``commit_plan`` and by reads), so a snapshot needs no read."""

    def __init__(self, capacity: int = COMMIT_CACHE) -> None:
        self.capacity = capacity
        self.trees: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, commit: str) -> str | None:
        with self._lock:
            return self.trees.get(commit)

    def put(self, commit: str, tree: str) -> None:
        with self._lock:
            self.trees[commit] = tree
            if len(self.trees) > self.capacity:
                self.trees.popitem(last=False)


_UNSEEN = Tree([], [])  # marker: a folder the snapshot has not looked up yet
_NOT_LOOKED_UP = (0, "")  # marker: an entry the snapshot has not looked up yet
READ_MANY_FROM = 32  # from this many files on, one git cat-file reads them (git resolves deltas in C)


# ``FileIndex`` of a tree by tree id, the few most recent (a batch that rewrites links builds one over every
# file; the next batch of the same wiki mostly starts from the same tree)
FILE_INDEXES: Lru[FileIndex] = Lru(4)


TREES = TreeCache()  # the process's parsed trees, shared by every repository
COMMIT_TREES = CommitTrees()  # the process's commit -> root tree ids


class Snapshot:
    """A read-only view of one tree (a ``HeadView`` for the engine).

    Folders and entries looked up are remembered for the life of the snapshot (``path -> Tree`` or
    ``path -> (mode, id)``, None when there is nothing), so the engine's repeated questions about the same
    paths (it asks about each path of a batch four or five times) cost one dict lookup each.
    """

    def __init__(self, repo: ObjectReader, commit: str | None, tree: str | None) -> None:
        self.repo = repo
        self.commit = commit
        self.tree = tree
        self._folders: dict[str, Tree | None] = {}
        self._entries: dict[str, tuple[int, str] | None] = {}

    def _folder(self, folder: str) -> Tree | None:
        found = self._folders.get(folder, _UNSEEN)
        if found is not _UNSEEN:
            return found
        if not folder:
            found = None if self.tree is None else self.repo.tree(self.tree)
        else:
            parent, _, name = folder.rpartition("/")
            above = self._folder(parent)
            entry = self._entries.get(folder, _NOT_LOOKED_UP)
            if entry is _NOT_LOOKED_UP:  # the folder's own entry, kept: the engine asks about it too
                entry = self._entries[folder] = None if above is None else above.find(name)
            found = self.repo.tree(entry[1]) if entry is not None and entry[0] == TREE_MODE else None
        self._folders[folder] = found
        return found

    def _entry(self, path: str) -> tuple[int, str] | None:
        found = self._entries.get(path, _NOT_LOOKED_UP)
        if found is not _NOT_LOOKED_UP:
            return found
        folder, _, name = path.rpartition("/")
        tree = self._folder(folder)
        entry = self._entries[path] = None if tree is None else tree.find(name)
        return entry

    def version(self, path: str) -> str | None:
        """The blob id at ``path``, or None when no file is there."""
        entry = self._entries.get(path, _NOT_LOOKED_UP)  # asked several times a path: no call then
        if entry is _NOT_LOOKED_UP:
            entry = self._entry(path)
        if entry is None or (entry[0] != FILE_MODE and entry[0] != EXEC_MODE):
            return None
        return entry[1]

    def read(self, path: str) -> bytes:
        """The bytes of the file at ``path``; ``KeyError`` when there is none."""
        version = self.version(path)
        if version is None:
            raise KeyError(path)
        return self.repo.read_blob(version)

    def is_dir(self, path: str) -> bool:
        """True when ``path`` is a folder."""
        entry = self._entry(path)
        return entry is not None and entry[0] == TREE_MODE

    def files_under(self, folder: str) -> Iterator[str]:
        """Every file path below ``folder``."""
        entry = self._entry(folder)
        if entry is not None and entry[0] == TREE_MODE:
            yield from self._walk(entry[1], folder + "/")

    def paths(self) -> Iterator[str]:
        """Every file path of the tree (regular files, as ``version`` sees them)."""
        if self.tree is not None:
            yield from self._walk_files(self.tree, "")

    def _walk_files(self, tree: str, prefix: str) -> Iterator[str]:
        for name, (mode, oid) in self.repo.tree(tree).items():
            if mode == TREE_MODE:
                yield from self._walk_files(oid, f"{prefix}{name}/")
            elif mode in (FILE_MODE, EXEC_MODE):
                yield prefix + name

    def file_index(self) -> FileIndex:
        """The ``FileIndex`` of every file of the tree (cached by tree id, process-wide)."""
        if self.tree is None:
            return FileIndex(())
        found = FILE_INDEXES.get(self.tree)
        if found is None:
            found = FileIndex(self.paths())
            FILE_INDEXES.put(self.tree, found)
        return found

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        """The bytes of the files at ``paths``; many at once come from one ``git cat-file --batch``."""
        if len(paths) < READ_MANY_FROM or self.repo.pending():  # git cannot read a group's new blobs
            return {path: self.read(path) for path in paths}
        versions = []
        for path in paths:
            version = self.version(path)
            if version is None:
                raise KeyError(path)
            versions.append(version)
        return dict(zip(paths, read_blobs(self.repo.path, versions), strict=True))

    def mentioning(self, needles: Sequence[str]) -> list[str] | None:
        """Paths of the files whose bytes contain one of ``needles``, ASCII case ignored (``git grep``);
        None (every file may) when a needle has nothing to search for on one line, or when the tree is not
        on disk yet (a commit group's)."""
        if self.tree is None:
            return []
        if self.repo.pending(self.tree):  # a tree of a commit group not written yet: git cannot grep it
            return None
        lines = []
        for needle in needles:
            longest = max(needle.replace("\r", "\n").split("\n"), key=len)
            if not longest:
                return None
            lines.append(longest)
        return files_mentioning(self.repo.path, self.tree, lines)

    def _walk(self, tree: str, prefix: str) -> Iterator[str]:
        for name, (mode, oid) in self.repo.tree(tree).items():
            if mode == TREE_MODE:
                yield from self._walk(oid, f"{prefix}{name}/")
            else:
                yield prefix + name
