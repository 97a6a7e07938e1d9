"""Reading packs in process: ``Pack`` (one pack and its index), ``PackCache`` (every pack a process has
opened, shared by all its repositories) and ``PackReader`` (one repository's ``objects/pack``).

A pack named ``pack-<checksum>`` never changes, so what a process learns about it holds for good: its size
and whether it holds only whole objects (``PackInfo``, kept for many packs) and, while it is used, its
bytes. Reopening an evicted repository costs one listing of ``objects/pack`` and dictionary lookups; a
pack's bytes are loaded only when an object is read from it or a commit rolls it up (and a commit on a warm
tree cache reads none). Small packs (wikiq writes one per commit, and rolls them up while they are small)
are read into memory and hold no file descriptor, as are the packs this process builds, up to the size of
those a roll-up absorbs (their bytes are at hand, and a later roll-up copies them); bigger ones are
memory-mapped (Python's ``mmap`` keeps a duplicate descriptor for each, hence the cap on mapped packs).
The cache is bounded by the bytes it holds in memory and by the number of packs it maps; a pack it drops
stays usable by the readers still holding it and is unmapped when the last one lets go (no reader ever sees
a closed map).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from worker import faults
from worker.git.objects import IDX_MAGIC, TYPE_NAMES, Block, Entry, Piece, object_id
from worker.lru import Lru

OBJ_OFS_DELTA, OBJ_REF_DELTA = 6, 7
MAX_DELTA_CHAIN = 1000  # git's own pack.depth limit is 4095; a longer chain is left to git cat-file
IN_MEMORY_BYTES = 256 * 1024  # a pack (or index) up to this size is read into memory, bigger ones mapped
PACK_CACHE_BYTES = 16 << 20  # bytes of in-memory packs the process-wide cache keeps
PACK_CACHE_MAPPED = 128  # mapped packs the process-wide cache keeps (two descriptors each)
PACK_INFOS = 32_768  # packs whose size and kind the process remembers (~100 bytes each)
WHOLE_CHECK_MAX_BYTES = 8 << 20  # bigger packs are never rolled up: not worth checking their entries
RACY_NS = 50_000_000  # a listing this close to the folder's mtime may have missed a same-tick change

Buffer = bytes | mmap.mmap


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A delta header's little-endian base-128 size at ``pos``: (value, next position)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """Git's delta format: copy ranges of ``base`` and insert literal bytes."""
    size, pos = _varint(delta, 0)
    if size != len(base):
        raise ValueError("delta base size mismatch")
    size, pos = _varint(delta, pos)
    out: list[bytes] = []
    end = len(delta)
    while pos < end:
        op = delta[pos]
        pos += 1
        if op & 0x80:
            offset = length = 0
            for bit, shift in ((0x01, 0), (0x02, 8), (0x04, 16), (0x08, 24)):
                if op & bit:
                    offset |= delta[pos] << shift
                    pos += 1
            for bit, shift in ((0x10, 0), (0x20, 8), (0x40, 16)):
                if op & bit:
                    length |= delta[pos] << shift
                    pos += 1
            length = length or 0x10000
            if offset + length > len(base):
                raise ValueError("delta copies past the end of its base")
            out.append(base[offset : offset + length])
        elif op:
            if pos + op > len(delta):
                raise ValueError("delta insert runs past its end")
            out.append(delta[pos : pos + op])
            pos += op
        else:
            raise ValueError("delta opcode 0")
    result = b"".join(out)
    if len(result) != size:
        raise ValueError("delta result size mismatch")
    return result


