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

What a search pays for: it brings the index forward itself only over at most ``READ_CHANGES`` changed
files holding at most ``READ_BYTES`` of text, within its own budget (``worker.engine.budget``: the bytes
taken in count as scanned, the CPU is checked after each page); further behind, it answers None (the
caller greps, within the same budget) and a thread brings the index forward in the background, where
SQLite's work runs without the GIL. A search whose budget runs out while bringing the index forward is
``OverBudget`` (its update is rolled back) and leaves the update to that thread too, so the next search
finds it done or under way and never starts it over.

What it holds: each indexed path once (``files``: an id, the path and a hash of it to find it by), and
per path its text in the FTS5 table under that id. Its size is the pages' text, which phrase matching
reads back, plus FTS5's trigram index of it (every trigram's positions: several times the text, the most
for text whose trigrams all differ), plus one row per path; nothing grows with how often a page is read.
Files git takes for binary (a NUL byte in their first 8000 bytes) and files over ``SEARCH_FILE_BYTES``
(which search never reads) are not indexed, like ``git grep -I``.

Several processes may share a repository (one data directory): SQLite's locks serialise the updates, each
re-reads the indexed commit inside its write transaction. The index is a cache: deleting the file is safe,
and a file of another format (``FORMAT``) is emptied and built again.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from worker.engine.budget import Budget, OverBudget, current
from worker.git.grep import SEARCH_FILE_BYTES, iter_blobs
from worker.git.objects import TREE_MODE

if TYPE_CHECKING:
    from worker.git.reader import ObjectReader

FILE_NAME = "wikiq-text.sqlite"
FORMAT = 2  # of the tables (SQLite's user_version); a file of another format is emptied and built again
MIN_NEEDLE = 3  # the trigram tokenizer finds nothing shorter
INDEX_FROM_BYTES = 4 * 1024 * 1024  # packed objects of a wiki worth indexing (~10 000 pages and up)
READ_CHANGES = 2000  # files changed since the indexed commit that a search brings forward itself
READ_BYTES = 256 * 1024  # ... and bytes of text among them
BINARY_PROBE = 8000
CHUNK = 2000  # blobs read with one git cat-file
GITLINK_MODE = 0o160000
WAL_BYTES = 4 * 1024 * 1024  # an index's write-ahead log is cut back to this once checkpointed
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, hash INTEGER NOT NULL, path TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS files_hash ON files (hash);
CREATE VIRTUAL TABLE IF NOT EXISTS pages USING fts5(body, tokenize='trigram');
"""


class FarBehind(Exception):
    """More changed since the indexed commit than a read brings forward itself, or an update is under way
    in the background: the read answers without the index."""


class Reading:
    """A read bringing an index forward: the budget it runs under, and the bytes of changed files it may
    still take in (``FarBehind`` past them)."""

    def __init__(self, spend: Budget, most: int, where: str) -> None:
        self.spend = spend
        self.most = most
        self.left = most
        self.where = where

    def take(self, count: int) -> None:
        """Take in ``count`` more bytes: charged to the budget as scanned, ``FarBehind`` past ``most``."""
        self.left -= count
        if self.left < 0:
            raise FarBehind(f"over {self.most} bytes changed since the indexed commit")
        self.spend.scan(count, self.where)


def open_index(path: Path, schema: str, version: int) -> sqlite3.Connection:
    """A connection to the index file at ``path`` holding the tables of ``schema`` (statements without a
    ``;`` inside); a file whose format (``PRAGMA user_version``) is not ``version`` has its tables dropped
    first, so it is built again from nothing. A cache: WAL without fsync, the log cut back to
    ``WAL_BYTES``."""
    db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")  # a torn index is rebuilt, never trusted
        db.execute(f"PRAGMA journal_size_limit={WAL_BYTES}")
        if _format(db) != version:
            db.execute("BEGIN IMMEDIATE")
            try:
                if _format(db) != version:
                    _drop_tables(db)
                    for statement in schema.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version={int(version)}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
    except BaseException:
        db.close()
        raise
    return db


def _format(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _drop_tables(db: sqlite3.Connection) -> None:
    """Drop every table (virtual ones first: dropping one drops its shadow tables)."""
    tables = db.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    tables.sort(key=lambda table: not str(table[1]).upper().startswith("CREATE VIRTUAL"))
    for name, _ in tables:
        db.execute('DROP TABLE IF EXISTS "{}"'.format(name.replace('"', '""')))


def path_hash(path: str) -> int:
    """What an index finds a path by (a signed 64-bit hash, so the path itself is stored once)."""
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big", signed=True)


def file_id(db: sqlite3.Connection, path: str) -> int | None:
    """The id of ``path`` in the index's ``files`` table, or None when it has none."""
    row = db.execute("SELECT id FROM files WHERE hash = ? AND path = ?", (path_hash(path), path)).fetchone()
    return None if row is None else int(row[0])


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


