"""A link index of a repository's pages (SQLite), kept at one commit: the backlinks of a page read the index
and resolve only the links that may point to it, instead of parsing every page that mentions its name.

The index lives beside the repository's objects (``<repo>/wikiq-links.sqlite``, next to the text index,
``worker.git.textindex``) and, like it, records the commit it was last brought to; ``backlinks(snapshot,
target)`` first brings it to the snapshot's commit by comparing the two commits' trees (the cost follows
what changed: only the changed pages are parsed again), then answers exactly what
``engine.backlinks.find_backlinks`` answers (same links, same order, same lines and text).

What it holds, per page (``.md`` path) of the indexed commit: each page link outside code
(``engine.backlinks.parse_links``) with its position, line, source text, kind and path as written, and a
*key*: the file name, lower-cased and without ``.md``, that every file the link can resolve to has
(``link_key``); and per file, its key. Resolution itself depends on the other files of the wiki (a bare
name is ambiguous while two files have it), so it is not stored: it is done at read time, for the links
whose key is the target's only, against the files with that key (the only ones resolution can find for
such a link). A page added or deleted elsewhere therefore changes no link row.

A page its parse would take over the default costs (``engine.budget``) is kept as *costly* instead: a
read parses it then, under its own budget, when it mentions the target's name, as it would without the
index. A read brings the index forward itself when at most ``READ_CHANGES`` files changed since the
indexed commit; further behind (a large push), it answers from the pages and a child process brings the
index forward (``catch_up``).

Derived data, never trusted over git: the rows of a page carry its blob id and a read checks each against
the snapshot (a mismatch, a row SQLite cannot read, or an indexed commit git no longer has drop the index
file; it is rebuilt in the background, and reads answer from the pages meanwhile). Its size follows the
number of files and links of the head (one row each). Building it the first time parses every page that
holds a ``[`` once (seconds on 100 000 pages): ``build`` does it, run off the request path
(``worker.git.warmup``); until then ``backlinks`` answers None and the caller reads the pages. Several
processes may share a repository: SQLite's locks serialise the updates, each re-reads the indexed commit
inside its write transaction. Deleting the file is safe.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from worker.engine.backlinks import Found, parse_links
from worker.engine.budget import Budget, OverBudget, active
from worker.engine.markdown import FileIndex, Link
from worker.engine.markdown.links import resolve_markdown, resolve_wikilink
from worker.engine.mentions import is_page, link_needles
from worker.git.grep import iter_blobs
from worker.git.reader import ObjectReader
from worker.git.snapshot import READ_MANY_FROM
from worker.git.textindex import _changed

if TYPE_CHECKING:
    from worker.git.snapshot import Snapshot

FILE_NAME = "wikiq-links.sqlite"
FORMAT = "1"  # of the rows; an index of another format is rebuilt
CHUNK = 2000  # blobs read with one git cat-file
ANY_SIZE = 1 << 62  # every page is parsed, as the backlinks read parses it
READ_CHANGES = 2000  # files changed since the indexed commit that a read brings forward itself
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS links (
    path TEXT NOT NULL, blob TEXT NOT NULL, ord INTEGER NOT NULL, key TEXT NOT NULL,
    wikilink INTEGER NOT NULL, target TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS links_key ON links (key);
CREATE INDEX IF NOT EXISTS links_path ON links (path);
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, key TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS costly (path TEXT PRIMARY KEY, blob TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS files_key ON files (key);
"""


class Untrusted(Exception):
    """The index disagrees with git, or SQLite cannot read it: it is dropped and built again."""


class FarBehind(Exception):
    """More changed since the indexed commit than a read brings forward itself (``READ_CHANGES``)."""


def name_key(name: str) -> str:
    """A file name as keys compare it: lower-cased, without a final ``.md``."""
    lowered = name.lower()
    return lowered[:-3] if lowered.endswith(".md") else lowered


def link_key(link: Link, page: str) -> str | None:
    """The ``name_key`` of the file name of every file ``link`` (in ``page``) can resolve to, whatever the
    other files of the wiki (``markdown.links`` rules 1 and 2, with or without ``.md``, in any letter
    case); None when it resolves to nothing in any wiki."""
    if link.kind == "wikilink":
        body = link.path[1:] if link.path.startswith("/") else link.path
        if not body or any(segment in ("", ".", "..") for segment in body.split("/")):
            return None
        return name_key(body.rsplit("/", 1)[-1])
    if link.path.startswith("/"):
        joined = link.path[1:]
    else:
        joined = (page.rsplit("/", 1)[0] if "/" in page else "") + "/" + link.path
    segments: list[str] = []
    for segment in joined.split("/"):
        if segment == "..":
            if not segments:
                return None
            segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    return name_key(segments[-1] if segments else "")


def link_index(repo: ObjectReader) -> LinkIndex:
    """The link index of ``repo`` (it holds nothing in memory: one is as good as another)."""
    return LinkIndex(repo)