def _load(path: str) -> Buffer:
    """The bytes of ``path``: read whole when small, else memory-mapped (read-only)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size <= IN_MEMORY_BYTES:
            return file.read()
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


class Pack:
    """One pack and its version-2 index (in memory or mapped); immutable, shared between readers."""

    def __init__(self, idx: Buffer, pack: Buffer, ours: bool = False) -> None:
        """``ours``: a pack this process just built (whole objects only, checksum known good)."""
        self.idx = idx
        self.pack = pack
        if idx[:8] != IDX_MAGIC or pack[:4] != b"PACK" or len(idx) < 8 + 1024:
            self.close()
            raise ValueError("not a version-2 pack and index")
        self.fanout = struct.unpack_from(">256I", idx, 8)
        self.count = self.fanout[255]
        self.names = 8 + 1024
        self.offsets = self.names + 24 * self.count  # after the names and the crc32s
        self.large = self.offsets + 4 * self.count
        if len(idx) < self.large + 40:
            self.close()
            raise ValueError("truncated pack index")
        self.nbytes = len(pack)
        self.mapped = isinstance(pack, mmap.mmap) or isinstance(idx, mmap.mmap)
        self.memory = 0 if self.mapped else len(idx) + len(pack)
        self._layout: list[tuple[bytes, int, int, int]] | None = None
        self._entries: list[Entry] | None = None  # a pack this process built: its entries, as built
        self._whole: bool | None = True if ours else None
        self._intact: bool | None = True if ours else None

    @classmethod
    def open(cls, idx_path: str, pack_path: str) -> Pack:
        """The pack at ``pack_path``, indexed by ``idx_path``; ``OSError``/``ValueError`` if unusable."""
        idx = _load(idx_path)
        try:
            pack = _load(pack_path)
        except BaseException:
            if isinstance(idx, mmap.mmap):
                idx.close()
            raise
        return cls(idx, pack)

    def built(self, entries: list[Entry]) -> Pack:
        """Mark this pack as one this process just built: whole objects only, checksum known good, and
        ``entries`` (``(oid, crc32, offset)`` in pack order) its layout, so that nothing of it is parsed
        again. Returns the pack."""
        self._entries = entries
        self._whole = self._intact = True
        return self

    def close(self) -> None:
        """Unmap a mapped pack (only for a pack no reader shares: tests, or one that failed to open)."""
        for buffer in (self.idx, self.pack):
            if isinstance(buffer, mmap.mmap):
                buffer.close()

    def find(self, oid: bytes) -> int | None:
        """The offset of ``oid`` in the pack, or None."""
        idx, names = self.idx, self.names
        first = oid[0]
        lo = self.fanout[first - 1] if first else 0
        hi = self.fanout[first]
        while lo < hi:
            mid = (lo + hi) // 2
            at = names + 20 * mid
            name = idx[at : at + 20]
            if name < oid:
                lo = mid + 1
            elif name > oid:
                hi = mid
            else:
                (offset,) = struct.unpack_from(">I", idx, self.offsets + 4 * mid)
                if offset & 0x80000000:
                    (offset,) = struct.unpack_from(">Q", idx, self.large + 8 * (offset & 0x7FFFFFFF))
                return int(offset)
        return None

    def layout(self) -> list[tuple[bytes, int, int, int]]:
        """Every entry as ``(oid, crc32, start, end)`` in pack order (what a roll-up copies)."""
        if self._layout is None and self._entries is not None:
            entries = self._entries
            ends = [start for _, _, start in entries[1:]] + [self.nbytes - 20]
            self._layout = [
                (oid, crc, start, end) for (oid, crc, start), end in zip(entries, ends, strict=True)
            ]
        if self._layout is None:
            count, idx = self.count, self.idx
            offsets = list(struct.unpack_from(f">{count}I", idx, self.offsets))
            for i, offset in enumerate(offsets):
                if offset & 0x80000000:
                    (offsets[i],) = struct.unpack_from(">Q", idx, self.large + 8 * (offset & 0x7FFFFFFF))
            crcs = struct.unpack_from(f">{count}I", idx, self.names + 20 * count)
            names = bytes(idx[self.names : self.names + 20 * count])
            starts = sorted(
                (offset, names[20 * i : 20 * i + 20], crcs[i]) for i, offset in enumerate(offsets)
            )
            ends = [start for start, _, _ in starts[1:]] + [self.nbytes - 20]
            self._layout = [
                (oid, crc, start, end) for (start, oid, crc), end in zip(starts, ends, strict=True)
            ]
        return self._layout

    def block(self) -> Block:
        """Every entry as one block of bytes, and ``(oid, crc32, offset in the block)`` of each: what a
        roll-up copies in one piece (the CRCs are the index's, already computed). The block of a pack in
        memory is a view of its bytes, which never change; a mapped pack's is a copy, since no view may
        outlive its map."""
        pack = self.pack
        end = self.nbytes - 20
        data: Piece = memoryview(pack)[12:end] if isinstance(pack, bytes) else bytes(pack[12:end])
        if self._entries is not None:
            return data, [(oid, crc, start - 12) for oid, crc, start in self._entries]
        return data, [(oid, crc, start - 12) for oid, crc, start, _ in self.layout()]

    @property
    def whole(self) -> bool:
        """True when every entry is a whole object (no delta): its entries can be copied byte for byte into
        another pack. wikiq's own packs are; git's repacks are not."""
        if self._whole is None:
            pack, idx, count = self.pack, self.idx, self.count
            offsets = struct.unpack_from(f">{count}I", idx, self.offsets)  # index order: no sort needed
            large = self.large
            whole = True
            for offset in offsets:
                if offset & 0x80000000:
                    (offset,) = struct.unpack_from(">Q", idx, large + 8 * (offset & 0x7FFFFFFF))
                if (pack[offset] >> 4) & 7 not in TYPE_NAMES:
                    whole = False  # git's packs: a delta comes within the first few entries
                    break
            self._whole = whole
        return self._whole

    def intact(self) -> bool:
        """True when the pack's trailing checksum matches its bytes (checked once, before copying them; a
        pack this process built from memory is taken as it is)."""
        if self._intact is None:
            body = memoryview(self.pack)[: self.nbytes - 20]
            try:
                self._intact = hashlib.sha1(body).digest() == self.pack[self.nbytes - 20 : self.nbytes]
            finally:
                body.release()
        return self._intact

    def _inflate(self, start: int, size: int) -> bytes:
        # The input is bounded: zlib keeps a copy of whatever input it did not use (``unused_data``), and
        # "the rest of the pack" would be megabytes per read. Deflate grows data by at most ~0.1% + 11.
        view = memoryview(self.pack)
        try:
            inflater = zlib.decompressobj()
            end = min(len(view), start + size + (size >> 10) + 64)
            data = inflater.decompress(view[start:end])
            while not inflater.eof and end < len(view):
                start, end = end, min(len(view), end + 65536)
                data += inflater.decompress(view[start:end])
        finally:
            view.release()
        if len(data) != size or not inflater.eof:
            raise ValueError("corrupt pack entry")
        return data

    def object_size(self, offset: int) -> int | None:
        """The size of the object at ``offset`` without building it (a delta's header says its result's)."""
        pack = self.pack
        kind, size, pos = _entry_header(pack, offset)
        if kind in TYPE_NAMES:
            return size
        if kind == OBJ_OFS_DELTA:
            while pack[pos] & 0x80:
                pos += 1
            pos += 1
        elif kind == OBJ_REF_DELTA:
            pos += 20
        else:
            return None
        head = zlib.decompressobj().decompress(bytes(pack[pos : pos + 64]), 32)
        _, at = _varint(head, 0)  # the base's size, then the result's
        result, _ = _varint(head, at)
        return result

    def read(self, offset: int) -> tuple[int, bytes] | None:
        """``(type, bytes)`` of the entry at ``offset``, deltas resolved; None when a base is elsewhere."""
        pack = self.pack
        chain: list[bytes] = []
        while True:
            kind, size, pos = _entry_header(pack, offset)
            if kind in TYPE_NAMES:
                data = self._inflate(pos, size)
                for delta in reversed(chain):
                    data = apply_delta(data, delta)
                return kind, data
            if len(chain) >= MAX_DELTA_CHAIN:
                return None
            if kind == OBJ_OFS_DELTA:
                byte = pack[pos]
                pos += 1
                back = byte & 0x7F
                while byte & 0x80:
                    byte = pack[pos]
                    pos += 1
                    back = ((back + 1) << 7) | (byte & 0x7F)
                chain.append(self._inflate(pos, size))
                offset -= back
            elif kind == OBJ_REF_DELTA:
                base = self.find(bytes(pack[pos : pos + 20]))
                if base is None:
                    return None
                chain.append(self._inflate(pos + 20, size))
                offset = base
            else:
                return None


def _entry_header(pack: Buffer, offset: int) -> tuple[int, int, int]:
    """``(type, size, offset of what follows)`` of the pack entry at ``offset`` (git's variable-length
    header: the type in bits 4-6 of the first byte, the size in 4 bits then 7 bits a byte)."""
    byte = pack[offset]
    kind = (byte >> 4) & 7
    size = byte & 0x0F
    shift, pos = 4, offset + 1
    while byte & 0x80:
        byte = pack[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
    return kind, size, pos


@dataclass(frozen=True)
class PackInfo:
    """What the roll-up needs to know of a pack without its bytes: its size, and if it holds whole objects
    only (False for packs over ``WHOLE_CHECK_MAX_BYTES``, never looked at)."""

    nbytes: int
    whole: bool


class PackCache:
    """Every pack the process has open, by path (``.../pack-<checksum>``), least recently used dropped first,
    and the ``PackInfo`` of many more.

    Bounded by the bytes of in-memory packs, by the number of mapped ones, and by ``PACK_INFOS``.
    Thread-safe.
    """

    def __init__(
        self, memory_bytes: int = PACK_CACHE_BYTES, mapped: int = PACK_CACHE_MAPPED, infos: int = PACK_INFOS
    ) -> None:
        self.memory_cap = memory_bytes
        self.mapped_cap = mapped
        self.packs: OrderedDict[str, Pack] = OrderedDict()
        self.infos: Lru[PackInfo] = Lru(infos)
        self.memory = 0
        self.mapped = 0
        self._lock = threading.Lock()
        self.retiring: OrderedDict[str, None] = OrderedDict()  # absorbed packs waiting to be deleted
        self._retired = threading.Condition(self._lock)
        self._deleter: threading.Thread | None = None

    def get(self, base: str) -> Pack | None:
        """The pack at ``base`` (``.idx``/``.pack``), opened now if not cached; None when it cannot be."""
        with self._lock:
            found = self._recent(base)
        if found is not None:
            return found
        try:
            pack = Pack.open(base + ".idx", base + ".pack")
        except (OSError, ValueError):
            return None
        return self.put(base, pack)

    def info(self, base: str) -> PackInfo | None:
        """The ``PackInfo`` of the pack at ``base``; None when it cannot be opened."""
        found = self.infos.get(base)
        if found is not None:
            return found
        try:
            nbytes = os.stat(base + ".pack").st_size
        except OSError:
            return None
        whole = False
        if nbytes <= WHOLE_CHECK_MAX_BYTES:
            pack = self.get(base)
            if pack is None:
                return None
            nbytes = pack.nbytes
            try:
                whole = pack.whole
            except (ValueError, IndexError, struct.error):
                whole = False
        info = PackInfo(nbytes, whole)
        self.remember(base, info)
        return info

    def remember(self, base: str, info: PackInfo) -> None:
        """Keep ``info`` as what is known of the pack at ``base``."""
        self.infos.put(base, info)

    def put(self, base: str, pack: Pack) -> Pack:
        """Keep ``pack`` as the pack at ``base`` (a pack already cached there wins); the cached pack."""
        with self._lock:
            found = self._recent(base)
            if found is not None:
                return found
            self.packs[base] = pack
            self.memory += pack.memory
            self.mapped += pack.mapped
            while len(self.packs) > 1 and (self.memory > self.memory_cap or self.mapped > self.mapped_cap):
                _, dropped = self.packs.popitem(last=False)
                self.memory -= dropped.memory
                self.mapped -= dropped.mapped
            return pack

    def _recent(self, base: str) -> Pack | None:
        """The pack cached at ``base``, now the most recently used (the lock held), or None."""
        found = self.packs.get(base)
        if found is not None:
            self.packs.move_to_end(base)
        return found

    def forget(self, base: str) -> None:
        """Drop the pack at ``base`` and what is known of it (it was deleted)."""
        self.infos.forget(base)
        with self._lock:
            dropped = self.packs.pop(base, None)
            if dropped is not None:
                self.memory -= dropped.memory
                self.mapped -= dropped.mapped

    def retire(self, base: str) -> None:
        """Forget the pack at ``base`` now and delete its files soon, in a background thread.

        For packs a roll-up absorbed (their every entry is durable in another pack): deleting a file is a
        journaled metadata operation (0.1-1 ms here, more with online discard), and the commit that absorbed
        them need not wait for it. Until then listings skip them (``retired``); a crash before leaves them
        on disk, where the next roll-up absorbs them again (duplicate objects are harmless).
        """
        self.forget(base)
        with self._lock:
            self.retiring[base] = None
            if self._deleter is None:
                self._deleter = threading.Thread(target=self._delete, name="wikiq pack deleter", daemon=True)
                self._deleter.start()
            self._retired.notify_all()

    def retired(self, base: str) -> bool:
        """True when the pack at ``base`` is absorbed and about to be deleted."""
        return base in self.retiring

    def wait_retired(self, timeout: float) -> bool:
        """Wait until every retired pack is deleted; False on timeout."""
        with self._lock:
            return self._retired.wait_for(lambda: not self.retiring, timeout)

    def _delete(self) -> None:
        while True:
            with self._lock:
                self._retired.wait_for(lambda: self.retiring)
                base = next(iter(self.retiring))
            unlink_pack(base)
            with self._lock:
                self.retiring.pop(base, None)
                self._retired.notify_all()

    def clear(self) -> None:
        """Drop every pack and every info."""
        with self._lock:
            self.packs.clear()
            self.memory = self.mapped = 0
        self.infos.clear()


PACKS = PackCache()  # the process's packs, shared by every PackReader


class PackReader:
    """Objects read straight from ``objects/pack`` (no ``git cat-file`` round trip), verified by hash.

    ``read`` returns None for anything it does not find or cannot resolve (loose objects, a base in
    another pack, a damaged entry): the caller then asks git. ``refresh`` lists the folder (``names``,
    biggest pack first, with their ``infos``; ``pinned``: packs git keeps or uses as cruft, with a
    ``.keep`` or ``.mtimes`` file) without loading any pack; a pack is loaded, through the process-wide
    cache, by the first lookup that reaches it. The reader keeps no pack itself, so the cache's bounds are
    the process's. The folder is listed again when an object is missing and ``objects/pack`` changed since
    the last look (or the last look was too close to a change to trust the folder's mtime).

    The writer's view (``listed``, ``ensure_listed``): the wiki's writer adds the packs it publishes and
    retires the ones it absorbs itself (``add``, ``retire``), so after one complete listing its list stays
    complete across commits without looking at the folder again, as long as nobody else changes it. It is
    the only writer of its wiki; what else may change the folder (this process's background ``git
    repack``, a writer that held the wiki before) is caught by ``invalidate``, which the writer calls
    when a repack ran and every few commits, and by a lookup that misses. Not thread-safe: callers
    serialise reads and writes.
    """

    def __init__(self, pack_dir: Path, cache: PackCache | None = None) -> None:
        self.pack_dir = pack_dir
        self._dir = os.fspath(pack_dir)
        self.cache = PACKS if cache is None else cache
        self.names: list[str] = []  # "pack-<checksum>", biggest first
        self.infos: dict[str, PackInfo] = {}
        self.pinned: set[str] = set()
        self.seen: int | None = None  # objects/pack's mtime (ns) at the last listing
        self.listed = False  # the writer's view is complete: a complete listing, then only add/retire

    def close(self) -> None:
        """Let go of the packs (the cache keeps what it can)."""
        self.names.clear()
        self.infos.clear()
        self.pinned.clear()
        self.seen = None
        self.listed = False

    def ensure_listed(self) -> None:
        """List the folder unless the writer's view is complete already (see the class)."""
        if not self.listed:
            self.refresh(force=True)

    def invalidate(self) -> None:
        """Have the next ``ensure_listed`` list the folder again."""
        self.listed = False

    def pinned_now(self, name: str) -> bool:
        """True when git keeps pack ``name`` or uses it as a cruft pack (``.keep``, ``.mtimes``) as of now,
        whatever the view says: checked (two stats) for each pack a roll-up is about to absorb, since git's
        cruft repack may have written a pack of the same name since the last listing."""
        base = self._base(name)
        if os.path.exists(base + ".keep") or os.path.exists(base + ".mtimes"):
            self.pinned.add(name)
            self.listed = False
            return True
        return False

    def _base(self, name: str) -> str:
        return f"{self._dir}/{name}"

    def refresh(self, force: bool = False) -> bool:
        """Re-list ``objects/pack`` if it changed (or ``force``); True when the pack list may have changed."""
        try:
            mtime = os.stat(self.pack_dir).st_mtime_ns
        except OSError:
            return False
        if mtime == self.seen and not force:
            return False
        try:
            listing = os.listdir(self.pack_dir)
        except OSError:
            return False
        names: set[str] = set()
        pinned: set[str] = set()
        for name in listing:
            if name.startswith("pack-"):
                stem, dot, ext = name.rpartition(".")
                if ext == "idx":
                    names.add(stem)
                elif dot and ext in ("keep", "mtimes"):
                    pinned.add(stem)
        infos: dict[str, PackInfo] = {}
        complete = True
        for name in names:
            if self.cache.retired(self._base(name)):
                continue  # absorbed by a roll-up, being deleted
            info = self.infos.get(name) or self.cache.info(self._base(name))
            if info is None:
                complete = False  # deleted meanwhile, or not a pack: look again on the next miss
            else:
                infos[name] = info
        # biggest first: most objects live in the few big packs, the many small ones are recent commits'
        self.names = sorted(infos, key=lambda name: -infos[name].nbytes)
        self.infos = infos
        self.pinned = pinned
        racy = time.time_ns() - mtime < RACY_NS  # a change in the same clock tick would not move the mtime
        self.seen = mtime if complete and not racy else None
        self.listed = complete
        return True

    def load(self, name: str) -> Pack | None:
        """Pack ``name`` of the listing, loaded (from the cache when it has it)."""
        return self.cache.get(self._base(name))

    @property
    def packs(self) -> dict[str, Pack]:
        """Every listed pack, loaded (biggest first)."""
        loaded = {name: self.load(name) for name in self.names}
        return {name: pack for name, pack in loaded.items() if pack is not None}

    def add(self, name: str, pack: Pack) -> None:
        """Use ``pack`` (just published as ``name``) without listing the folder again."""
        info = PackInfo(pack.nbytes, pack.whole)
        self.cache.put(self._base(name), pack)
        self.cache.remember(self._base(name), info)
        if name not in self.infos:
            self.names.append(name)
        self.infos[name] = info

    def retire(self, name: str) -> None:
        """Stop using pack ``name``, absorbed by a roll-up, and have it deleted (``PackCache.retire``)."""
        self.infos.pop(name, None)
        if name in self.names:
            self.names.remove(name)
        self.cache.retire(self._base(name))

    def _find(self, oid: bytes) -> tuple[Pack, int] | None:
        for attempt in range(2):
            if attempt and not self.refresh():
                return None
            for name in self.names:
                pack = self.load(name)
                if pack is None:
                    self.seen = None  # gone since the listing: list again on the next miss
                    self.listed = False
                    continue
                offset = pack.find(oid)
                if offset is not None:
                    return pack, offset
        return None

    def size(self, oid: bytes) -> int | None:
        """The size of object ``oid`` read from its pack entry's header, or None (then ask git)."""
        try:
            found = self._find(oid)
            return None if found is None else found[0].object_size(found[1])
        except (ValueError, IndexError, struct.error, zlib.error):
            return None

    def read(self, oid: bytes) -> tuple[bytes, bytes] | None:
        """``(type name, bytes)`` of object ``oid``, or None (then ask git)."""
        try:
            found = self._find(oid)
            if found is None:
                return None
            read = found[0].read(found[1])
        except (ValueError, IndexError, struct.error, zlib.error):
            return None
        if read is None:
            return None
        kind, data = read
        type_name = TYPE_NAMES[kind]
        return (type_name, data) if object_id(type_name, data) == oid else None


def unlink_pack(base: str) -> None:
    """Delete the pack at ``base``: its index first, so no reader that lists the folder finds an index whose
    pack is already gone (one that opened both before keeps reading them)."""
    for ext in (".idx", ".pack", ".rev"):
        with contextlib.suppress(OSError):
            os.unlink(base + ext)
        faults.point("git.unlinking")