class IndexFile:
    """The SQLite file of one of a repository's indexes (``<repo>/<name>``, its tables ``schema`` in format
    ``version``: see ``open_index``), and the commit it holds. The text index and the link index are
    both one."""

    def __init__(self, repo: ObjectReader, name: str, schema: str, version: int) -> None:
        self.repo = repo
        self.path = Path(repo.path) / name
        self._schema = schema
        self._version = version

    def _connect(self) -> sqlite3.Connection:
        return open_index(self.path, self._schema, self._version)

    def discard(self) -> None:
        """Delete the index (its file and SQLite's side files)."""
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.path}{suffix}").unlink()

    def indexed(self) -> str | None:
        """The commit the index holds, or None when it has none yet."""
        if not self.path.exists():
            return None
        with contextlib.closing(self._connect()) as db:
            return _indexed(db)


class TextIndex(IndexFile):
    """The text index of one repository (see the module); thread-safe."""

    def __init__(self, repo: ObjectReader) -> None:
        super().__init__(repo, FILE_NAME, _SCHEMA, FORMAT)
        self._lock = threading.Lock()
        self._building: threading.Thread | None = None

    def candidates(self, commit: str, needle: str, prefix: str = "", after: str = "") -> list[str] | None:
        """Paths at ``commit`` under ``prefix``, from ``after`` on, whose text may hold ``needle``, in path
        order; None when the index cannot answer (a short needle, not built yet, too far behind to bring
        forward within this read, or unreadable: the caller greps). Bringing the index forward is charged
        to the budget in force; ``OverBudget`` when it runs out (see the module)."""
        if len(needle) < MIN_NEEDLE:
            return None
        try:
            if self.indexed() is None:
                if self._packed_bytes() >= INDEX_FROM_BYTES:
                    self._build_in_background(commit)
                return None
            with contextlib.closing(self._connect()) as db:
                try:
                    self._bring_to(
                        db, commit, Reading(current(), READ_BYTES, "bringing the search index forward")
                    )
                except OverBudget:
                    self._build_in_background(commit)  # the read cannot afford it: the background goes on
                    raise
                rows = db.execute(
                    "SELECT path FROM files WHERE id IN (SELECT rowid FROM pages WHERE pages MATCH ?) "
                    "AND path >= ? AND path >= ? ORDER BY path",
                    (_phrase(needle), prefix, after),
                ).fetchall()
        except FarBehind:
            self._build_in_background(commit)
            return None
        except sqlite3.OperationalError:
            return None  # busy (another process's long update) or unreadable now: grep
        except sqlite3.DatabaseError:
            self.discard()  # not a database any more: built again from nothing
            return None
        return [row[0] for row in rows if row[0].startswith(prefix)]

    def _packed_bytes(self) -> int:
        total = 0
        with contextlib.suppress(OSError):
            for entry in (Path(self.repo.path) / "objects" / "pack").iterdir():
                if entry.suffix == ".pack":
                    total += entry.stat().st_size
        return total

    def build(self, commit: str) -> None:
        """Bring the index to ``commit`` now, whatever changed (from scratch when it holds nothing)."""
        with contextlib.closing(self._connect()) as db:
            self._bring_to(db, commit)

    def updating(self) -> bool:
        """True while this object's background update runs."""
        with self._lock:
            return self._building is not None and self._building.is_alive()

    def _build_in_background(self, commit: str) -> None:
        with self._lock:
            if self._building is None or not self._building.is_alive():
                self._building = threading.Thread(
                    target=self.build, args=(commit,), name=f"text index {self.repo.path.name}", daemon=True
                )
                self._building.start()

    def _bring_to(self, db: sqlite3.Connection, commit: str, reading: Reading | None = None) -> None:
        """Bring the index to ``commit`` (``advance``; a read is refused while an update runs in the
        background)."""
        advance(
            db,
            commit,
            ("pages", "files"),
            lambda old: self._changes(old, commit),
            lambda changes: self._apply(db, changes, reading),
            reading,
            self.updating,
        )

    def _changes(self, old: str | None, commit: str) -> Iterator[tuple[str, str | None]]:
        old_tree = self.repo.tree_of(old) if old is not None else None
        return _changed(self.repo, old_tree, self.repo.tree_of(commit))

    def _apply(
        self, db: sqlite3.Connection, changes: Iterable[tuple[str, str | None]], reading: Reading | None
    ) -> None:
        pending: list[tuple[str, str | None]] = []
        for change in changes:
            pending.append(change)
            if len(pending) >= CHUNK:
                self._write(db, pending, reading)
                pending = []
        self._write(db, pending, reading)

    def _write(
        self, db: sqlite3.Connection, changes: list[tuple[str, str | None]], reading: Reading | None
    ) -> None:
        for path, _ in changes:
            found = file_id(db, path)
            if found is not None:
                db.execute("DELETE FROM pages WHERE rowid = ?", (found,))
                db.execute("DELETE FROM files WHERE id = ?", (found,))
        added = [(path, oid) for path, oid in changes if oid is not None]
        blobs = iter_blobs(self.repo.path, [oid for _, oid in added], SEARCH_FILE_BYTES)
        try:
            for (path, _), data in zip(added, blobs, strict=True):
                if reading is not None:  # a file too large to index was read past: over what a read takes
                    reading.take(SEARCH_FILE_BYTES if data is None else len(data))
                if data is None or b"\x00" in data[:BINARY_PROBE]:
                    continue
                cursor = db.execute("INSERT INTO files (hash, path) VALUES (?, ?)", (path_hash(path), path))
                db.execute(
                    "INSERT INTO pages (rowid, body) VALUES (?, ?)",
                    (cursor.lastrowid, data.decode("utf-8", "replace")),
                )
                if reading is not None:
                    reading.spend.check(reading.where)
        finally:
            blobs.close()


