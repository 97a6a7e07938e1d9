"""One bare wiki repository: reads from the packs in process, commits as one pack, ``main`` moved by CAS.

Reads come straight from the packs (``worker.git.packs``: index lookup, inflate, deltas, id check), shared
with every other repository of the process through its ``PackCache``, and, for anything else (loose
objects, a delta base in another pack), from GitPython's object database: its ``git.Repo`` and ``git
cat-file`` processes are created on the first such read only, so opening a repository costs nothing but a
few objects in memory, and reopening an evicted one finds its packs and parsed trees still in the
process-wide caches.

A plan is committed by writing the new blobs, the trees on changed paths and one commit object as ONE pack
(+ ``.idx``) under ``tmp_`` names, then ``worker.git.refs.swap_main`` makes it durable, publishes it and
moves ``refs/heads/main`` by compare-and-swap. A lost swap raises ``RefMoved`` and deletes the pack; the ref
is never forced. Parsed trees are immutable and cached by id, as is each commit's tree; a changed tree is
built from its cached records (``worker.git.objects``), so a commit's cost follows what it changes, not the
size of the wiki.

Why a pack per commit: creating a file is by far the most expensive part of a small write here (0.05-0.5 ms
of kernel CPU each on the ext4 this runs on), and loose objects cost one per object (~22 per commit on a
nested wiki); a pack costs two. So that packs do not pile up, the same pack also carries the entries of
the small packs it rolls up (``worker.git.rollup``), deleted once the commit is on ``main``.
"""

from __future__ import annotations

import hmac
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import git

from worker import faults
from worker.engine import NewFile, Plan
from worker.git import rollup
from worker.git.commits import (
    JOB_TRAILER,
    PROOF_TRAILER,
    SERVICE,
    CommitInfo,
    Identity,
    job_proof,
    parse_commit,
)
from worker.git.maintenance import MAINTENANCE_CHECK_EVERY, Maintenance
from worker.git.objects import (
    EMPTY_TREE,
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    TREE_MODE,
    TYPE_NAMES,
    PackedObject,
    PendingPack,
    Tree,
    TreeEditor,
    encode,
    parse_tree,
    write_pack,
)
from worker.git.objects import object_id as raw_object_id
from worker.git.packs import PACKS, Pack, PackReader
from worker.git.refs import publish_durably, read_ref, swap_main
from worker.git.snapshot import COMMIT_TREES, FILE_MODE, TREES, CommitTrees, Snapshot, TreeCache
from worker.git.textindex import TextIndex

GITLINK_MODE = 0o160000  # a submodule's entry: not a file of the wiki


@dataclass(frozen=True)
class FileEntry:
    """A file at a commit: path, version (blob id) and size in bytes."""

    path: str
    version: str
    size: int


def object_id(kind: str, data: bytes) -> str:
    """The git object id of ``data`` stored as ``kind`` (blob, tree, commit)."""
    return raw_object_id(kind.encode(), data).hex()


