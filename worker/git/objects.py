"""Git objects in memory and on disk, without git: tree records, tree parsing, and one-pack-per-commit writes.

A ``Tree`` keeps two parallel lists: ``keys`` (git's sort key: the name, plus ``/`` for a folder), bisected
for lookups, and ``recs`` (the raw ``<mode> <name>\\0<id>`` record). A changed tree is the old one with a
few records swapped in by bisection and serialised with one ``b"".join``; its cost follows the number of
changes, not the size of the folder (bar two list copies).

``write_pack`` stores the objects of one commit as one version-2 pack and its ``.idx``, written under
``tmp_`` names (which ``git gc`` cleans up if we die) and renamed into place: two new files per commit instead
of one per object. Creating a file is the dominant cost of a small write on the file systems wikiq runs on.
The same pack may carry entries copied byte for byte from earlier undeltified packs (a roll-up, see
``worker.git.rollup``). Reading packs is ``worker.git.packs``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import secrets
import struct
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

TREE_MODE = 0o40000
OBJ_COMMIT, OBJ_TREE, OBJ_BLOB, OBJ_TAG = 1, 2, 3, 4
TYPE_NAMES = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob", OBJ_TAG: b"tag"}
# zlib level per object type (None: stored blocks, see ``stored_zlib``). Blobs and commits: git's
# core.looseCompression default, speed over size. Trees are mostly 20-byte ids, which deflate saves little
# on for much more time (docs/benchmarks.md, "Measurements behind choices"); a repack deltifies them.
COMPRESSION: dict[int, int | None] = {OBJ_COMMIT: 1, OBJ_TREE: None, OBJ_BLOB: 1}
# Objects up to this size are stored whatever their type: setting up a deflate stream costs several times
# the copy of a small page or commit, and saves less than a kilobyte, which later roll-ups copy and a
# background repack compresses anyway.
STORED_MAX_BYTES = 2048
_STORED_BLOCK = 0xFFFF
_IOV_MAX = 1024
_ZLIB_STORED = b"\x78\x01"  # a zlib header: deflate, 32 KiB window, no dictionary, fastest
_BLOCK_HEADER = struct.Struct("<BHH")  # a stored block: final flag, length, its one's complement
_ADLER = struct.Struct(">I")
IDX_MAGIC = b"\377tOc" + struct.pack(">I", 2)


def object_id(kind: bytes, data: bytes) -> bytes:
    """The binary git object id of ``data`` stored as ``kind`` (b"blob", b"tree", b"commit")."""
    digest = hashlib.sha1(b"%s %d\x00" % (kind, len(data)))
    digest.update(data)
    return digest.digest()


def encode_name(name: str) -> bytes:
    """A tree entry name as git stores it (names that were not UTF-8 round-trip through surrogates)."""
    return name.encode("utf-8", "surrogateescape")


def sort_key(name: bytes, mode: int) -> bytes:
    """Git's tree order: by name bytes, a folder compared as if its name ended in ``/``."""
    return name + b"/" if mode == TREE_MODE else name


_MODES = {b"%o" % mode: mode for mode in (0o100644, 0o100755, TREE_MODE, 0o120000, 0o160000)}


def _record_entry(rec: bytes) -> tuple[int, str]:
    """``(mode, hex id)`` of a raw ``<mode> <name>\\0<id>`` record."""
    mode = rec[: rec.index(b" ")]
    return _MODES.get(mode) or int(mode, 8), rec[-20:].hex()


def _search(keys: list[bytes], name: str) -> int:
    """The index of entry ``name`` (a file or a folder) in git-ordered ``keys``, or -1."""
    raw = encode_name(name)
    at = bisect_left(keys, raw)
    if at < len(keys) and keys[at] == raw:
        return at
    raw += b"/"  # a folder sorts as if its name ended in "/", so after a file of that name
    at = bisect_left(keys, raw, at)
    return at if at < len(keys) and keys[at] == raw else -1


