"""A link index of a repository's pages (SQLite), kept at one commit: the backlinks of a page read the index
and resolve only the links that may point to it, instead of parsing every page that mentions its name.

The index lives beside the repository's objects (``<repo>/wikiq-links.sqlite``, next to the text index,
``worker.git.textindex``) and, like it, records the commit it was last brought to; ``backlinks(snapshot,
target)`` first brings it to the snapshot's commit by comparing the two commits' trees (the cost follows
what changed: only the changed pages are parsed again), then answers exactly what
``engine.backlinks.find_backlinks`` answers (same links, same order, same lines and text).

What it holds: per file of the indexed commit, one row (``files``): its path, stored once (found by a
hash of it), its *key* (``link_key``), its blob id, and whether it is *costly*; per page (``.md`` path),
each page link outside code (``engine.backlinks.parse_links``) with the id of its page, its position,
line, source text, kind and path as written, and its key: the file name, lower-cased and without ``.md``,
that every file the link can resolve to has. Resolution itself depends on the other files of the wiki (a
bare name is ambiguous while two files have it), so it is not stored: it is done at read time, for the
links whose key is the target's only, against the files with that key (the only ones resolution can find
for such a link). A page added or deleted elsewhere therefore changes no link row.

Size: a page's link rows may take at most ``ROWS_FACTOR`` times its bytes plus ``ROWS_FREE``, each link
counted as ``row_bytes``: ``ROW_BYTES`` beside the strings it stores (its key twice, its path as written,
its text), those with a quarter more. A page over that, or one whose parse would take over the costs it is
parsed under (``engine.budget``), is kept as *costly* instead, with no link row: a read parses it then,
under its own budget, when it mentions the target's name, as it would without the index. A page with more
``[`` than it may have link rows is costly without being parsed (every link starts with one). So the
index is at most ``ROWS_FACTOR`` times the bytes of the wiki's pages, plus ``ROWS_FREE`` per page and a
row per file (its path, key and blob id).

What a read pays for: it brings the index forward itself only over at most ``textindex.READ_CHANGES`` changed
files holding at most ``READ_BYTES`` of pages, inside its own budget (the budget in force: the pages' bytes
count as scanned, their parses as the read's CPU); further behind (a large push), it answers from the pages
and a child process brings the index forward (``catch_up``), and reads answer from the pages until it is done.
A read whose budget runs out while bringing the index forward is ``OverBudget`` (its update is rolled back)
and hands the update to that child too, so the next read finds it done or under way and never starts it over.
The child parses each page under a default budget of its own.

Derived data, never trusted over git: a page's blob id is checked against the snapshot by a read of its
rows (a mismatch, a row SQLite cannot read, or an indexed commit git no longer has drop the index
file; it is rebuilt in the background, and reads answer from the pages meanwhile). Building it the first
time parses every page that holds a ``[`` once (seconds on 100 000 pages): ``build`` does it, run off the
request path (``worker.git.warmup``); until then ``backlinks`` answers None and the caller reads the pages.
Several processes may share a repository: SQLite's locks serialise the updates, each re-reads the indexed
commit inside its write transaction. Deleting the file is safe, and a file of another format (``FORMAT``)
is emptied and built again.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from worker.engine.backlinks import Found, parse_links
from worker.engine.budget import Budget, OverBudget, active, checked, current
from worker.engine.markdown import FileIndex, Link
from worker.engine.markdown.links import resolve_markdown, resolve_wikilink
from worker.engine.mentions import is_page, link_needles
from worker.git.grep import iter_blobs
from worker.git.reader import ObjectReader
from worker.git.snapshot import READ_MANY_FROM
from worker.git.textindex import (
    FarBehind,
    IndexFile,
    Reading,
    _changed,
    advance,
    file_id,
    path_hash,
)

if TYPE_CHECKING:
    from worker.git.snapshot import Snapshot

FILE_NAME = "wikiq-links.sqlite"
FORMAT = 2  # of the tables (SQLite's user_version); a file of another format is emptied and built again
CHUNK = 2000  # blobs read with one git cat-file
ANY_SIZE = 1 << 62  # every page is parsed, as the backlinks read parses it
READ_BYTES = 512 * 1024  # ... and bytes of pages among them
ROW_BYTES = 48  # what one link row takes beside its strings: ids, numbers, its entry in links_key
ROWS_FACTOR = 8  # a page's link rows take at most this many times its bytes ...
ROWS_FREE = 512  # ... plus this many bytes, however short the page
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, hash INTEGER NOT NULL, path TEXT NOT NULL, key TEXT NOT NULL,
    blob TEXT NOT NULL, costly INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_hash ON files (hash);
CREATE INDEX IF NOT EXISTS files_key ON files (key);
CREATE INDEX IF NOT EXISTS files_costly ON files (costly) WHERE costly = 1;
CREATE TABLE IF NOT EXISTS links (
    file INTEGER NOT NULL, ord INTEGER NOT NULL, key TEXT NOT NULL, wikilink INTEGER NOT NULL,
    target TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY (file, ord)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_key ON links (key);
"""