class WikiRepo:
    """One bare wiki repository. Methods take a lock: one ``WikiRepo`` may be shared by threads.

    Opening one does no I/O; ``tree_cache`` and ``commit_trees`` default to the process-wide caches.
    """

    def __init__(
        self, path: Path, tree_cache: TreeCache | None = None, commit_trees: CommitTrees | None = None
    ) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._git: git.Repo | None = None  # created on the first read the packs cannot answer
        self.trees = TREES if tree_cache is None else tree_cache
        self.commit_trees = COMMIT_TREES if commit_trees is None else commit_trees
        self.objects = path / "objects"
        # Writes never go through GitPython's store: it spawns `git hash-object --stdin` per object, which
        # is slow and, if we are killed mid-write, stores an empty object under a real-looking id.
        self.packs = self.objects / "pack"
        self.packed = PackReader(self.packs)  # in-process reads; git cat-file for anything else
        self.maintenance = Maintenance(path)
        self._since_listing = 0  # commits since the writer's view of objects/pack was last listed
        self._repacks_seen = self.maintenance.repacker.runs
        self._text: TextIndex | None = None
        self._pending: dict[bytes, PackedObject] = {}  # objects of an open ``CommitGroup``, not yet on disk

    @property
    def repo(self) -> git.Repo:
        """GitPython's view of the repository (and its ``git cat-file`` processes), made when first used."""
        with self.lock:
            if self._git is None:
                self._git = git.Repo(self.path, odbt=git.GitCmdObjectDB)
            return self._git

    def close(self) -> None:
        """Stop the repository's ``git cat-file`` processes, if it started any, and let go of its packs."""
        with self.lock:
            if self._git is not None:
                self._git.close()
                self._git = None
            self.packed.close()
            self.maintenance.close()

    # -- reading ------------------------------------------------------------------------------------

    def head(self) -> str | None:
        """The commit ``main`` points at, None when unborn."""
        return read_ref(self.path)

    def _read(self, oid: str) -> tuple[str, bytes]:
        with self.lock:
            if self._pending:
                mine = self._pending.get(bytes.fromhex(oid))
                if mine is not None:
                    return TYPE_NAMES[mine.kind].decode(), mine.data
            found = self.packed.read(bytes.fromhex(oid))
            if found is not None:
                return found[0].decode(), found[1]
            stream = self.repo.odb.stream(bytes.fromhex(oid))
            return stream.type.decode() if isinstance(stream.type, bytes) else stream.type, stream.read()

    def pending(self, oid: str | None = None) -> bool:
        """True while a ``CommitGroup`` holds objects not written yet (``oid``: that object is one of them);
        git itself (``git grep``, ``git cat-file``) cannot see those."""
        if oid is None:
            return bool(self._pending)
        return bytes.fromhex(oid) in self._pending

    def has_object(self, oid: str) -> bool:
        """True when object ``oid`` is in this repository (in a pack, or loose)."""
        with self.lock:
            if self.pending(oid):
                return True
            if self.packed.size(bytes.fromhex(oid)) is not None:
                return True
            try:
                self.repo.odb.info(bytes.fromhex(oid))
            except (ValueError, git.BadObject, git.BadName, OSError):
                return False
            return True

    def text_index(self) -> TextIndex:
        """The text index of this repository's pages (made on first use; see ``worker.git.textindex``)."""
        with self.lock:
            if self._text is None:
                self._text = TextIndex(self)
            return self._text

    def blob_size(self, oid: str) -> int:
        """The size in bytes of blob ``oid``, without reading it whole."""
        with self.lock:
            found = self.packed.size(bytes.fromhex(oid))
            if found is not None:
                return found
            return int(self.repo.odb.info(bytes.fromhex(oid)).size)

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

    def list_files(
        self, commit: str, prefix: str = "", after: str = "", limit: int | None = None
    ) -> list[FileEntry]:
        """Files at ``commit`` whose path starts with ``prefix`` and sorts after ``after``, sorted by path,
        at most ``limit`` of them, with version and size.

        Walks only what it returns: the folders on the way to ``prefix``, then the subtrees in order,
        skipping every one whose paths all sort before ``after``; sizes come from the pack entries'
        headers. A recursive walk in git's tree order is the sorted order of the full paths.
        """
        folder, _, stem = prefix.rpartition("/")
        tree_id = self.tree_of(commit)
        for name in folder.split("/") if folder else ():
            entry = self.tree(tree_id).find(name)
            if entry is None or entry[0] != TREE_MODE:
                return []
            tree_id = entry[1]
        out: list[FileEntry] = []
        base = folder + "/" if folder else ""
        self._walk_files(tree_id, base, stem, after, limit, out)
        return out

    def _walk_files(
        self, tree_id: str, base: str, stem: str, after: str, limit: int | None, out: list[FileEntry]
    ) -> bool:
        """Add the files under ``tree_id`` (paths ``base`` + name, names starting with ``stem``) to
        ``out``; False once ``limit`` is reached."""
        for name, (mode, oid) in self.tree(tree_id).items():
            if stem and not name.startswith(stem):
                continue
            path = base + name
            if mode == TREE_MODE:
                folder = path + "/"
                if after >= folder and not after.startswith(folder):
                    continue  # every path in it sorts before the cursor
                if not self._walk_files(oid, folder, "", after, limit, out):
                    return False
            elif mode != GITLINK_MODE and path > after:
                if limit is not None and len(out) >= limit:
                    return False
                out.append(FileEntry(path, oid, self.blob_size(oid)))
        return True

    def log(self, limit: int, start: str | None = None) -> list[CommitInfo]:
        """Up to ``limit`` commits of ``main`` (first-parent), newest first."""
        commits: list[CommitInfo] = []
        current = start if start is not None else self.head()
        while current is not None and len(commits) < limit:
            info = self.commit_info(current)
            commits.append(info)
            current = info.parents[0] if info.parents else None
        return commits

    def find_job_commit(
        self,
        job_id: str,
        stop_at: str | None,
        limit: int = 10_000,
        start: str | None = None,
        key: bytes | None = None,
    ) -> str | None:
        """The commit whose trailer names ``job_id``, searched from ``start`` (default: ``main``) along first
        parents back to ``stop_at`` (excluded).

        With ``key`` a commit counts only with its ``Wikiq-Proof`` under ``key`` (``commits.job_proof``): a
        hand-written ``Wikiq-Job`` trailer, without a proof or with a wrong one, is ignored. The caller
        that decides when to look is ``worker.jobs.once``."""
        current = start if start is not None else self.head()
        seen = 0
        while current is not None and current != stop_at and seen < limit:
            info = self.commit_info(current)
            if info.job_id == job_id and (key is None or self._proven(info, key)):
                return current
            current = info.parents[0] if info.parents else None
            seen += 1
        return None

    def _proven(self, info: CommitInfo, key: bytes) -> bool:
        """True when ``info`` proves it is its job's commit under ``key``."""
        if info.proof is None or info.job_id is None:
            return False
        expected = job_proof(key, info.job_id, self.tree_of(info.commit))
        return hmac.compare_digest(info.proof, expected)

    # -- writing ------------------------------------------------------------------------------------

    def _write_tree(
        self,
        tree: str | None,
        changes: Mapping[str, NewFile | None],
        out: dict[bytes, PackedObject],
        replaced: list[str],
    ) -> tuple[str, bytes] | None:
        """The id (hex, binary) of tree ``tree`` with ``changes`` applied, its new objects added to ``out``;
        None when it is empty.

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
                edit.put(name, TREE_MODE, new[1])
        for name, file in here.items():
            if file is not None:
                if file.data is None:
                    edit.put(name, FILE_MODE, file.version, keep_exec=True)  # an executable stays one
                    continue
                blob = raw_object_id(b"blob", file.data)
                if blob.hex() != file.version:
                    raise ValueError(f"{name!r}: version {file.version} is not the id of its bytes")
                out[blob] = PackedObject(OBJ_BLOB, blob, file.data)
                edit.put(name, FILE_MODE, blob, keep_exec=True)
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
        return new_id, oid

    def commit_plan(
        self,
        plan: Plan,
        base: str | None,
        message: str,
        author: Identity,
        job_id: str | None = None,
        committer: Identity = SERVICE,
        when: int | None = None,
        proof_key: bytes | None = None,
    ) -> str:
        """Write ``plan`` as one commit on ``base`` and move ``main`` there if it is still at ``base``.

        Raises ``RefMoved`` when ``main`` moved meanwhile (the pack written is removed again). Returns once
        objects and ref are on disk. ``proof_key``: see ``_build_commit``.
        """
        with self.lock:
            commit, objects = self._build_commit(
                plan, base, message, author, job_id, committer, when, proof_key
            )
            pending, absorbed = self._pack(objects)
            faults.point("git.pack_written")
            swap_main(self.path, base, commit, pending)
            self._settle(pending, absorbed)
            return commit

    def group(self) -> CommitGroup:
        """A group of consecutive commits on the current head, landed together (see ``CommitGroup``)."""
        return CommitGroup(self)

    def group_on(self, base: str | None) -> CommitGroup:
        """A group of consecutive commits on ``base`` (None: an empty history), whatever ``main`` is: for a
        branch kept elsewhere, written with ``CommitGroup.write`` and published there."""
        return CommitGroup(self, on_main=False, base=base)

    def write_commit(
        self,
        plan: Plan,
        base: str | None,
        message: str,
        author: Identity,
        job_id: str | None = None,
        committer: Identity = SERVICE,
        when: int | None = None,
        proof_key: bytes | None = None,
    ) -> str:
        """Write ``plan`` as one commit on ``base`` WITHOUT moving any ref: the objects are durable, then
        visible (the same order as a commit on ``main``, see ``worker.git.refs``) when this returns. For
        wikis whose branch lives in a remote: the commit is published there first, and ``main`` follows
        (``move_main``) once the remote accepted it. ``proof_key``: see ``_build_commit``.
        """
        with self.lock:
            commit, objects = self._build_commit(
                plan, base, message, author, job_id, committer, when, proof_key
            )
            self._write_durably(objects)
            return commit

    def _write_durably(self, objects: dict[bytes, PackedObject]) -> None:
        """Write ``objects`` as one pack, durable then visible, moving no ref (``write_commit``'s order)."""
        pending, absorbed = self._pack(objects)
        faults.point("git.pack_written")
        try:
            publish_durably(self.path, pending)
        finally:
            pending.discard()
        self._settle(pending, absorbed)

    def _pack(self, objects: dict[bytes, PackedObject]) -> tuple[PendingPack, list[str]]:
        """The pack of a commit's ``objects`` under temporary names, carrying the entries of the packs it
        rolls up (``worker.git.rollup``), and the names of those packs."""
        reader = self.packed
        self._since_listing += 1
        runs = self.maintenance.repacker.runs
        if self._since_listing > MAINTENANCE_CHECK_EVERY or runs != self._repacks_seen:
            # what else changes objects/pack (a background repack, an earlier writer) is seen in time
            reader.invalidate()
            self._since_listing = 1
            self._repacks_seen = runs
        reader.ensure_listed()  # a listing only when the writer's view may be stale (``PackReader``)
        own = encode(objects.values())
        absorbed: dict[str, Pack] = {}
        for name in rollup.choose(reader.infos, reader.pinned, rollup.pack_size(own)):
            if reader.pinned_now(name):
                continue
            pack = reader.load(name)
            if pack is None:
                reader.invalidate()  # gone (a repack, another writer): the next commit lists the folder
            elif pack.intact():  # never spread a damaged pack's bytes
                absorbed[name] = pack
        blocks = [pack.block() for pack in absorbed.values()]
        return write_pack(self.packs, {}, own, blocks), list(absorbed)

    def _settle(self, pending: PendingPack, absorbed: list[str]) -> None:
        """After ``pending`` is durable and published: read it from memory from now on (up to the size of
        packs a roll-up absorbs, mapped beyond), have the packs it absorbed deleted (their every entry is in
        it), and let ``Maintenance`` look at the rest."""
        reader = self.packed
        if pending.size <= rollup.ROLLUP_MAX_BYTES:
            pack: Pack | None = Pack(pending.idx, b"".join(pending.chunks))
        else:
            pack = PACKS.get(pending.base)
        if pack is not None:
            reader.add(pending.stem, pack.built(pending.entries))
        faults.point("git.rollup_delete")
        for name in absorbed:
            reader.retire(name)
        self.maintenance.committed(
            lambda: len(reader.infos) - len(rollup.candidates(reader.infos, reader.pinned))
        )

    def move_main(
        self, expected: str | None, new: str, durable: bool = True, epoch: int | None = None
    ) -> None:
        """Move ``main`` from ``expected`` to ``new`` (objects already on disk); ``RefMoved`` if it moved.

        ``durable=False`` skips the flush (a remote-backed wiki's cache: its branch lives in the remote);
        ``epoch``: the writer's lease epoch, carried by ``main.lock`` (``worker.git.refs``)."""
        with self.lock:
            swap_main(self.path, expected, new, durable=durable, epoch=epoch)

    def _build_commit(
        self,
        plan: Plan,
        base: str | None,
        message: str,
        author: Identity,
        job_id: str | None,
        committer: Identity,
        when: int | None,
        proof_key: bytes | None = None,
    ) -> tuple[str, dict[bytes, PackedObject]]:
        """The commit id of ``plan`` on ``base`` and the new objects it needs (caches updated); a job's
        commit carries its ``Wikiq-Proof`` under ``proof_key`` when one is given."""
        base_tree = self.tree_of(base) if base is not None else None
        objects: dict[bytes, PackedObject] = {}
        replaced: list[str] = []
        written = self._write_tree(base_tree, plan.changes, objects, replaced)
        if written is None:
            empty = bytes.fromhex(object_id("tree", b""))
            objects[empty] = PackedObject(OBJ_TREE, empty, b"")
            tree = empty.hex()
        else:
            tree = written[0]
        when = int(time.time()) if when is None else when
        text = message.replace("\x00", "").rstrip("\n") + "\n"  # git fsck refuses NUL in a commit
        if job_id is not None:  # the job trailer last (the contract's), its proof right before it
            if not _ends_with_trailers(text):  # else they join the message's trailers (Approved-by: ...)
                text += "\n"
            if proof_key is not None:
                text += f"{PROOF_TRAILER}: {job_proof(proof_key, job_id, tree)}\n"
            text += f"{JOB_TRAILER}: {job_id}\n"
        body = b"tree %s\n" % tree.encode()
        if base is not None:
            body += b"parent %s\n" % base.encode()
        body += b"author %s\ncommitter %s\n\n" % (author.line(when), committer.line(when))
        body += text.encode("utf-8")
        commit_oid = bytes.fromhex(object_id("commit", body))
        objects[commit_oid] = PackedObject(OBJ_COMMIT, commit_oid, body)
        commit = commit_oid.hex()
        self.commit_trees.put(commit, tree)
        self.trees.demote(replaced)
        return commit, objects


class CommitGroup:
    """Consecutive commits on ``main``, each its own commit, landed as ONE pack with ONE ``syncfs`` and ONE
    compare-and-swap of ``main`` (from the head when the group was opened to its last commit).

    Used as a context manager, which holds the repository's lock: ``snapshot()`` is the view of the last
    commit added (its new objects, not on disk yet, are read from memory), ``add`` builds the next commit
    on it, ``land`` writes and publishes them all in the order of ``worker.git.refs`` and moves ``main``.
    ``RefMoved`` / ``RefLocked`` from ``land`` mean nothing of the group is on ``main`` (its pack is
    deleted). Leaving the block without ``land`` drops every commit of the group. A group opened on a given
    base (``WikiRepo.group_on``) never moves ``main``: ``write`` makes its commits durable as one pack.
    """

    def __init__(self, repo: WikiRepo, on_main: bool = True, base: str | None = None) -> None:
        self.repo = repo
        self.on_main = on_main  # False: the group is on ``base``, and only ``write`` lands it
        self.base: str | None = base
        self.head: str | None = base
        self.commits: list[str] = []
        self.objects: dict[bytes, PackedObject] = {}

    def __enter__(self) -> CommitGroup:
        self.repo.lock.acquire()
        if self.on_main:
            self.base = self.head = self.repo.head()
        self.repo._pending = self.objects
        return self

    def __exit__(self, *exc: object) -> None:
        self.repo._pending = {}
        self.repo.lock.release()

    def snapshot(self) -> Snapshot:
        """The engine's view of the group's last commit (the head when none was added yet)."""
        if self.head is None:
            return Snapshot(self.repo, None, None)
        return self.repo.snapshot(self.head)

    def add(
        self,
        plan: Plan,
        message: str,
        author: Identity,
        job_id: str | None = None,
        committer: Identity = SERVICE,
        when: int | None = None,
        proof_key: bytes | None = None,
    ) -> str:
        """Build ``plan`` as a commit on the group's last one; its id (nothing is written yet)."""
        commit, objects = self.repo._build_commit(
            plan, self.head, message, author, job_id, committer, when, proof_key
        )
        self.objects.update(objects)
        self.commits.append(commit)
        self.head = commit
        return commit

    def land(self, epoch: int | None = None) -> None:
        """Write every commit of the group as one pack and move ``main`` from ``base`` to the last one
        (durable when this returns), under a ``main.lock`` of lease epoch ``epoch``; nothing to do for a
        group without commits."""
        if not self.commits:
            return
        assert self.head is not None and self.on_main
        repo = self.repo
        pending, absorbed = repo._pack(self.objects)
        faults.point("git.pack_written")
        swap_main(repo.path, self.base, self.head, pending, epoch=epoch)
        repo._settle(pending, absorbed)

    def write(self) -> None:
        """Write every commit of the group as one pack, durable then visible, moving NO ref (the order of
        ``WikiRepo.write_commit``): a branch kept elsewhere is then moved there; nothing to do for a group
        without commits."""
        if self.commits:
            self.repo._write_durably(self.objects)


_TRAILER_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*: \S.*")


def _ends_with_trailers(text: str) -> bool:
    """True when the last paragraph of ``text`` (after a first one) is all ``Key: value`` lines and names
    no ``Wikiq-`` key: git's trailer block (``Approved-by: ...``), which wikiq's own trailers then extend
    instead of starting another. A block naming a wikiq key stays apart, so git never reads a trailer a
    person typed as wikiq's."""
    paragraphs = text.rstrip("\n").split("\n\n")
    lines = paragraphs[-1].split("\n")
    return (
        len(paragraphs) > 1
        and all(_TRAILER_LINE.fullmatch(line) for line in lines)
        and not any(line.lower().startswith("wikiq-") for line in lines)
    )