class Tree:
    """One parsed tree, immutable once built: its raw records in git order and their sort keys.

    Only bytes are kept (no per-entry tuples or strings): a cold 100-entry folder parses in half the time
    of a ``{name: (mode, id)}`` dict, and holds less memory and less work for the garbage collector.
    Lookups bisect the keys.
    """

    __slots__ = ("keys", "recs")

    def __init__(self, keys: list[bytes], recs: list[bytes]) -> None:
        self.keys = keys
        self.recs = recs

    @property
    def size(self) -> int:
        """How many entries the tree has (the unit of the tree cache's budget)."""
        return len(self.keys)

    def find(self, name: str) -> tuple[int, str] | None:
        """``(mode, hex id)`` of entry ``name``, or None (``_search`` inlined: the engine's most frequent
        question)."""
        keys = self.keys
        raw = name.encode("utf-8", "surrogateescape")
        at = bisect_left(keys, raw)
        if at < len(keys) and keys[at] == raw:
            return _record_entry(self.recs[at])
        raw += b"/"
        at = bisect_left(keys, raw, at)
        return _record_entry(self.recs[at]) if at < len(keys) and keys[at] == raw else None

    def items(self) -> Iterator[tuple[str, tuple[int, str]]]:
        """Every ``(name, (mode, hex id))``, in git order."""
        for rec in self.recs:
            name = rec[rec.index(b" ") + 1 : -21]
            yield name.decode("utf-8", "surrogateescape"), _record_entry(rec)

    def data(self) -> bytes:
        """The tree object's bytes."""
        return b"".join(self.recs)


EMPTY_TREE = Tree([], [])
_RECORD = re.compile(rb"([0-7]+ ([^\x00]*)\x00.{20})", re.DOTALL)  # (record, name): one pass for both
_TREE_MODE_DIGIT = ord("4")  # of the modes git writes, only a folder's ("40000") starts with 4


def parse_tree(data: bytes) -> Tree:
    """Parse a raw tree object from the repository's store (an unsorted one is put in git order)."""
    found = _RECORD.findall(data)
    recs = [rec for rec, _ in found]
    if sum(map(len, recs)) != len(data):  # records that do not tile the object: something in between
        raise ValueError("malformed tree object")
    folder = _TREE_MODE_DIGIT
    keys = [name + b"/" if rec[0] == folder else name for rec, name in found]
    if keys != sorted(keys):  # linear on sorted input (one run for timsort)
        pairs = sorted(zip(keys, recs, strict=True))
        keys, recs = [key for key, _ in pairs], [rec for _, rec in pairs]
    return Tree(keys, recs)


class TreeEditor:
    """A copy of a tree being changed: ``remove`` and ``put`` entries, then ``build`` the new tree."""

    __slots__ = ("keys", "recs")

    def __init__(self, base: Tree) -> None:
        self.keys = list(base.keys)
        self.recs = list(base.recs)

    def __len__(self) -> int:
        return len(self.keys)

    def get(self, name: str) -> tuple[int, str] | None:
        at = _search(self.keys, name)
        return None if at < 0 else _record_entry(self.recs[at])

    def remove(self, name: str) -> None:
        at = _search(self.keys, name)
        if at >= 0:
            del self.keys[at]
            del self.recs[at]

    def put(self, name: str, mode: int, oid: str | bytes, keep_exec: bool = False) -> None:
        """Set entry ``name`` to ``oid`` (hex or binary), replacing whatever was there; ``keep_exec``: an
        executable stays one."""
        keys, recs = self.keys, self.recs
        raw = name.encode("utf-8", "surrogateescape")
        binary = bytes.fromhex(oid) if isinstance(oid, str) else oid
        at = bisect_left(keys, raw)
        if at < len(keys) and keys[at] == raw:  # a file (or link) of that name
            if keep_exec and recs[at].startswith(b"100755 "):
                mode = 0o100755
            if mode != TREE_MODE:  # the same key: the record changes in place
                recs[at] = b"%o %s\x00%s" % (mode, raw, binary)
                return
            del keys[at], recs[at]
        else:
            folder = raw + b"/"
            below = bisect_left(keys, folder, at)
            if below < len(keys) and keys[below] == folder:
                if mode == TREE_MODE:  # a folder replaced by a folder: in place too
                    recs[below] = b"%o %s\x00%s" % (mode, raw, binary)
                    return
                del keys[below], recs[below]
        if mode == TREE_MODE:
            raw_key = raw + b"/"
            at = bisect_left(keys, raw_key, at)
        else:
            raw_key = raw
        keys.insert(at, raw_key)
        recs.insert(at, b"%o %s\x00%s" % (mode, raw, binary))

    def build(self) -> Tree:
        return Tree(self.keys, self.recs)


class PackedObject(NamedTuple):
    """One object for ``write_pack``: its type number, binary id and bytes (a tuple: a commit makes a
    dozen or more, and a frozen dataclass costs several times as much to build)."""

    kind: int
    oid: bytes
    data: bytes