class Untrusted(Exception):
    """The index disagrees with git, or SQLite cannot read it: it is dropped and built again."""


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


class LinkIndex(IndexFile):
    """The link index of one repository (see the module); thread-safe (a connection per call)."""

    def __init__(self, repo: ObjectReader) -> None:
        super().__init__(repo, FILE_NAME, _SCHEMA, FORMAT)

    def indexed(self) -> str | None:
        """The commit the index holds, or None when it has none (or cannot be read: then it is dropped)."""
        try:
            return super().indexed()
        except sqlite3.OperationalError:
            return None
        except sqlite3.DatabaseError:
            self.discard()
            return None

    def build(self, commit: str) -> None:
        """Bring the index to ``commit`` now, whatever changed (from scratch when it holds nothing or cannot
        be trusted), each page parsed under a default budget of its own."""
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
        when the index cannot answer (not built yet, a snapshot git cannot read on its own, too far behind
        to bring forward within this read, or found untrustworthy and dropped): the caller reads the
        pages. Bringing the index forward and parsing its costly pages are charged to the budget in force;
        ``OverBudget`` when it runs out (see the module)."""
        if snapshot.commit is None or self.repo.pending() or self.indexed() is None:
            return None
        key = name_key(target.rsplit("/", 1)[-1])
        try:
            with contextlib.closing(self._connect()) as db:
                reading = Reading(current(), READ_BYTES, "bringing the link index forward")
                try:
                    self._bring_to(db, snapshot.commit, reading)
                except OverBudget:
                    catch_up(self.repo, snapshot.commit)  # the read cannot afford it: the child goes on
                    raise
                rows = db.execute(
                    "SELECT files.path, files.blob, ord, wikilink, target, line, text "
                    "FROM links JOIN files ON files.id = links.file WHERE links.key = ?",
                    (key,),
                ).fetchall()
                named = [row[0] for row in db.execute("SELECT path FROM files WHERE key = ?", (key,))]
                costly = db.execute("SELECT path, blob FROM files WHERE costly = 1").fetchall()
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

    def _bring_to(self, db: sqlite3.Connection, commit: str, reading: Reading | None = None) -> None:
        """Bring the index to ``commit`` (``textindex.advance``; a read is refused while a child process
        brings it forward), charging the changed pages to a read's budget."""
        advance(
            db,
            commit,
            ("links", "files"),
            lambda old: self._changes(old, commit),
            lambda changes: self._apply(db, changes, reading),
            reading,
            lambda: catching_up(self.repo),
        )

    def _changes(self, old: str | None, commit: str) -> Iterator[tuple[str, str | None]]:
        """The files changed from ``old`` (None: nothing) to ``commit``."""
        if old is not None and not self.repo.has_object(old):
            raise Untrusted(f"the indexed commit {old} is not in the repository")
        old_tree = self.repo.tree_of(old) if old is not None else None
        return _changed(self.repo, old_tree, self.repo.tree_of(commit))

    def _apply(
        self, db: sqlite3.Connection, changes: Iterable[tuple[str, str | None]], reading: Reading | None
    ) -> None:
        pending: list[tuple[int, str, str]] = []  # (file id, path, blob id) of the pages to parse
        for path, oid in changes:
            found = file_id(db, path)
            if found is not None:
                db.execute("DELETE FROM links WHERE file = ?", (found,))
                db.execute("DELETE FROM files WHERE id = ?", (found,))
            if oid is None:
                continue
            key = name_key(path.rsplit("/", 1)[-1])
            cursor = db.execute(
                "INSERT INTO files (hash, path, key, blob, costly) VALUES (?, ?, ?, ?, 0)",
                (path_hash(path), path, key, oid),
            )
            if is_page(path):
                pending.append((int(cursor.lastrowid or 0), path, oid))
            if len(pending) >= CHUNK:
                self._write(db, pending, reading)
                pending = []
        self._write(db, pending, reading)

    def _write(
        self, db: sqlite3.Connection, pages: list[tuple[int, str, str]], reading: Reading | None
    ) -> None:
        """The link rows of ``pages`` (each row of ``files`` is there already), or their costly mark."""
        oids = [oid for _, _, oid in pages]
        blobs: Generator[bytes | None, None, None]
        if len(oids) < READ_MANY_FROM:  # a commit's few pages: from the packs in process
            blobs = (self.repo.read_blob(oid) for oid in oids)
        else:
            blobs = iter_blobs(self.repo.path, oids, ANY_SIZE)
        rows: list[tuple[int, int, str, int, str, int, str]] = []
        costly: list[tuple[int]] = []
        try:
            for (file, path, _), data in zip(pages, blobs, strict=True):
                assert data is not None  # no size is over ANY_SIZE
                if reading is not None:
                    reading.take(len(data))
                if b"[" not in data:  # every link form starts with a bracket
                    continue
                found = _page_rows(data, path, reading.spend if reading is not None else None)
                if found is None:
                    costly.append((file,))
                else:
                    rows += [(file, *row) for row in found]
        finally:
            blobs.close()
        db.executemany("UPDATE files SET costly = 1 WHERE id = ?", costly)
        db.executemany("INSERT INTO links VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


Row = tuple[str, str, int, int, str, int, str]  # path, blob, ord, wikilink, link path, line, text
LinkRow = tuple[int, str, int, str, int, str]  # ord, key, wikilink, link path, line, text


def _page_rows(data: bytes, page: str, spend: Budget | None) -> list[LinkRow] | None:
    """The link rows of ``page`` (its bytes ``data``), or None when it is costly (see the module): its
    rows would take over ``ROWS_FACTOR`` times its bytes plus ``ROWS_FREE``, or its parse over the costs
    of ``spend`` (a read's budget, whose running out is ``OverBudget``) or of a default budget of its own
    (None)."""
    most = ROWS_FACTOR * len(data) + ROWS_FREE
    if data.count(b"[") * ROW_BYTES > most:  # more links may start here than rows the page may take
        return None
    try:
        with active(spend if spend is not None else Budget()):
            links = parse_links(data)
    except OverBudget:
        if spend is not None and _spent(spend):
            raise  # the read's budget ran out, not this page's own parse
        return None
    rows = list(_link_rows(links, page))
    taken = 0
    for _, key, _, target, _, text in rows:
        taken += row_bytes(key, target, text)
        if taken > most:
            return None
    return rows


def row_bytes(key: str, target: str, text: str) -> int:
    """What one link row is counted as taking in the file: ``ROW_BYTES``, and its strings (the key twice:
    in the row and in ``links_key``) with a quarter more, for the room SQLite's pages leave free."""
    strings = 2 * len(key.encode()) + len(target.encode()) + len(text.encode())
    return ROW_BYTES + strings * 5 // 4


def _spent(spend: Budget) -> bool:
    """True when ``spend`` is out of CPU time or of bytes to scan (not merely refusing one call)."""
    return spend.scanned > spend.costs.scan_bytes or spend.cpu() > spend.costs.cpu_seconds


def _link_rows(links: list[Link], page: str) -> Iterator[LinkRow]:
    """``(ord, key, wikilink, link path, line, text)`` of each of ``links`` (of ``page``) that may resolve."""
    for ord_, link in enumerate(links):
        key = link_key(link, page)
        if key is not None:
            yield ord_, key, link.kind == "wikilink", link.path, link.line, link.text


def _costly_rows(snapshot: Snapshot, target: str, key: str, costly: list[tuple[str, str]]) -> list[Row]:
    """The rows of key ``key`` of the costly pages, for those among them that mention the target's name
    (``mentions.link_needles``, as ``find_backlinks`` picks its pages), parsed now under the read's budget
    (each page read is charged as scanned; ``OverBudget`` when the read cannot afford one, as without the
    index)."""
    needles = link_needles([target])
    wanted = None if needles is None else [needle.encode() for needle in needles]
    spend = current()
    rows: list[Row] = []
    for path, blob in costly:
        version = snapshot.version(path)
        if version != blob:
            if version is None:
                continue
            raise Untrusted(f"the index holds {blob} for {path!r}, git {version}")
        data = snapshot.read(path)
        spend.scan(len(data), f"the backlinks in {path!r}")
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
    seen: dict[str, bool] = {}
    found = []
    for path, blob, _, wikilink, link_path, line, text in checked(rows, "resolving the backlinks"):
        present = seen.get(path)
        if present is None:
            version = snapshot.version(path)
            if version is not None and version != blob:
                raise Untrusted(f"the index holds {blob} for {path!r}, git {version}")
            present = seen[path] = version is not None
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


def catching_up(repo: ObjectReader) -> bool:
    """True while a child process started here brings ``repo``'s link index forward."""
    with _CATCHING_UP_LOCK:
        running = _CATCHING_UP.get(repo.path)
        return running is not None and running.is_alive()


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
