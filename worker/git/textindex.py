"""A text index of a repository's pages (SQLite FTS5, trigram tokenizer), kept at one commit: literal search
of a large wiki reads only the pages that may match.

The index lives beside the repository's objects (``<repo>/wikiq-text.sqlite``) and records the commit it
was last brought to. ``candidates(commit, needle, prefix, after)`` first brings it to ``commit`` — by
comparing the two commits' trees (equal subtree ids are skipped, so the cost follows what changed, not the
wiki's size) and replacing the rows of the changed paths in one transaction — then answers the paths whose
text holds ``needle`` (ASCII case ignored: a superset the caller narrows, case-sensitive or not), in path
order. Building it the first time reads every page once (seconds on 100 000 pages); it is done in the
background, and until it is ready ``candidates`` answers None (the caller then greps). A small wiki (under
``INDEX_FROM_BYTES`` of packed objects) is never indexed: grepping it is as fast.

Files git takes for binary (a NUL byte in their first 8000 bytes) are not indexed, like ``git grep -I``.
Several processes may share a repository (one data directory): SQLite's locks serialise the updates, each
re-reads the indexed commit inside its write transaction. The index is a cache: deleting the file is safe.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from worker.git.grep import SEARCH_FILE_BYTES, iter_blobs
from worker.git.objects import TREE_MODE

if TYPE_CHECKING:
    from worker.git.reader import ObjectReader

FILE_NAME = "wikiq-text.sqlite"
MIN_NEEDLE = 3  # the trigram tokenizer finds nothing shorter
INDEX_FROM_BYTES = 4 * 1024 * 1024  # packed objects of a wiki worth indexing (~10 000 pages and up)
BINARY_PROBE = 8000
CHUNK = 2000  # blobs read with one git cat-file
GITLINK_MODE = 0o160000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS pages USING fts5(path UNINDEXED, body, tokenize='trigram');
CREATE TABLE IF NOT EXISTS paths (path TEXT PRIMARY KEY, row INTEGER NOT NULL);
"""


def _phrase(needle: str) -> str:
    """``needle`` as an FTS5 phrase: with the trigram tokenizer, the texts holding it, ASCII case ignored
    (a LIKE with an ESCAPE clause would not use the index)."""
    return '"' + needle.replace('"', '""') + '"'


def _changed(
    repo: ObjectReader, old: str | None, new: str | None, folder: str = ""
) -> Iterator[tuple[str, str | None]]:
    """``(path, blob id or None when gone)`` for every file that differs between trees ``old`` and
    ``new``."""
    if old == new:
        return
    before = dict(repo.tree(old).items()) if old is not None else {}
    after = dict(repo.tree(new).items()) if new is not None else {}
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        path = folder + name
        was_tree = was is not None and was[0] == TREE_MODE
        now_tree = now is not None and now[0] == TREE_MODE
        if was_tree or now_tree:
            yield from _changed(
                repo, was[1] if was_tree and was else None, now[1] if now_tree and now else None, path + "/"
            )
        if was is not None and not was_tree and (now is None or now_tree):
            yield path, None
        if now is not None and not now_tree and now[0] != GITLINK_MODE:
            yield path, now[1]


class TextIndex:
    """The text index of one repository (see the module); thread-safe."""

    def __init__(self, repo: ObjectReader) -> None:
        self.repo = repo
        self.path = Path(repo.path) / FILE_NAME
        self._lock = threading.Lock()
        self._building: threading.Thread | None = None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")  # a cache: a torn index is rebuilt, never trusted (see meta)
        db.executescript(_SCHEMA)
        return db

    def indexed(self) -> str | None:
        """The commit the index holds, or None when it has none yet."""
        if not self.path.exists():
            return None
        with contextlib.closing(self._connect()) as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'commit'").fetchone()
        return None if row is None else str(row[0])

    def candidates(self, commit: str, needle: str, prefix: str = "", after: str = "") -> list[str] | None:
        """Paths at ``commit`` under ``prefix``, from ``after`` on, whose text may hold ``needle``, in path
        order; None when the index cannot answer (a short needle, or not built yet: the caller greps)."""
        if len(needle) < MIN_NEEDLE:
            return None
        if self.indexed() is None:
            if self._packed_bytes() >= INDEX_FROM_BYTES:
                self._build_in_background(commit)
            return None
        with contextlib.closing(self._connect()) as db:
            self._bring_to(db, commit)
            rows = db.execute(
                "SELECT path FROM pages WHERE body MATCH ? AND path >= ? AND path >= ? ORDER BY path",
                (_phrase(needle), prefix, after),
            ).fetchall()
        return [row[0] for row in rows if row[0].startswith(prefix)]

    def _packed_bytes(self) -> int:
        total = 0
        with contextlib.suppress(OSError):
            for entry in (Path(self.repo.path) / "objects" / "pack").iterdir():
                if entry.suffix == ".pack":
                    total += entry.stat().st_size
        return total

    def build(self, commit: str) -> None:
        """Bring the index to ``commit`` now (from scratch when it holds nothing)."""
        with contextlib.closing(self._connect()) as db:
            self._bring_to(db, commit)

    def _build_in_background(self, commit: str) -> None:
        with self._lock:
            if self._building is None or not self._building.is_alive():
                self._building = threading.Thread(
                    target=self.build, args=(commit,), name=f"text index {self.repo.path.name}", daemon=True
                )
                self._building.start()

    def _bring_to(self, db: sqlite3.Connection, commit: str) -> None:
        row = db.execute("SELECT value FROM meta WHERE key = 'commit'").fetchone()
        if row is not None and row[0] == commit:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'commit'").fetchone()
            if row is None or row[0] != commit:
                old_tree = self.repo.tree_of(row[0]) if row is not None else None
                self._apply(db, _changed(self.repo, old_tree, self.repo.tree_of(commit)))
                db.execute("INSERT OR REPLACE INTO meta VALUES ('commit', ?)", (commit,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _apply(self, db: sqlite3.Connection, changes: Iterator[tuple[str, str | None]]) -> None:
        pending: list[tuple[str, str | None]] = []
        for change in changes:
            pending.append(change)
            if len(pending) >= CHUNK:
                self._write(db, pending)
                pending = []
        self._write(db, pending)

    def _write(self, db: sqlite3.Connection, changes: list[tuple[str, str | None]]) -> None:
        for path, _ in changes:
            row = db.execute("SELECT row FROM paths WHERE path = ?", (path,)).fetchone()
            if row is not None:
                db.execute("DELETE FROM pages WHERE rowid = ?", (row[0],))
                db.execute("DELETE FROM paths WHERE path = ?", (path,))
        added = [(path, oid) for path, oid in changes if oid is not None]
        blobs = iter_blobs(self.repo.path, [oid for _, oid in added], SEARCH_FILE_BYTES)
        for (path, _), data in zip(added, blobs, strict=True):
            if data is None or b"\x00" in data[:BINARY_PROBE]:
                continue
            cursor = db.execute(
                "INSERT INTO pages (path, body) VALUES (?, ?)", (path, data.decode("utf-8", "replace"))
            )
            db.execute("INSERT INTO paths VALUES (?, ?)", (path, cursor.lastrowid))