def stored_zlib(data: bytes) -> bytes:
    """``data`` as a zlib stream of stored (uncompressed) blocks: what level 0 gives, without the cost of
    setting up a deflate state (~50 us, more than the copy for a tree of 100 entries)."""
    size = len(data)
    if 0 < size <= _STORED_BLOCK:  # one block: the common case, in one join
        return b"".join(_one_stored_block(data))
    out = [_ZLIB_STORED]
    if not size:
        out.append(b"\x01\x00\x00\xff\xff")
    for start in range(0, size, _STORED_BLOCK):
        block = data[start : start + _STORED_BLOCK]
        last = start + _STORED_BLOCK >= size
        out.append(_BLOCK_HEADER.pack(last, len(block), len(block) ^ 0xFFFF))
        out.append(block)
    out.append(_ADLER.pack(zlib.adler32(data)))
    return b"".join(out)


def _one_stored_block(data: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """The pieces of ``stored_zlib(data)`` for 1 to 65 535 bytes: zlib header, one final stored block,
    Adler-32."""
    size = len(data)
    return _ZLIB_STORED, _BLOCK_HEADER.pack(1, size, size ^ 0xFFFF), data, _ADLER.pack(zlib.adler32(data))


def _compress(kind: int, data: bytes) -> bytes:
    """``data`` deflated at its type's level, with a window no bigger than it needs (stored when small).

    A default deflate state is ~256 KB, which glibc maps and unmaps on every call: 50-80 us for a page of
    300 bytes. Sizing window and hash to the input (both are stream parameters any inflater accepts) keeps
    the ratio and costs ~8 us.
    """
    level = COMPRESSION[kind]
    if level is None or len(data) <= STORED_MAX_BYTES:
        return stored_zlib(data)
    wbits = max(9, min(15, (len(data) + 262).bit_length()))  # 262: deflate's minimum lookahead
    deflate = zlib.compressobj(level, zlib.DEFLATED, wbits, max(1, min(8, wbits - 7)))
    return deflate.compress(data) + deflate.flush()


def _entry_header(kind: int, size: int) -> bytes:
    """A pack entry's type-and-size header (4 bits of size, then 7 per continuation byte)."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _raw_entry(kind: int, data: bytes) -> bytes:
    """A pack entry of ``data``: its header and compressed bytes (a small or stored object in one join)."""
    size = len(data)
    level = COMPRESSION[kind]
    if 0 < size <= _STORED_BLOCK and (level is None or size <= STORED_MAX_BYTES):
        return b"".join((_entry_header(kind, size), *_one_stored_block(data)))
    return _entry_header(kind, size) + _compress(kind, data)


def encode(objects: Iterable[PackedObject]) -> list[tuple[bytes, bytes]]:
    """``(oid, raw entry)`` of each object: its pack entry header and compressed bytes."""
    return [(obj.oid, _raw_entry(obj.kind, obj.data)) for obj in objects]


Entry = tuple[bytes, int, int]  # (oid, crc32, offset) of one pack entry
Piece = bytes | memoryview  # a piece of a pack being written (a view: copied from a pack in memory)
Block = tuple[Piece, list[Entry]]  # consecutive raw entries; (oid, crc32, offset in the block) of each


def build_pack(
    objects: Iterable[PackedObject], copied: Iterable[tuple[bytes, bytes]] = (), blocks: Iterable[Block] = ()
) -> tuple[list[Piece], bytes, str]:
    """``(pack chunks, idx bytes, pack name)`` of ``objects`` (ids unique), then of ``copied`` entries, then
    of ``blocks``: an undeltified version-2 pack.

    ``copied`` holds ``(oid, raw entry)`` pairs (from ``encode``); ``blocks`` the entries of whole packs a
    roll-up absorbs, each copied as one piece with the CRCs its index already had (entry by entry, skipping
    ids already in the pack, when it shares one). The pack is returned as the list of its pieces (to be
    written with one ``writev``, never joined).
    """
    chunks, idx, name, _ = _assemble(objects, copied, blocks)
    return chunks, idx, name


def _assemble(
    objects: Iterable[PackedObject], copied: Iterable[tuple[bytes, bytes]], blocks: Iterable[Block]
) -> tuple[list[Piece], bytes, str, list[Entry]]:
    """``build_pack``, and the pack's entries in pack order (what a later roll-up of it copies)."""
    chunks: list[Piece] = [b""]  # the header, once the count is known
    digest = hashlib.sha1()
    index: list[Entry] = []
    offset = 12
    seen: set[bytes] = set()
    for oid, raw in itertools.chain(encode(objects), copied):
        if oid in seen:
            continue
        seen.add(oid)
        chunks.append(raw)
        index.append((oid, zlib.crc32(raw), offset))
        offset += len(raw)
    for data, entries in blocks:
        oids = [oid for oid, _, _ in entries]
        if seen.isdisjoint(oids):
            chunks.append(data)
            index += [(oid, crc, offset + at) for oid, crc, at in entries]
            seen.update(oids)
            offset += len(data)
            continue
        ends = [at for _, _, at in entries[1:]] + [len(data)]
        for (oid, crc, at), end in zip(entries, ends, strict=True):
            if oid not in seen:
                seen.add(oid)
                chunks.append(data[at:end])
                index.append((oid, crc, offset))
                offset += end - at
    count = len(index)
    chunks[0] = b"PACK" + struct.pack(">II", 2, count)
    for chunk in chunks:
        digest.update(chunk)
    checksum = digest.digest()
    chunks.append(checksum)
    entries = list(index)
    index.sort()
    oids = [oid for oid, _, _ in index]
    counts = [0] * 256
    for oid in oids:
        counts[oid[0]] += 1
    fanout = list(itertools.accumulate(counts))
    large: list[int] = []
    offsets = [at for _, _, at in index]
    if offset >= 0x80000000:  # a pack past 2 GiB: its far offsets go to the 64-bit table
        for i, at in enumerate(offsets):
            if at >= 0x80000000:
                offsets[i] = 0x80000000 | len(large)
                large.append(at)
    idx = b"".join(
        [
            IDX_MAGIC,
            struct.pack(">256I", *fanout),
            b"".join(oids),
            struct.pack(f">{count}I", *[crc for _, crc, _ in index]),
            struct.pack(f">{count}I", *offsets),
            struct.pack(f">{len(large)}Q", *large),
            checksum,
        ]
    )
    idx += hashlib.sha1(idx).digest()
    return chunks, idx, checksum.hex(), entries


@dataclass
class PendingPack:
    """A pack written under temporary names in ``objects/pack``; ``publish`` renames it into place.

    Publishing does not make anything durable: the caller flushes the temporary files to disk first (see
    ``worker.git.refs``), so a pack is never visible under its real name before its bytes are on disk.
    """

    pack_dir: Path
    name: str
    tmp_pack: str | None
    tmp_idx: str | None
    chunks: list[Piece]  # the pack's bytes, as written (kept to serve reads without reading the file back)
    idx: bytes
    entries: list[Entry]  # (oid, crc32, offset) of each entry, in pack order

    @property
    def size(self) -> int:
        """The pack's size in bytes."""
        return sum(map(len, self.chunks))

    @property
    def stem(self) -> str:
        """``pack-<checksum>``: the name of its files without extension."""
        return f"pack-{self.name}"

    @property
    def base(self) -> str:
        """The path of its files without extension, once published."""
        return os.path.join(self.pack_dir, self.stem)

    def publish(self) -> None:
        """Rename pack then index into place (git's order: an index must never name a missing pack)."""
        assert self.tmp_pack is not None and self.tmp_idx is not None
        base = self.base
        os.rename(self.tmp_pack, base + ".pack")
        self.tmp_pack = None
        os.rename(self.tmp_idx, base + ".idx")
        self.tmp_idx = None

    def discard(self) -> None:
        """Remove whatever was not published."""
        for path in (self.tmp_pack, self.tmp_idx):
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        self.tmp_pack = self.tmp_idx = None


def _write_new(path: str, chunks: list[Piece]) -> None:
    """Create ``path`` (which must not exist) read-only, holding ``chunks``; removed again on failure."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        total = sum(map(len, chunks))
        written = os.writev(fd, chunks) if len(chunks) <= _IOV_MAX else 0
        if written < total:  # a short write (or too many pieces): finish with plain writes
            view = memoryview(b"".join(chunks))[written:]
            while view:
                view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    os.close(fd)


def write_pack(
    pack_dir: Path,
    objects: Mapping[bytes, PackedObject],
    copied: Iterable[tuple[bytes, bytes]] = (),
    blocks: Iterable[Block] = (),
) -> PendingPack:
    """Write ``objects`` (and ``copied`` raw entries and ``blocks``, see ``build_pack``) as one pack + index
    under ``tmp_`` names in ``pack_dir``: not yet visible to git, not yet durable."""
    pack, idx, name, entries = _assemble(objects.values(), copied, blocks)
    token = secrets.token_hex(8)
    where = os.fspath(pack_dir)
    pending = PendingPack(
        pack_dir,
        name,
        os.path.join(where, f"tmp_pack_{token}"),
        os.path.join(where, f"tmp_idx_{token}"),
        pack,
        idx,
        entries,
    )
    try:
        assert pending.tmp_pack is not None and pending.tmp_idx is not None
        try:
            _write_new(pending.tmp_pack, pack)
        except FileNotFoundError:  # a repository without objects/pack yet
            pack_dir.mkdir(parents=True, exist_ok=True)
            _write_new(pending.tmp_pack, pack)
        _write_new(pending.tmp_idx, [idx])
    except BaseException:
        pending.discard()
        raise
    return pending
