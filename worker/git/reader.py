"""Reading a repository's objects: what ``Snapshot``, search and the text index need of a repository.

``ObjectReader`` is the reading half of ``worker.git.repo.WikiRepo`` (after dulwich's ``BaseObjectStore``):
parsed trees, blob bytes, a commit's root tree, the head of ``main``, and whether an object is still only
in memory (a commit group's, not on disk yet, so ``git`` itself cannot read it). The modules that only read
depend on this protocol and never on the repository that writes, so nothing imports back into ``repo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from worker.git.objects import Tree


class ObjectReader(Protocol):
    """The objects of one bare repository, read-only; ``WikiRepo`` is one."""

    @property
    def path(self) -> Path:
        """The bare repository (``git --git-dir``)."""
        ...

    def head(self) -> str | None:
        """The commit ``main`` points at, None when unborn."""
        ...

    def tree(self, tree: str) -> Tree:
        """Tree ``tree``, parsed."""
        ...

    def tree_of(self, commit: str) -> str:
        """The root tree id of ``commit``."""
        ...

    def read_blob(self, oid: str) -> bytes:
        """The bytes of blob ``oid``."""
        ...

    def has_object(self, oid: str) -> bool:
        """True when object ``oid`` is in the repository."""
        ...

    def pending(self, oid: str | None = None) -> bool:
        """True while objects are held in memory only (``oid``: that object is one of them)."""
        ...
