"""The git store: bare repositories ``<data>/wikis/<id>.git`` read and written without a working tree.

Reads come straight from the memory-mapped packs (``PackReader``: index lookup, inflate, deltas, id check)
and, for anything else, from GitPython's object database (one long-lived ``git cat-file`` per open
repository); open repositories are kept in a small LRU and closed on eviction.

A plan is committed by writing the new blobs, the trees on changed paths and one commit object as ONE pack
(+ ``.idx``) under ``tmp_`` names, renaming it into place under ``main.lock``, flushing everything with one
``syncfs``, then moving ``refs/heads/main`` by compare-and-swap under git's own lock protocol. A lost swap
raises ``RefMoved`` and deletes the pack; the ref is never forced. Parsed trees are immutable and cached by
id (bounded by their total number of entries), as is each commit's tree; a changed tree is built from its
cached records (``worker.gitobjects``), so a commit's cost follows what it changes, not the size of the wiki.

Why a pack per commit: creating a file is by far the most expensive part of a small write here (0.05-0.5 ms
of kernel CPU each on the ext4 this runs on), and loose objects cost one per object (~22 per commit on a
nested wiki); a pack costs two. Packs pile up instead, so ``_Maintenance`` rolls them up in the background
with ``git repack --geometric=2`` (see there for when and where it runs, and why it is safe next to a
writer).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import git

from worker.engine import NewFile, Plan
from worker.errors import RefLocked, RefMoved, WikiExists, WikiNotFound
from worker.gitobjects import (
    EMPTY_TREE,
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    PackedObject,
    PackReader,
    PendingPack,
    Tree,
    TreeEditor,
    parse_tree,
    write_pack,
)
from worker.gitobjects import object_id as raw_object_id

WIKI_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")  # \Z: "$" would let a trailing "\n" in
MAIN = "refs/heads/main"
TREE_MODE = 0o40000  # == worker.gitobjects.TREE_MODE
FILE_MODE = 0o100644
JOB_TRAILER = "Wikiq-Job"
STALE_LOCK_SECONDS = 5.0
_EXEC_MODE = 0o100755
TREE_CACHE_ENTRIES = 250_000  # per open repository: ~100k pages of head plus recent versions
COMMIT_CACHE = 4096
MAINTENANCE_CHECK_EVERY = 16  # commits between two looks at objects/pack
REPACK_AT_PACKS = 50  # packs that call for a repack once the wiki is idle (git's gc.autoPackLimit)
REPACK_IDLE_SECONDS = 30.0  # ... idle meaning: no commit by this process for this long
REPACK_FORCED_AT_PACKS = 256  # packs that call for a repack at once, even under a steady stream of commits
STALE_TEMP_SECONDS = 24 * 3600  # tmp_* files and index-less packs older than this are a dead writer's

INITIAL_FILES: Mapping[str, bytes] = {
    "index.md": b"# Index\n\nOne line per page of the wiki.\n",
    "log.md": b"# Log\n\nAppend-only record of changes.\n",
    "schema.md": (
        b"# Schema\n\n- `wiki/` pages: any edit.\n- `raw/` sources: create only.\n"
        b"- `index.md`, `log.md`, `schema.md`: never deleted or renamed.\n"
    ),
}


@dataclass(frozen=True)
class Identity:
    """A git author or committer."""

    name: str
    email: str

    def line(self, when: int) -> bytes:
        """``Name <email> <epoch> +0000`` with characters git cannot store removed."""
        name = re.sub(r"[<>\n\r\x00]", "", self.name).strip() or "unknown"
        email = re.sub(r"[<>\n\r\x00\s]", "", self.email)
        return f"{name} <{email}> {when} +0000".encode()


@dataclass(frozen=True)
class CommitInfo:
    """One commit of ``main`` as the API shows it."""

    commit: str
    message: str
    author: Identity
    time: int
    job_id: str | None
    parents: tuple[str, ...]


@dataclass(frozen=True)
class FileEntry:
    """A file at a commit: path, version (blob id) and size in bytes."""

    path: str
    version: str
    size: int


SERVICE = Identity("wikiq", "wikiq@localhost")

_libc = ctypes.CDLL(None, use_errno=True)


def sync_filesystem(path: Path) -> None:
    """Flush every dirty page of the file system holding ``path`` to disk (one ``syncfs``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def object_id(kind: str, data: bytes) -> str:
    """The git object id of ``data`` stored as ``kind`` (blob, tree, commit)."""
    return raw_object_id(kind.encode(), data).hex()


class _TreeCache:
    """Parsed trees by id, least recently used dropped first, bounded by their total number of entries.

    Trees never change, so none goes stale. Counting entries rather than trees keeps one wide folder (whose
    every version is a full copy) from holding thousands of big trees. Thread-safe: snapshots read it from
    API threads while a commit writes it.
    """

    def __init__(self, capacity: int = TREE_CACHE_ENTRIES) -> None:
        self.capacity = capacity
        self.trees: OrderedDict[str, Tree] = OrderedDict()
        self.entries = 0
        self._lock = threading.Lock()

    def get(self, tree_id: str) -> Tree | None:
        with self._lock:
            tree = self.trees.get(tree_id)
            if tree is not None:
                self.trees.move_to_end(tree_id)
            return tree

    def put(self, tree_id: str, tree: Tree) -> None:
        with self._lock:
            old = self.trees.pop(tree_id, None)
            if old is not None:
                self.entries -= old.size + 1
            self.trees[tree_id] = tree
            self.entries += tree.size + 1
            while self.entries > self.capacity and len(self.trees) > 1:
                _, dropped = self.trees.popitem(last=False)
                self.entries -= dropped.size + 1

    def demote(self, tree_ids: Iterable[str]) -> None:
        """Make ``tree_ids`` the next to go: trees a commit has just replaced are rarely read again."""
        with self._lock:
            for tree_id in tree_ids:
                if tree_id in self.trees:
                    self.trees.move_to_end(tree_id, last=False)


class _CommitTrees:
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


class Snapshot:
    """A read-only view of one tree (a ``HeadView`` for the engine).

    Folders and entries looked up are remembered for the life of the snapshot (``path -> Tree`` or
    ``path -> (mode, id)``, None when there is nothing), so the engine's repeated questions about the same
    paths (it asks about each path of a batch four or five times) cost one dict lookup each.
    """

    def __init__(self, repo: WikiRepo, commit: str | None, tree: str | None) -> None:
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
            entry = None if above is None else above.find(name)
            found = self.repo.tree(entry[1]) if entry is not None and entry[0] == TREE_MODE else None
        self._folders[folder] = found
        return found

    def _entry(self, path: str) -> tuple[int, str] | None:
        if path in self._entries:
            return self._entries[path]
        folder, _, name = path.rpartition("/")
        tree = self._folder(folder)
        found = self._entries[path] = None if tree is None else tree.find(name)
        return found

    def version(self, path: str) -> str | None:
        """The blob id at ``path``, or None when no file is there."""
        entry = self._entry(path)
        if entry is None or entry[0] not in (FILE_MODE, _EXEC_MODE):
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

    def _walk(self, tree: str, prefix: str) -> Iterator[str]:
        for name, (mode, oid) in self.repo.tree(tree).items():
            if mode == TREE_MODE:
                yield from self._walk(oid, f"{prefix}{name}/")
            else:
                yield prefix + name


class WikiRepo:
    """One bare wiki repository. Methods take a lock: one ``WikiRepo`` may be shared by threads."""

    def __init__(self, path: Path, tree_cache: _TreeCache | None = None) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.repo = git.Repo(path, odbt=git.GitCmdObjectDB)
        self.trees = tree_cache or _TreeCache()
        self.commit_trees = _CommitTrees()
        self.objects = path / "objects"
        # Writes never go through GitPython's store: it spawns `git hash-object --stdin` per object, which
        # is slow and, if we are killed mid-write, stores an empty object under a real-looking id.
        self.packs = self.objects / "pack"
        self.packed = PackReader(self.packs)  # in-process reads; git cat-file for anything else
        self._ref = str(path / MAIN)
        self.maintenance = _Maintenance(path)

    def close(self) -> None:
        """Stop the repository's ``git cat-file`` processes (a background repack is left to finish)."""
        with self.lock:
            self.repo.close()
            self.packed.close()
            self.maintenance.close()

    # -- reading ------------------------------------------------------------------------------------

    def head(self) -> str | None:
        """The commit ``main`` points at, read from the ref file (or packed-refs), None when unborn."""
        try:
            fd = os.open(self._ref, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        else:
            try:
                return os.read(fd, 256).decode().strip() or None
            finally:
                os.close(fd)
        try:
            for line in (self.path / "packed-refs").read_text().splitlines():
                if line.endswith(" " + MAIN):
                    return line.split(" ", 1)[0]
        except FileNotFoundError:
            pass
        return None

    def _read(self, oid: str) -> tuple[str, bytes]:
        with self.lock:
            found = self.packed.read(bytes.fromhex(oid))
            if found is not None:
                return found[0].decode(), found[1]
            stream = self.repo.odb.stream(bytes.fromhex(oid))
            return stream.type.decode() if isinstance(stream.type, bytes) else stream.type, stream.read()

    def read_blob(self, oid: str) -> bytes:
        """The bytes of blob ``oid``."""
        return self._read(oid)[1]

    def tree(self, tree: str) -> Tree:
        """Tree ``tree``, parsed (and cached)."""
        found = self.trees.get(tree)
        if found is None:
            kind, data = self._read(tree)
            if kind != "tree":
                raise ValueError(f"{tree} is a {kind}, not a tree")
            found = parse_tree(data)
            self.trees.put(tree, found)
        return found

    def tree_entries(self, tree: str) -> dict[str, tuple[int, str]]:
        """``{name: (mode, id)}`` of tree ``tree``."""
        return dict(self.tree(tree).items())

    def commit_info(self, commit: str) -> CommitInfo:
        """Parse commit object ``commit``."""
        _, data = self._read(commit)
        return parse_commit(commit, data)

    def tree_of(self, commit: str) -> str:
        """The root tree id of ``commit``."""
        tree = self.commit_trees.get(commit)
        if tree is None:
            _, data = self._read(commit)
            first = data.split(b"\n", 1)[0]
            tree = first.split(b" ", 1)[1].decode()
            self.commit_trees.put(commit, tree)
        return tree

    def snapshot(self, commit: str | None = None) -> Snapshot:
        """A view of ``commit`` (default: the head of ``main``)."""
        commit = commit if commit is not None else self.head()
        return Snapshot(self, commit, None if commit is None else self.tree_of(commit))

    def list_files(self, commit: str, prefix: str = "") -> list[FileEntry]:
        """Every file at ``commit`` under ``prefix``, sorted by path, with version and size."""
        args = ["git", "--git-dir", str(self.path), "ls-tree", "-r", "-l", "-z", "--full-tree", commit]
        out = subprocess.run(args, check=True, capture_output=True).stdout
        files = []
        for record in out.split(b"\x00"):
            if not record:
                continue
            meta, path_bytes = record.split(b"\t", 1)
            _mode, kind, oid, size = meta.split()
            path = path_bytes.decode("utf-8", "surrogateescape")
            if kind == b"blob" and path.startswith(prefix):
                files.append(FileEntry(path, oid.decode(), int(size)))
        return files

    def search(self, commit: str, query: str, limit: int) -> list[tuple[str, int, str]]:
        """Up to ``limit`` ``(path, line, text)`` holding ``query`` (literal, any case) at ``commit``."""
        args = ["git", "--git-dir", str(self.path), "grep", "-I", "-i", "-F", "-n", "-z", "--no-color"]
        process = subprocess.Popen(
            [*args, "-e", query, commit], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert process.stdout is not None
        matches: list[tuple[str, int, str]] = []
        prefix = commit.encode() + b":"
        try:
            for raw in process.stdout:
                path, number, text = raw.rstrip(b"\n").split(b"\x00", 2)
                matches.append(
                    (
                        path.removeprefix(prefix).decode("utf-8", "replace"),
                        int(number),
                        text.decode("utf-8", "replace"),
                    )
                )
                if len(matches) >= limit:
                    break
        finally:
            process.kill()
            process.wait()
        return matches

    def log(self, limit: int, start: str | None = None) -> list[CommitInfo]:
        """Up to ``limit`` commits of ``main`` (first-parent), newest first."""
        commits: list[CommitInfo] = []
        current = start if start is not None else self.head()
        while current is not None and len(commits) < limit:
            info = self.commit_info(current)
            commits.append(info)
            current = info.parents[0] if info.parents else None
        return commits

    def find_job_commit(self, job_id: str, stop_at: str | None, limit: int = 10_000) -> str | None:
        """The commit on ``main`` whose trailer names ``job_id``, searched back to ``stop_at`` (excluded)."""
        current = self.head()
        seen = 0
        while current is not None and current != stop_at and seen < limit:
            info = self.commit_info(current)
            if info.job_id == job_id:
                return current
            current = info.parents[0] if info.parents else None
            seen += 1
        return None

    # -- writing ------------------------------------------------------------------------------------

    def _write_tree(
        self,
        tree: str | None,
        changes: Mapping[str, NewFile | None],
        out: dict[bytes, PackedObject],
        replaced: list[str],
    ) -> str | None:
        """Tree ``tree`` with ``changes`` applied, its new objects added to ``out``; None when it is empty.

        ``replaced`` collects the ids of the old trees on changed paths.
        """
        edit = TreeEditor(self.tree(tree) if tree is not None else EMPTY_TREE)
        here: dict[str, NewFile | None] = {}
        below: dict[str, dict[str, NewFile | None]] = {}
        for path, file in changes.items():
            head, sep, rest = path.partition("/")
            if sep:
                below.setdefault(head, {})[rest] = file
            else:
                here[head] = file
        for name, file in here.items():
            if file is None:
                edit.remove(name)
        for name, sub in below.items():
            old = edit.get(name)
            new = self._write_tree(old[1] if old and old[0] == TREE_MODE else None, sub, out, replaced)
            if new is None:
                edit.remove(name)
            else:
                edit.put(name, TREE_MODE, new)
        for name, file in here.items():
            if file is not None:
                if file.data is not None:
                    blob = raw_object_id(b"blob", file.data)
                    if blob.hex() != file.version:
                        raise ValueError(f"{name!r}: version {file.version} is not the id of its bytes")
                    out[blob] = PackedObject(OBJ_BLOB, blob, file.data)
                edit.put(name, FILE_MODE, file.version, keep_exec=True)  # an executable stays one
        if not len(edit):
            return None
        built = edit.build()
        data = built.data()
        oid = raw_object_id(b"tree", data)
        new_id = oid.hex()
        if new_id != tree:
            out[oid] = PackedObject(OBJ_TREE, oid, data)
            if tree is not None:
                replaced.append(tree)
        self.trees.put(new_id, built)
        return new_id

    def commit_plan(
        self,
        plan: Plan,
        base: str | None,
        message: str,
        author: Identity,
        job_id: str | None = None,
        committer: Identity = SERVICE,
        when: int | None = None,
    ) -> str:
        """Write ``plan`` as one commit on ``base`` and move ``main`` there if it is still at ``base``.

        Raises ``RefMoved`` when ``main`` moved meanwhile (the pack written is removed again). Returns once
        objects and ref are on disk.
        """
        with self.lock:
            base_tree = self.tree_of(base) if base is not None else None
            objects: dict[bytes, PackedObject] = {}
            replaced: list[str] = []
            tree = self._write_tree(base_tree, plan.changes, objects, replaced)
            if tree is None:
                empty = bytes.fromhex(object_id("tree", b""))
                objects[empty] = PackedObject(OBJ_TREE, empty, b"")
                tree = empty.hex()
            when = int(time.time()) if when is None else when
            text = message.replace("\x00", "").rstrip("\n") + "\n"  # git fsck refuses NUL in a commit
            if job_id is not None:
                text += f"\n{JOB_TRAILER}: {job_id}\n"
            body = b"tree %s\n" % tree.encode()
            if base is not None:
                body += b"parent %s\n" % base.encode()
            body += b"author %s\ncommitter %s\n\n" % (author.line(when), committer.line(when))
            body += text.encode("utf-8")
            commit_oid = bytes.fromhex(object_id("commit", body))
            objects[commit_oid] = PackedObject(OBJ_COMMIT, commit_oid, body)
            commit = commit_oid.hex()
            self._swap_main(base, commit, write_pack(self.packs, objects))
            self.commit_trees.put(commit, tree)
            self.trees.demote(replaced)
            self.maintenance.committed()
            return commit

    def _swap_main(self, expected: str | None, new: str, pack: PendingPack | None = None) -> None:
        """Move ``main`` from ``expected`` to ``new`` under ``main.lock``, publishing ``pack`` first.

        Order: lock, check the head, write the lock, rename the pack into place, ONE ``syncfs`` (the pack,
        its name and the lock's content are then durable), rename the lock over the ref, fsync the ref's
        folder. A SIGKILL anywhere leaves at worst a ``tmp_`` file, an unreferenced pack or a stale lock,
        never a ref to objects that are not on disk. On any failure the unpublished pack is deleted.
        """
        ref = self.path / MAIN
        lock = ref.with_name(ref.name + ".lock")
        held = False  # the lock path is ours until renamed; after that it may be another writer's lock
        fd = -1
        try:
            fd = self._take_lock(lock, expected)
            held = True
            actual = self.head()
            if actual != expected:
                raise RefMoved(expected, actual)
            os.write(fd, new.encode() + b"\n")
            os.close(fd)
            fd = -1
            if pack is not None:
                pack.publish()
            sync_filesystem(self.path)  # new objects and the lock's content, in one flush
            os.rename(lock, ref)
            held = False
            fsync_dir(ref.parent)
        finally:
            if fd >= 0:
                os.close(fd)
            if held:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
            if pack is not None:
                pack.discard()

    @staticmethod
    def _take_lock(lock: Path, expected: str | None) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            return os.open(lock, flags, 0o644)
        except FileNotFoundError:
            lock.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            if not _break_stale_lock(lock):
                raise RefLocked(expected) from None
        try:
            return os.open(lock, flags, 0o644)
        except FileExistsError:
            raise RefLocked(expected) from None


class _Maintenance:
    """Background upkeep of one repository's ``objects/pack``: rolls the per-commit packs up.

    ``committed()`` runs in the committing thread after each successful swap (under the repository lock);
    every ``MAINTENANCE_CHECK_EVERY`` commits it lists ``objects/pack`` (one ``scandir``, which also removes
    a dead writer's leftovers: ``tmp_*`` files and ``.pack`` files without an ``.idx`` older than
    ``STALE_TEMP_SECONDS``). Past ``REPACK_AT_PACKS`` packs it starts a daemon thread that waits until the
    wiki has been idle for ``REPACK_IDLE_SECONDS`` and then runs ``git repack --geometric=2 -d`` (deltas
    on); past ``REPACK_FORCED_AT_PACKS`` (a steady stream of commits never leaves it idle) it runs at once,
    without delta search (``pack.window=0``: consolidation only, a third of the CPU). The commit path never
    waits for it: a repack next to a stream of commits costs them ~40% (its CPU, and its writes that each
    commit's ``syncfs`` must flush), so it waits for a pause when it can.

    The repack is a separate ``git`` process, niced and with one delta thread (it must not take both cores
    of a small machine), in its own session: it outlives a killed worker and finishes or dies cleanly on
    its own (git writes temporary files and renames them, as we do, and fsyncs its packs by default). The
    thread only waits for it. ``--geometric=2`` merges the smallest packs (and any loose objects) until pack
    sizes grow geometrically, so a wiki keeps O(log commits) packs and the big initial pack is rewritten
    only when the rest adds up to half of it. It is safe next to a concurrent writer: it packs every
    object of the packs it rolls up, reachable or not (``--stdin-packs``), and deletes only packs it has
    fully copied; a pack published while it runs is not in its list and stays. Readers (``git cat-file``)
    re-scan ``objects/pack`` when an object is missing; a ``git fsck`` running while a repack deletes the
    packs it rolled up reports them as inaccessible, as it would next to ``git gc``, and is clean once the
    repack ends (checked over 30 SIGKILLs of a writer in a tight commit loop). The idle wait is long (30 s)
    so that a burst of work and its checks are over before a repack starts. Unreferenced objects (lost
    swaps) are kept; a plain ``git gc`` drops them after its grace period.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.packs_dir = path / "objects" / "pack"
        self.since_check = MAINTENANCE_CHECK_EVERY - 1  # look at objects/pack after the first commit
        self.packs = 0  # packs at the last look, plus one per commit since
        self.last_commit = time.monotonic()
        self.thread: threading.Thread | None = None  # waiting for an idle moment, or repacking
        self.forced = False
        self.closed = False
        self.wake = threading.Event()

    def committed(self) -> None:
        """Count one more pack; look at ``objects/pack`` now and then and start a repack when due."""
        self.last_commit = time.monotonic()
        self.packs += 1
        self.since_check += 1
        if self.thread is not None:
            if self.packs >= REPACK_FORCED_AT_PACKS and not self.forced:
                self.forced = True
                self.wake.set()
            return
        if self.since_check < MAINTENANCE_CHECK_EVERY:
            return
        self.since_check = 0
        self.packs = self._scan()
        if self.packs >= REPACK_AT_PACKS:
            self.forced = self.packs >= REPACK_FORCED_AT_PACKS
            self.wake.clear()
            self.thread = threading.Thread(target=self._run, name=f"repack {self.path.name}", daemon=True)
            self.thread.start()

    def close(self) -> None:
        """Give up waiting for an idle moment (a repack already running is left to finish)."""
        self.closed = True
        self.wake.set()

    def _scan(self) -> int:
        try:
            with os.scandir(self.packs_dir) as listing:
                names = {entry.name: entry for entry in listing}
        except OSError:
            return 0
        packs = 0
        stale = time.time() - STALE_TEMP_SECONDS
        for name, entry in names.items():
            leftover = name.startswith("tmp_")
            if name.endswith(".pack"):
                packs += 1
                leftover = name.removesuffix(".pack") + ".idx" not in names
            with contextlib.suppress(OSError):
                if leftover and entry.stat(follow_symlinks=False).st_mtime < stale:
                    os.unlink(entry.path)
        return packs

    def _run(self) -> None:
        try:
            while not self.forced:
                idle = time.monotonic() - self.last_commit
                if idle >= REPACK_IDLE_SECONDS:
                    break
                self.wake.wait(REPACK_IDLE_SECONDS - idle)
                if self.closed:
                    return
            _repack(self.path, deltas=not self.forced)
        finally:
            self.since_check = MAINTENANCE_CHECK_EVERY - 1  # look again after the next commit
            self.forced = False
            self.thread = None


def _repack(repo: Path, deltas: bool) -> None:
    """Run ``git repack --geometric=2 -d`` on ``repo`` (niced, own session) and wait for it to end."""
    args = ["nice", "-n", "10", "git", "-c", "pack.threads=1", "--git-dir", str(repo)]
    if not deltas:
        args[-2:-2] = ["-c", "pack.window=0"]
    args += ["repack", "--geometric=2", "-d", "-q", "-n"]
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    try:
        pid = os.posix_spawnp(args[0], args, os.environ, file_actions=null, setsid=True)
        os.waitpid(pid, 0)
    except OSError:
        pass  # no git or nice here: the next look tries again


def _break_stale_lock(lock: Path) -> bool:
    """Remove ``lock`` if it is older than ``STALE_LOCK_SECONDS``: its writer died (SIGKILL mid-swap).

    A swap holds the lock for milliseconds, and only the partition's lease holder writes a wiki, so an old
    lock can only be a dead writer's. Returns True when the lock is gone.
    """
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return True
    if age < STALE_LOCK_SECONDS:
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)
    return True


def parse_commit(oid: str, data: bytes) -> CommitInfo:
    """Read the fields wikiq shows from a raw commit object."""
    header, _, message_bytes = data.partition(b"\n\n")
    parents: list[str] = []
    author = Identity("unknown", "")
    when = 0
    for line in header.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"parent":
            parents.append(value.decode())
        elif key == b"author":
            match = re.match(rb"^(.*) <(.*)> (\d+) ", value)
            if match:
                author = Identity(match[1].decode("utf-8", "replace"), match[2].decode("utf-8", "replace"))
                when = int(match[3])
    message = message_bytes.decode("utf-8", "replace")
    # wikiq appends its trailer last; a "Wikiq-Job:" line inside the caller's message must not count
    jobs = re.findall(rf"^{JOB_TRAILER}: (\S+)\s*$", message, re.MULTILINE)
    return CommitInfo(oid, message, author, when, jobs[-1] if jobs else None, tuple(parents))


class GitStore:
    """Every wiki under ``<data>/wikis``; open repositories kept in a bounded LRU."""

    def __init__(self, data_dir: Path, max_open: int = 32) -> None:
        self.root = Path(data_dir) / "wikis"
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_open = max_open
        self._open: OrderedDict[str, WikiRepo] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, wiki: str) -> Path:
        """Where wiki ``wiki`` lives (the id is checked first)."""
        if not WIKI_ID.match(wiki):
            raise WikiNotFound(f"no wiki {wiki[:80]!r}: ids match ^[a-z0-9][a-z0-9._-]{{0,62}}$")
        return self.root / f"{wiki}.git"

    def exists(self, wiki: str) -> bool:
        """True when wiki ``wiki`` exists."""
        return WIKI_ID.match(wiki) is not None and (self.path(wiki) / "HEAD").exists()

    def ids(self) -> list[str]:
        """Every wiki id, sorted."""
        return sorted(p.name[: -len(".git")] for p in self.root.glob("*.git") if (p / "HEAD").exists())

    def opened(self, wiki: str) -> WikiRepo | None:
        """The repository of ``wiki`` if it is open already (no I/O), else None."""
        with self._lock:
            return self._open.get(wiki)

    def open(self, wiki: str) -> WikiRepo:
        """The repository of ``wiki``; ``WikiNotFound`` when there is none."""
        with self._lock:
            repo = self._open.get(wiki)
            if repo is not None:
                self._open.move_to_end(wiki)
                return repo
        if not self.exists(wiki):
            raise WikiNotFound(f"no wiki {wiki!r}; create it with POST /v1/wikis")
        with self._lock:
            repo = self._open.get(wiki)
            if repo is None:
                repo = WikiRepo(self.path(wiki))
                self._open[wiki] = repo
                while len(self._open) > self.max_open:
                    _, evicted = self._open.popitem(last=False)
                    evicted.close()
            return repo

    def create(
        self, wiki: str, author: Identity = SERVICE, files: Mapping[str, bytes] = INITIAL_FILES
    ) -> str:
        """Create wiki ``wiki`` with one initial commit of ``files``; ``WikiExists`` if it is there."""
        final = self.path(wiki)
        if final.exists():
            raise WikiExists(f"wiki {wiki!r} already exists")
        tmp = Path(tempfile.mkdtemp(prefix=f".{wiki}.", suffix=".tmp", dir=self.root))
        try:
            git.Repo.init(tmp, bare=True, mkdir=False, initial_branch="main").close()
            repo = WikiRepo(tmp)
            plan = Plan(
                changes={path: NewFile(object_id("blob", data), data) for path, data in files.items()}
            )
            commit = repo.commit_plan(plan, None, f"Create wiki {wiki}", author, committer=SERVICE)
            repo.close()
            try:
                os.rename(tmp, final)
            except OSError:
                raise WikiExists(f"wiki {wiki!r} already exists") from None
            fsync_dir(self.root)
            return commit
        finally:
            if tmp.exists():
                subprocess.run(["rm", "-rf", str(tmp)], check=False)

    def close(self) -> None:
        """Close every open repository."""
        with self._lock:
            for repo in self._open.values():
                repo.close()
            self._open.clear()