class LinkIndex:
    """The link index of one repository (see the module); thread-safe (a connection per call)."""

    def __init__(self, repo: ObjectReader) -> None:
        self.repo = repo
        self.path = Path(repo.path) / FILE_NAME

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")  # a cache: a torn index is rebuilt, never trusted
        db.executescript(_SCHEMA)
        return db

    def discard(self) -> None:
        """Delete the index (its file and SQLite's side files)."""
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.path}{suffix}").unlink()

    def indexed(self) -> str | None:
        """The commit the index holds, or None when it has none (or cannot be read: then it is dropped)."""
        if not self.path.exists():
            return None
        try:
            with contextlib.closing(self._connect()) as db:
                return _indexed(db)
        except sqlite3.OperationalError:
            return None
        except sqlite3.DatabaseError:
            self.discard()
            return None

    def build(self, commit: str) -> None:
        """Bring the index to ``commit`` now (from scratch when it holds nothing or cannot be trusted)."""
        for _ in range(2):
            try:
                with contextlib.closing(self._connect()) as db:
                    self._bring_to(db, commit)
                return
            except sqlite3.OperationalError:
                raise  # locked by another process's update, say: nothing to say the file is bad
            except (sqlite3.DatabaseError, Untrusted):
                self.discard()

    def backlinks(self, snapshot: Snapshot, target: str) -> list[Found] | None:
        """Every link at ``snapshot`` that resolves to ``target``, as ``find_backlinks`` answers them; None
        when the index cannot answer (not built yet, a snapshot git cannot read on its own, or the index
        was found untrustworthy and dropped): the caller reads the pages."""
        if snapshot.commit is None or self.repo.pending() or self.indexed() is None:
            return None
        key = name_key(target.rsplit("/", 1)[-1])
        try:
            with contextlib.closing(self._connect()) as db:
                self._bring_to(db, snapshot.commit, READ_CHANGES)
                rows = db.execute(
                    "SELECT path, blob, ord, wikilink, target, line, text FROM links WHERE key = ?", (key,)
                ).fetchall()
                named = [row[0] for row in db.execute("SELECT path FROM files WHERE key = ?", (key,))]
                costly = db.execute("SELECT path, blob FROM costly").fetchall()
            rows += _costly_rows(snapshot, target, key, costly)
            return _resolved(snapshot, target, sorted(rows), named)
        except FarBehind:
            catch_up(self.repo, snapshot.commit)
            return None
        except sqlite3.OperationalError:
            return None  # busy (another process's long update) or unreadable now: read the pages
        except (sqlite3.DatabaseError, Untrusted):
            self.discard()
            return None

    def _bring_to(self, db: sqlite3.Connection, commit: str, most: int | None = None) -> None:
        """Bring the index to ``commit``; ``FarBehind`` when more than ``most`` files changed since (found
        before taking the write lock, so a read never waits for a long update under way)."""
        old = _indexed(db)
        if old == commit:
            return
        if most is not None and len(self._changes(old, commit, most + 1)) > most:
            raise FarBehind(f"over {most} files changed since {old}")
        db.execute("BEGIN IMMEDIATE")
        try:
            old = _indexed(db)
            if old != commit:
                if old is None:
                    db.execute("DELETE FROM links")  # rows of another format
                    db.execute("DELETE FROM files")
                    db.execute("DELETE FROM costly")
                self._apply(db, self._changes(old, commit))
                db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (FORMAT,))
                db.execute("INSERT OR REPLACE INTO meta VALUES ('commit', ?)", (commit,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _changes(self, old: str | None, commit: str, most: int | None = None) -> list[tuple[str, str | None]]:
        """The files changed from ``old`` (None: nothing) to ``commit``, the first ``most`` of them."""
        if old is not None and not self.repo.has_object(old):
            raise Untrusted(f"the indexed commit {old} is not in the repository")
        old_tree = self.repo.tree_of(old) if old is not None else None
        return list(itertools.islice(_changed(self.repo, old_tree, self.repo.tree_of(commit)), most))

    def _apply(self, db: sqlite3.Connection, changes: Iterable[tuple[str, str | None]]) -> None:
        pending: list[tuple[str, str | None]] = []
        for change in changes:
            path, oid = change
            db.execute("DELETE FROM files WHERE path = ?", (path,))
            if oid is not None:
                db.execute("INSERT INTO files VALUES (?, ?)", (path, name_key(path.rsplit("/", 1)[-1])))
            if is_page(path):
                pending.append(change)
            if len(pending) >= CHUNK:
                self._write(db, pending)
                pending = []
        self._write(db, pending)

    def _write(self, db: sqlite3.Connection, changes: list[tuple[str, str | None]]) -> None:
        db.executemany("DELETE FROM links WHERE path = ?", [(path,) for path, _ in changes])
        db.executemany("DELETE FROM costly WHERE path = ?", [(path,) for path, _ in changes])
        added = [(path, oid) for path, oid in changes if oid is not None]
        rows = []
        oids = [oid for _, oid in added]
        if len(oids) < READ_MANY_FROM:  # a commit's few pages: from the packs in process
            blobs: Iterable[bytes | None] = [self.repo.read_blob(oid) for oid in oids]
        else:
            blobs = iter_blobs(self.repo.path, oids, ANY_SIZE)
        for (path, oid), data in zip(added, blobs, strict=True):
            if data is None or b"[" not in data:  # every link form starts with a bracket
                continue
            try:
                with active(Budget()):  # each page within the default costs, whoever brings the index
                    links = parse_links(data)
            except OverBudget:  # parsed at read time instead, when it mentions the name asked for
                db.execute("INSERT INTO costly VALUES (?, ?)", (path, oid))
                continue
            rows += [(path, oid, *row) for row in _link_rows(links, path)]
        db.executemany("INSERT INTO links VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _indexed(db: sqlite3.Connection) -> str | None:
    found = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('commit', 'format')").fetchall())
    return found.get("commit") if found.get("format") == FORMAT else None


Row = tuple[str, str, int, int, str, int, str]  # path, blob, ord, wikilink, link path, line, text


def _link_rows(links: list[Link], page: str) -> Iterator[tuple[int, str, int, str, int, str]]:
    """``(ord, key, wikilink, link path, line, text)`` of each of ``links`` (of ``page``) that may resolve."""
    for ord_, link in enumerate(links):
        key = link_key(link, page)
        if key is not None:
            yield ord_, key, link.kind == "wikilink", link.path, link.line, link.text


def _costly_rows(snapshot: Snapshot, target: str, key: str, costly: list[tuple[str, str]]) -> list[Row]:
    """The rows of key ``key`` of the pages too costly to parse when indexed, for those among them that
    mention the target's name (``mentions.link_needles``, as ``find_backlinks`` picks its pages), parsed
    now under the read's budget (``OverBudget`` when the read cannot afford one, as without the index)."""
    needles = link_needles([target])
    wanted = None if needles is None else [needle.encode() for needle in needles]
    rows: list[Row] = []
    for path, blob in costly:
        version = snapshot.version(path)
        if version != blob:
            if version is None:
                continue
            raise Untrusted(f"the index holds {blob} for {path!r}, git {version}")
        data = snapshot.read(path)
        if wanted is not None and not any(needle in data.lower() for needle in wanted):
            continue
        for ord_, found, wikilink, link_path, line, text in _link_rows(parse_links(data), path):
            if found == key:
                rows.append((path, blob, ord_, wikilink, link_path, line, text))
    return rows


def _resolved(snapshot: Snapshot, target: str, rows: list[Row], named: list[str]) -> list[Found]:
    """The rows' links that resolve to ``target`` at ``snapshot``, each page's blob checked against git.

    ``named``: the files whose name has the target's key. Every file a link of that key may resolve to has
    it, so resolving against those files alone answers what resolving against every file would."""
    files = FileIndex(path for path in named if snapshot.version(path) is not None)
    checked: dict[str, bool] = {}
    found = []
    for path, blob, _, wikilink, link_path, line, text in rows:
        present = checked.get(path)
        if present is None:
            version = snapshot.version(path)
            if version is not None and version != blob:
                raise Untrusted(f"the index holds {blob} for {path!r}, git {version}")
            present = checked[path] = version is not None
        if not present:
            continue
        resolution = (
            resolve_wikilink(link_path, files) if wikilink else resolve_markdown(link_path, path, files)
        )
        if resolution.path == target:
            found.append(Found(path, blob, line, text))
    return found


_CATCHING_UP: dict[Path, threading.Thread] = {}
_CATCHING_UP_LOCK = threading.Lock()


def catch_up(repo: ObjectReader, commit: str) -> None:
    """Bring ``repo``'s link index to ``commit`` in the background (in a child process), unless that is
    under way already: what a read does when the index is far behind."""
    with _CATCHING_UP_LOCK:
        running = _CATCHING_UP.get(repo.path)
        if running is not None and running.is_alive():
            return
        thread = _CATCHING_UP[repo.path] = threading.Thread(
            target=_quietly, args=(repo.path, commit), name=f"link index {repo.path.name}", daemon=True
        )
    thread.start()


def _quietly(path: Path, commit: str) -> None:
    with contextlib.suppress(subprocess.CalledProcessError, OSError):  # a cache: reads go on without it
        _run_child(path, commit)


def build_in_child(repo: ObjectReader, commit: str) -> None:
    """``LinkIndex.build`` in a child process (``python -m worker.git.linkindex <repo> <commit>``): parsing
    every page of a large wiki is seconds of pure Python, which in this process would hold the GIL the
    requests need."""
    _run_child(repo.path, commit)


def _run_child(path: Path, commit: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "worker.git.linkindex", str(path), commit],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )


def _main(argv: list[str]) -> None:
    from worker.git.repo import WikiRepo

    repo = WikiRepo(Path(argv[0]))
    try:
        LinkIndex(repo).build(argv[1])
    finally:
        repo.close()


if __name__ == "__main__":
    _main(sys.argv[1:])
