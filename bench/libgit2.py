"""The engine section's same-run peer: the same batches committed through libgit2 (pygit2).

What the library does at best for a 10-edit batch: a ``TreeBuilder`` on the changed paths only (the rest
of each tree taken from the parent's), the blobs and trees written as loose objects, ``create_commit``
moving ``main``; no preflight checks and no fsync. Set to its fastest (``tune``): no existence check of the
objects a new tree or commit names, no hash check of the objects it reads, trees of any size kept in its
object cache (as the engine's tree cache keeps them). pygit2 is a bench-only extra (``pip install
'.[bench]'``); without it the comparison is skipped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.workload import Workload
from worker.schema.edits import Create, Delete, Overwrite, Rename

try:
    import pygit2
except ImportError:  # the bench extra is not installed
    pygit2 = None

MAIN = "refs/heads/main"
TREE_CACHE_LIMIT = 1 << 24  # bytes: the biggest tree libgit2's object cache keeps (its default: 4 KiB)


def tune() -> None:
    """libgit2's process-wide options at their fastest for this comparison (see the module)."""
    assert pygit2 is not None
    pygit2.settings.enable_fsync_gitdir(False)
    pygit2.settings.enable_strict_object_creation(False)
    pygit2.settings.enable_strict_hash_verification(False)
    pygit2.settings.cache_object_limit(pygit2.GIT_OBJECT_TREE, TREE_CACHE_LIMIT)


def available() -> bool:
    """True when pygit2 can be imported."""
    return pygit2 is not None


class Libgit2Peer:
    """One bare repository committed to through libgit2, batch by batch."""

    def __init__(self, path: Path) -> None:
        assert pygit2 is not None, "pygit2 is not installed (pip install '.[bench]')"
        tune()
        self.repo = pygit2.Repository(str(path))
        self.signature = pygit2.Signature("bench", "bench@localhost", 1_700_000_000, 0)

    @property
    def version(self) -> str:
        """The libgit2 and pygit2 versions, for the report."""
        assert pygit2 is not None
        return f"libgit2 {pygit2.LIBGIT2_VERSION} (pygit2 {pygit2.__version__})"

    def head_tree(self) -> str:
        """The tree id of ``main``."""
        return str(self.repo.references[MAIN].peel(pygit2.Commit).tree_id)

    def commit(self, workload: Workload) -> float:
        """Commit the workload's next batch on ``main``; the CPU seconds it took (the batch's making
        excluded, as for the engine)."""
        batch = workload.batch()
        cpu = time.process_time()
        repo = self.repo
        parent = repo.references[MAIN].peel(pygit2.Commit)
        root = parent.tree
        changes: dict[str, Any] = {}
        for edit in batch.edits:
            if isinstance(edit, Overwrite | Create):
                changes[edit.path] = repo.create_blob(edit.content.encode())
            elif isinstance(edit, Delete):
                changes[edit.path] = None
            elif isinstance(edit, Rename):
                changes[edit.path] = None
                changes[edit.new_path] = root[edit.path].id
        tree = self._write(root, changes)
        repo.create_commit(MAIN, self.signature, self.signature, batch.message, tree, [parent.id])
        cpu = time.process_time() - cpu
        workload.record(workload.expected(batch))
        return cpu

    def _write(self, tree: Any, changes: dict[str, Any]) -> Any:
        """The id of ``tree`` (None: a new folder) with ``changes`` applied, None when it ends up empty."""
        builder = self.repo.TreeBuilder(tree) if tree is not None else self.repo.TreeBuilder()
        below: dict[str, dict[str, Any]] = {}
        for path, blob in changes.items():
            head, sep, rest = path.partition("/")
            if sep:
                below.setdefault(head, {})[rest] = blob
            elif blob is None:
                builder.remove(head)
            else:
                builder.insert(head, blob, pygit2.GIT_FILEMODE_BLOB)
        for name, sub in below.items():
            old = builder.get(name)  # the entry's object: a Tree for a folder
            new = self._write(old if isinstance(old, pygit2.Tree) else None, sub)
            if new is None:
                if old is not None:
                    builder.remove(name)
            else:
                builder.insert(name, new, pygit2.GIT_FILEMODE_TREE)
        if len(builder) == 0:
            return None
        return builder.write()

    def close(self) -> None:
        """Let go of the repository."""
        self.repo.free()