def advance(
    db: sqlite3.Connection,
    commit: str,
    tables: tuple[str, ...],
    changes: Callable[[str | None], Iterable[tuple[str, str | None]]],
    apply: Callable[[Iterable[tuple[str, str | None]]], None],
    reading: Reading | None,
    busy: Callable[[], bool],
) -> None:
    """Bring an index (the text index's or the link index's) from the commit it holds to ``commit``:
    ``apply`` the files ``changes(old)`` names (``tables`` emptied first when it holds none), in one
    write transaction that re-reads where the index stands. A read (``reading``) gets ``FarBehind``
    instead when ``busy()`` (an update under way elsewhere) or more than ``READ_CHANGES`` files changed,
    both found before taking the write lock, so a read never waits for a long update."""
    old = _indexed(db)
    if old == commit:
        return
    if reading is not None:
        if busy():
            raise FarBehind("the index is being brought forward in the background")
        if len(list(itertools.islice(changes(old), READ_CHANGES + 1))) > READ_CHANGES:
            raise FarBehind(f"over {READ_CHANGES} files changed since {old}")
    db.execute("BEGIN IMMEDIATE")
    try:
        old = _indexed(db)
        if old != commit:
            if old is None:
                for table in tables:
                    db.execute(f"DELETE FROM {table}")
            apply(changes(old))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('commit', ?)", (commit,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _indexed(db: sqlite3.Connection) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = 'commit'").fetchone()
    return None if row is None else str(row[0])
