"""worker.gitobjects without git: tree records and edits, pack and index bytes, deltas, the in-process reader.

The expectations are re-derived here from git's formats (``base_name_compare`` for tree order, the
version-2 pack and ``.idx`` layouts, the delta opcodes), not from the module's own helpers.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.git.objects import (
    EMPTY_TREE,
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    TREE_MODE,
    PackedObject,
    Tree,
    TreeEditor,
    build_pack,
    encode_name,
    object_id,
    parse_tree,
    sort_key,
    stored_zlib,
    write_pack,
)
from worker.git.packs import MAX_DELTA_CHAIN, Pack, PackReader, apply_delta

FILE, EXEC, LINK, GITLINK = 0o100644, 0o100755, 0o120000, 0o160000
OBJ_TAG, OFS_DELTA, REF_DELTA = 4, 6, 7
TYPE_NAME = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob", OBJ_TAG: b"tag"}
IDS = [bytes([n]) * 20 for n in (0x00, 0x11, 0x7F, 0xAB, 0xFF)]


# -- independent re-statements of git's formats --------------------------------------------------------


def git_compare(a: tuple[bytes, int], b: tuple[bytes, int]) -> int:
    """git's base_name_compare: bytes of the common length, then the next byte, a folder ending in '/'."""
    (name1, mode1), (name2, mode2) = a, b
    common = min(len(name1), len(name2))
    if name1[:common] != name2[:common]:
        return -1 if name1[:common] < name2[:common] else 1
    c1 = name1[common] if common < len(name1) else (0x2F if mode1 == TREE_MODE else 0)
    c2 = name2[common] if common < len(name2) else (0x2F if mode2 == TREE_MODE else 0)
    return (c1 > c2) - (c1 < c2)


def tree_bytes(entries: dict[str, tuple[int, bytes]]) -> bytes:
    """The tree object git writes for ``{name: (mode, binary id)}``."""
    raw = [(encode_name(name), mode, oid) for name, (mode, oid) in entries.items()]

    def compare(x: tuple[bytes, int, bytes], y: tuple[bytes, int, bytes]) -> int:
        return git_compare((x[0], x[1]), (y[0], y[1]))

    raw.sort(key=functools.cmp_to_key(compare))
    return b"".join(b"%o %s\x00%s" % (mode, name, oid) for name, mode, oid in raw)


def type_size(kind: int, size: int) -> bytes:
    """A pack entry header: type and low 4 bits of size, then 7 bits per continuation byte."""
    out = [(kind << 4) | (size & 0x0F)]
    size >>= 4
    while size:
        out[-1] |= 0x80
        out.append(size & 0x7F)
        size >>= 7
    return bytes(out)


def read_type_size(data: bytes, pos: int) -> tuple[int, int, int]:
    """``(type, size, position after the header)`` of the pack entry at ``pos``."""
    byte = data[pos]
    kind, size, shift = (byte >> 4) & 7, byte & 0x0F, 4
    pos += 1
    while byte & 0x80:
        byte = data[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
    return kind, size, pos


def ofs_back(back: int) -> bytes:
    """An OFS_DELTA's distance back to its base, in git's offset encoding."""
    out = [back & 0x7F]
    back >>= 7
    while back:
        back -= 1
        out.append(0x80 | (back & 0x7F))
        back >>= 7
    return bytes(reversed(out))


def varint(value: int) -> bytes:
    """A delta header size (little-endian base 128)."""
    out = []
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def copy_op(offset: int, length: int) -> bytes:
    """A delta copy opcode; a length of 0x10000 is written as no length bytes at all."""
    op, args = 0x80, []
    for i in range(4):
        if offset >> (8 * i) & 0xFF:
            op |= 1 << i
            args.append(offset >> (8 * i) & 0xFF)
    length &= 0xFFFF if length == 0x10000 else 0xFFFFFF
    for i in range(3):
        if length >> (8 * i) & 0xFF:
            op |= 0x10 << i
            args.append(length >> (8 * i) & 0xFF)
    return bytes([op, *args])


def delta(base_size: int, target_size: int, *ops: bytes | tuple[int, int]) -> bytes:
    """A delta: sizes, then each op (bytes: an insert of them; (offset, length): a copy)."""
    out = [varint(base_size), varint(target_size)]
    for op in ops:
        if isinstance(op, tuple):
            out.append(copy_op(*op))
        else:
            out.append(bytes([len(op)]) + op)
    return b"".join(out)


def idx_bytes(index: list[tuple[bytes, int, int]], checksum: bytes, large: bool = False) -> bytes:
    """A version-2 .idx for ``(oid, crc32, offset)`` rows; ``large``: every offset via the 64-bit table."""
    rows = sorted(index)
    fanout = [sum(1 for oid, _, _ in rows if oid[0] <= i) for i in range(256)]
    small = [0x80000000 | n if large else at for n, (_, _, at) in enumerate(rows)]
    body = b"".join(
        [
            b"\377tOc",
            struct.pack(">I", 2),
            struct.pack(">256I", *fanout),
            *(oid for oid, _, _ in rows),
            *(struct.pack(">I", crc) for _, crc, _ in rows),
            *(struct.pack(">I", at) for at in small),
            *(struct.pack(">Q", at) for _, _, at in rows if large),
            checksum,
        ]
    )
    return body + hashlib.sha1(body).digest()


def raw_pack(folder: Path, entries: list[tuple[bytes, bytes]]) -> Path:
    """Write ``entries`` (oid, whole entry bytes) as pack-<sha>.pack/.idx in ``folder``; returns the idx."""
    folder.mkdir(parents=True, exist_ok=True)
    pack = bytearray(b"PACK" + struct.pack(">II", 2, len(entries)))
    index = []
    for oid, entry in entries:
        index.append((oid, zlib.crc32(entry), len(pack)))
        pack += entry
    checksum = hashlib.sha1(pack).digest()
    pack += checksum
    name = folder / f"pack-{checksum.hex()}"
    name.with_suffix(".pack").write_bytes(bytes(pack))
    name.with_suffix(".idx").write_bytes(idx_bytes(index, checksum))
    return name.with_suffix(".idx")


def whole(kind: int, data: bytes) -> bytes:
    """An undeltified pack entry."""
    return type_size(kind, len(data)) + zlib.compress(data)


def blob(data: bytes) -> PackedObject:
    return PackedObject(OBJ_BLOB, object_id(b"blob", data), data)


# -- ids, names, order ---------------------------------------------------------------------------------


def test_object_id_matches_well_known_git_ids() -> None:
    """object_id gives git's ids for the empty blob, the empty tree and "hello\\n"."""
    assert object_id(b"blob", b"").hex() == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert object_id(b"tree", b"").hex() == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    assert object_id(b"blob", b"hello\n").hex() == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_encode_name_is_utf8_and_round_trips_non_utf8_bytes() -> None:
    """Names are UTF-8, and a name decoded from non-UTF-8 bytes with surrogateescape encodes back to them."""
    assert encode_name("é.md") == "é.md".encode()
    raw = b"caf\xe9-\xff"
    assert encode_name(raw.decode("utf-8", "surrogateescape")) == raw


def test_sort_key_orders_names_around_a_folder_as_git_does() -> None:
    """sort_key orders "a-", "a.b", folder "a", "a0", "ab" exactly as git's base_name_compare does."""
    entries = [(b"a0", FILE), (b"a", TREE_MODE), (b"ab", FILE), (b"a.b", FILE), (b"a-", EXEC), (b"b", LINK)]
    by_key = sorted(entries, key=lambda e: sort_key(*e))
    assert by_key == sorted(entries, key=functools.cmp_to_key(git_compare))
    assert by_key == [
        (b"a-", EXEC),
        (b"a.b", FILE),
        (b"a", TREE_MODE),
        (b"a0", FILE),
        (b"ab", FILE),
        (b"b", LINK),
    ]
    assert sorted([(b"a", FILE), (b"a.b", FILE)], key=lambda e: sort_key(*e))[0] == (b"a", FILE)


# -- trees ---------------------------------------------------------------------------------------------

SAMPLE = {
    "a": (TREE_MODE, IDS[1]),
    "a.b": (FILE, IDS[2]),
    "a0": (EXEC, IDS[3]),
    "a-": (LINK, IDS[4]),
    "sub": (GITLINK, IDS[0]),
    "é": (FILE, IDS[0]),
    "\udcff": (FILE, IDS[1]),  # the byte 0xff
}


def test_parse_tree_reads_every_entry_in_git_order() -> None:
    """parse_tree gives back each name, mode and id in git order, and data() is the input bytes."""
    data = tree_bytes(SAMPLE)
    tree = parse_tree(data)
    assert tree.data() == data
    assert tree.size == len(SAMPLE)
    assert [name for name, _ in tree.items()] == ["a-", "a.b", "a", "a0", "sub", "é", "\udcff"]
    assert dict(tree.items()) == {name: (mode, oid.hex()) for name, (mode, oid) in SAMPLE.items()}
    for name, (mode, oid) in SAMPLE.items():
        assert tree.find(name) == (mode, oid.hex())
    for missing in ("", "a.", "b", "a1", "A", "é.md"):
        assert tree.find(missing) is None


def test_parse_tree_copes_with_ids_that_look_like_records() -> None:
    """Ids holding NUL, spaces, digits and newlines are taken as 20 raw bytes, not as record boundaries."""
    tricky = [b"100644 x\x00" + b"\x00" * 11, b"40000 \n\x00" + b"7" * 12, b"\x00" * 20, b" " * 20]
    entries = {f"n{i}": (FILE if i % 2 else TREE_MODE, oid) for i, oid in enumerate(tricky)}
    tree = parse_tree(tree_bytes(entries))
    assert dict(tree.items()) == {name: (mode, oid.hex()) for name, (mode, oid) in entries.items()}


def test_parse_tree_puts_an_unsorted_tree_in_git_order() -> None:
    """A tree object whose records are out of order parses into the same tree as the sorted one."""
    records = [b"100644 a0\x00" + IDS[0], b"40000 a\x00" + IDS[1], b"100644 a.b\x00" + IDS[2]]
    tree = parse_tree(b"".join(records))
    assert tree.data() == records[2] + records[1] + records[0]
    assert tree.keys == [b"a.b", b"a/", b"a0"]
    assert tree.find("a") == (TREE_MODE, IDS[1].hex())


@pytest.mark.parametrize(
    "data",
    [
        b"100644 a\x00" + IDS[0][:19],  # a truncated id
        b"100644 a\x00" + IDS[0] + b"x",  # trailing junk
        b"junk" + b"100644 a\x00" + IDS[0],  # leading junk
        b"100644 a\x00" + IDS[0] + b"\n" + b"100644 b\x00" + IDS[1],  # junk between records
        b"100644a\x00" + IDS[0],  # no space after the mode
        b"100844 a\x00" + IDS[0],  # not an octal mode
        b"100644 a",  # no NUL, no id
    ],
)
def test_parse_tree_refuses_malformed_objects(data: bytes) -> None:
    """Bytes that are not a sequence of <mode> <name>\\0<20-byte id> records raise ValueError."""
    with pytest.raises(ValueError):
        parse_tree(data)


def test_empty_tree_parses_and_builds_to_no_bytes() -> None:
    """The empty tree object parses to no entries and an editor on EMPTY_TREE builds it back."""
    assert parse_tree(b"").size == 0 and list(parse_tree(b"").items()) == []
    assert TreeEditor(EMPTY_TREE).build().data() == b""
    assert EMPTY_TREE.find("a") is None


def test_editor_replaces_a_folder_with_a_file_and_back() -> None:
    """put of a file over folder "a" (and of a folder over file "a") leaves exactly one "a", in git order."""
    base = parse_tree(tree_bytes({"a": (TREE_MODE, IDS[0]), "a.b": (FILE, IDS[1]), "a0": (FILE, IDS[2])}))
    edit = TreeEditor(base)
    edit.put("a", FILE, IDS[3].hex())
    assert edit.get("a") == (FILE, IDS[3].hex()) and len(edit) == 3
    expected = {"a": (FILE, IDS[3]), "a.b": (FILE, IDS[1]), "a0": (FILE, IDS[2])}
    assert edit.build().data() == tree_bytes(expected)
    edit.put("a", TREE_MODE, IDS[4].hex())
    assert edit.get("a") == (TREE_MODE, IDS[4].hex()) and len(edit) == 3
    expected["a"] = (TREE_MODE, IDS[4])
    assert edit.build().data() == tree_bytes(expected)
    assert edit.keys == [b"a.b", b"a/", b"a0"]


def test_editor_keep_exec_keeps_only_an_executable_executable() -> None:
    """put(keep_exec=True) keeps 100755 over a new 100644, leaves 100644 alone, and is off by default."""
    base = parse_tree(tree_bytes({"run": (EXEC, IDS[0]), "doc": (FILE, IDS[1])}))
    edit = TreeEditor(base)
    edit.put("run", FILE, IDS[2].hex(), keep_exec=True)
    edit.put("doc", FILE, IDS[3].hex(), keep_exec=True)
    assert edit.get("run") == (EXEC, IDS[2].hex())
    assert edit.get("doc") == (FILE, IDS[3].hex())
    edit.put("run", FILE, IDS[4].hex())
    assert edit.get("run") == (FILE, IDS[4].hex())
    assert edit.build().data() == tree_bytes({"run": (FILE, IDS[4]), "doc": (FILE, IDS[3])})


def test_editor_remove_takes_a_file_or_a_folder_and_ignores_missing_names() -> None:
    """remove drops the named file or folder (not its neighbours "a.b", "a0") and does nothing when absent."""
    entries = {"a": (TREE_MODE, IDS[0]), "a.b": (FILE, IDS[1]), "a0": (FILE, IDS[2]), "b": (FILE, IDS[3])}
    edit = TreeEditor(parse_tree(tree_bytes(entries)))
    for name in ("a.", "c", "", "A"):
        edit.remove(name)
    assert edit.build().data() == tree_bytes(entries)
    edit.remove("a")
    edit.remove("b")
    assert edit.get("a") is None and edit.get("a.b") == (FILE, IDS[1].hex())
    assert edit.build().data() == tree_bytes({"a.b": (FILE, IDS[1]), "a0": (FILE, IDS[2])})


def test_editor_leaves_its_base_tree_unchanged() -> None:
    """Editing a copy never changes the Tree it was made from (trees are cached and shared)."""
    data = tree_bytes(SAMPLE)
    base = parse_tree(data)
    edit = TreeEditor(base)
    edit.remove("a")
    edit.put("zz", FILE, IDS[0].hex())
    edit.put("a.b", TREE_MODE, IDS[0].hex())
    assert base.data() == data and base.size == len(SAMPLE)
    assert edit.build().data() != data


NAMES = ["a", "a.b", "a0", "a-", "a b", "ab", "b", "A", "é", "\udcff"]
MODES = [FILE, EXEC, TREE_MODE, LINK, GITLINK]
entry = st.tuples(st.sampled_from(MODES), st.sampled_from(IDS))
edit_op = st.one_of(
    st.tuples(
        st.just("put"), st.sampled_from(NAMES), st.sampled_from(MODES), st.sampled_from(IDS), st.booleans()
    ),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
)


@settings(max_examples=300, deadline=None)
@given(start=st.dictionaries(st.sampled_from(NAMES), entry, max_size=8), ops=st.lists(edit_op, max_size=12))
def test_editor_agrees_with_a_sorted_dict(
    start: dict[str, tuple[int, bytes]], ops: list[tuple[str, str, int, bytes, bool] | tuple[str, str]]
) -> None:
    """Random puts and removes on a parsed tree build the bytes of a dict rendered in git order."""
    reference = dict(start)
    edit = TreeEditor(parse_tree(tree_bytes(start)))
    for op in ops:
        if op[0] == "put":
            _, name, mode, oid, keep_exec = op  # type: ignore[misc]
            old = reference.get(name)
            reference[name] = (EXEC if keep_exec and old is not None and old[0] == EXEC else mode, oid)
            edit.put(name, mode, oid.hex(), keep_exec=keep_exec)
        else:
            reference.pop(op[1], None)
            edit.remove(op[1])
        for name in NAMES:
            found = reference.get(name)
            assert edit.get(name) == (None if found is None else (found[0], found[1].hex()))
    built = edit.build()
    assert built.data() == tree_bytes(reference)
    assert len(edit) == len(reference) == built.size
    assert parse_tree(built.data()).keys == built.keys


# -- pack writing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 100, 65534, 65535, 65536, 131070, 200_001])
def test_stored_zlib_is_a_valid_stream_of_stored_blocks(size: int) -> None:
    """stored_zlib inflates back to its input and is exactly header + 5 bytes per 64 KiB block + adler32."""
    data = random.Random(size).randbytes(size)
    out = stored_zlib(data)
    assert zlib.decompress(out) == data
    blocks = max(1, -(-size // 0xFFFF))
    assert len(out) == 2 + 5 * blocks + size + 4


def parse_idx(idx: bytes) -> tuple[list[int], list[bytes], list[int], list[int]]:
    """``(fanout, names, crc32s, offsets)`` of a version-2 .idx, its own checksum checked."""
    assert idx[:8] == b"\377tOc\x00\x00\x00\x02"
    assert hashlib.sha1(idx[:-20]).digest() == idx[-20:]
    fanout = list(struct.unpack_from(">256I", idx, 8))
    count = fanout[-1]
    at = 8 + 1024
    names = [idx[at + 20 * i : at + 20 * i + 20] for i in range(count)]
    at += 20 * count
    crcs = list(struct.unpack_from(f">{count}I", idx, at))
    offsets = list(struct.unpack_from(f">{count}I", idx, at + 4 * count))
    assert len(idx) == at + 8 * count + 40  # no large offsets
    return fanout, names, crcs, offsets


def some_objects(count: int) -> dict[bytes, PackedObject]:
    """``count`` objects of every kind: text, empty, binary, a compressible and an incompressible >64 KiB."""
    rng = random.Random(count)
    blobs = [b"", b"\x00\xff\x00binary\r\n", rng.randbytes(70_000), b"line\n" * 40_000]
    blobs += [f"page {i}\n".encode() * (i % 7) + rng.randbytes(i % 5) for i in range(count)]
    objects = [blob(data) for data in blobs[:count]]
    if count > 4:
        tree = tree_bytes({f"f{i}": (FILE, obj.oid) for i, obj in enumerate(objects)})
        objects.append(PackedObject(OBJ_TREE, object_id(b"tree", tree), tree))
        commit = (
            b"tree %s\nauthor a <a> 0 +0000\ncommitter a <a> 0 +0000\n\nm\n" % objects[-1].oid.hex().encode()
        )
        objects.append(PackedObject(OBJ_COMMIT, object_id(b"commit", commit), commit))
    return {obj.oid: obj for obj in objects}


@pytest.mark.parametrize("count", [0, 1, 3, 600])
def test_build_pack_writes_a_consistent_pack_and_index(count: int) -> None:
    """Pack header, entries, trailer and the .idx fanout, sorted names, crc32s and offsets all agree."""
    objects = some_objects(count)
    chunks, idx, name = build_pack(objects.values())
    pack = b"".join(chunks)
    assert pack[:12] == b"PACK" + struct.pack(">II", 2, len(objects))
    assert pack[-20:] == hashlib.sha1(pack[:-20]).digest() and name == pack[-20:].hex()
    assert idx[-40:-20] == pack[-20:]
    fanout, names, crcs, offsets = parse_idx(idx)
    assert names == sorted(objects) and len(set(names)) == len(objects)
    assert fanout == [sum(1 for oid in objects if oid[0] <= byte) for byte in range(256)]
    walked = offsets_in_order(pack, len(objects))
    assert sorted(offsets) == walked
    ends = dict(zip(walked, [*walked[1:], len(pack) - 20][: len(walked)], strict=True))
    for oid, crc, at in zip(names, crcs, offsets, strict=True):
        obj = objects[oid]
        kind, size, pos = read_type_size(pack, at)
        assert (kind, size) == (obj.kind, len(obj.data))
        assert zlib.decompress(pack[pos : ends[at]]) == obj.data
        assert crc == zlib.crc32(pack[at : ends[at]])
    if count > 4:
        assert max(offsets) > 70_000 and len(set(fanout)) > 200  # a big blob is in, most buckets used


def offsets_in_order(pack: bytes, count: int) -> list[int]:
    """The offset of each entry of an undeltified pack, walking it from the start."""
    offsets, at = [], 12
    for _ in range(count):
        offsets.append(at)
        _, _, pos = read_type_size(pack, at)
        inflater = zlib.decompressobj()
        inflater.decompress(pack[pos:])
        at = len(pack) - len(inflater.unused_data)
    assert at == len(pack) - 20
    return offsets


def test_build_pack_stores_trees_uncompressed_and_blobs_deflated() -> None:
    """Trees go in as stored zlib blocks (their bytes visible in the pack); a repetitive blob shrinks."""
    tree = tree_bytes({"page.md": (FILE, IDS[3])})
    big = b"same line\n" * 10_000
    chunks, _, _ = build_pack([PackedObject(OBJ_TREE, object_id(b"tree", tree), tree), blob(big)])
    pack = b"".join(chunks)
    assert tree in pack
    assert len(pack) < len(big) // 10


def test_write_pack_publish_names_it_by_its_checksum(tmp_path: Path) -> None:
    """write_pack leaves only tmp_ files; publish renames them to read-only pack-<sha>.pack and .idx."""
    pack_dir = tmp_path / "objects" / "pack"  # missing: write_pack creates it
    objects = some_objects(3)
    pending = write_pack(pack_dir, objects)
    assert sorted(p.name[:4] for p in pack_dir.iterdir()) == ["tmp_", "tmp_"]
    pending.publish()
    pending.discard()  # after publish: nothing left to remove
    assert sorted(p.name for p in pack_dir.iterdir()) == [
        f"pack-{pending.name}.idx",
        f"pack-{pending.name}.pack",
    ]
    pack = (pack_dir / f"pack-{pending.name}.pack").read_bytes()
    assert hashlib.sha1(pack[:-20]).hexdigest() == pending.name
    for path in pack_dir.iterdir():
        assert path.stat().st_mode & 0o777 == 0o444


def test_write_pack_discard_leaves_nothing_behind(tmp_path: Path) -> None:
    """discard after write_pack removes both temporary files and writes no pack."""
    pack_dir = tmp_path / "pack"
    pack_dir.mkdir()
    (pack_dir / "other").write_bytes(b"x")
    pending = write_pack(pack_dir, some_objects(3))
    pending.discard()
    pending.discard()
    assert [p.name for p in pack_dir.iterdir()] == ["other"]


# -- reading packs ------------------------------------------------------------------------------------


def test_pack_reader_reads_back_everything_write_pack_wrote(tmp_path: Path) -> None:
    """Every object of a published pack reads back with its type and bytes; unknown ids give None."""
    objects = some_objects(40)
    write_pack(tmp_path, objects).publish()
    reader = PackReader(tmp_path)
    for oid, obj in objects.items():
        assert reader.read(oid) == (TYPE_NAME[obj.kind], obj.data)
    for oid in (b"\x00" * 20, b"\xff" * 20, object_id(b"blob", b"never written")):
        assert reader.read(oid) is None
    reader.close()
    assert reader.packs == {}


def test_pack_reader_sees_packs_added_and_removed_after_it_opened(tmp_path: Path) -> None:
    """A pack published after the first read is found, and a deleted pack is dropped on the next miss."""
    reader = PackReader(tmp_path)
    assert reader.read(blob(b"one").oid) is None  # nothing there yet
    first = write_pack(tmp_path, {blob(b"one").oid: blob(b"one")})
    first.publish()
    assert reader.read(blob(b"one").oid) == (b"blob", b"one")
    second = write_pack(tmp_path, {blob(b"two").oid: blob(b"two")})
    second.publish()
    assert reader.read(blob(b"two").oid) == (b"blob", b"two")
    assert set(reader.packs) == {f"pack-{first.name}", f"pack-{second.name}"}
    for suffix in (".idx", ".pack"):
        os.unlink(tmp_path / f"pack-{first.name}{suffix}")
    third = write_pack(tmp_path, {blob(b"three").oid: blob(b"three")})
    third.publish()
    assert reader.read(blob(b"three").oid) == (b"blob", b"three")
    assert set(reader.packs) == {f"pack-{second.name}", f"pack-{third.name}"}
    reader.close()


def test_pack_reader_looks_in_the_biggest_pack_first(tmp_path: Path) -> None:
    """After a refresh the packs are ordered by object count, biggest first."""
    sizes = [len(some_objects(count)) for count in (1, 40, 3)]
    for count in (1, 40, 3):
        write_pack(tmp_path, some_objects(count)).publish()
    reader = PackReader(tmp_path)
    assert reader.read(b"\x01" * 20) is None
    assert [pack.count for pack in reader.packs.values()] == sorted(sizes, reverse=True) != sizes
    reader.close()


def test_pack_reader_resolves_ofs_and_ref_delta_chains(tmp_path: Path) -> None:
    """OFS_DELTA chains (depth 3) and a REF_DELTA on a base in the same pack resolve to the right bytes."""
    base = random.Random(1).randbytes(20_000) + b"The quick brown fox jumps over the lazy dog.\n" * 50
    v1 = base[:1000] + b"INSERTED" + base[1000:]
    v2 = v1[:500] + v1[600:]
    v3 = b"head " + v2 + b" tail"
    v4 = v1[::-1][:10] + base
    d1 = delta(len(base), len(v1), (0, 1000), b"INSERTED", (1000, len(base) - 1000))
    d2 = delta(len(v1), len(v2), (0, 500), (600, len(v1) - 600))
    d3 = delta(len(v2), len(v3), b"head ", (0, len(v2)), b" tail")
    d4 = delta(len(v1), len(v4), v1[::-1][:10], (0, 1000), (1008, len(base) - 1000))
    ids = [object_id(b"blob", data) for data in (base, v1, v2, v3, v4)]
    entries: list[bytes] = [whole(OBJ_BLOB, base)]
    offsets = [12]
    for previous, step in enumerate((d1, d2, d3)):
        here = offsets[-1] + len(entries[-1])
        entries.append(
            type_size(OFS_DELTA, len(step)) + ofs_back(here - offsets[previous]) + zlib.compress(step)
        )
        offsets.append(here)
    entries.append(type_size(REF_DELTA, len(d4)) + ids[1] + zlib.compress(d4))
    raw_pack(tmp_path, list(zip(ids, entries, strict=True)))
    reader = PackReader(tmp_path)
    for oid, data in zip(ids, (base, v1, v2, v3, v4), strict=True):
        assert reader.read(oid) == (b"blob", data)
    reader.close()


def test_pack_reader_gives_none_for_what_it_cannot_resolve(tmp_path: Path) -> None:
    """A REF_DELTA base in no pack, a chain over MAX_DELTA_CHAIN, bad zlib and a wrong id all give None."""
    base, target = b"base bytes\n" * 10, b"base bytes\n" * 9 + b"changed\n"
    step = delta(len(base), len(target), (0, 99), b"changed\n")
    missing_base = type_size(REF_DELTA, len(step)) + object_id(b"blob", base) + zlib.compress(step)
    good = whole(OBJ_BLOB, b"fine\n")
    corrupt = bytearray(whole(OBJ_BLOB, b"will be damaged" * 20))
    corrupt[len(corrupt) // 2] ^= 0xFF
    liar = whole(OBJ_BLOB, b"not what the index says")
    raw_pack(
        tmp_path / "one",
        [
            (object_id(b"blob", target), missing_base),
            (object_id(b"blob", b"fine\n"), good),
            (object_id(b"blob", b"damaged"), bytes(corrupt)),
            (object_id(b"blob", b"claimed"), liar),
        ],
    )
    reader = PackReader(tmp_path / "one")
    assert reader.read(object_id(b"blob", b"fine\n")) == (b"blob", b"fine\n")
    for oid in (object_id(b"blob", x) for x in (target, b"damaged", b"claimed")):
        assert reader.read(oid) is None
    reader.close()
    # A chain of MAX_DELTA_CHAIN + 1 identity deltas is left to git; one of MAX_DELTA_CHAIN resolves.
    same = delta(len(base), len(base), (0, len(base)))
    pack = bytearray(b"PACK" + struct.pack(">II", 2, MAX_DELTA_CHAIN + 2))
    at = [12]
    pack += whole(OBJ_BLOB, base)
    for _ in range(MAX_DELTA_CHAIN + 1):
        here = len(pack)
        pack += type_size(OFS_DELTA, len(same)) + ofs_back(here - at[-1]) + zlib.compress(same)
        at.append(here)
    checksum = hashlib.sha1(pack).digest()
    folder = tmp_path / "chain"
    folder.mkdir()
    depth_limit, too_deep = at[MAX_DELTA_CHAIN], at[MAX_DELTA_CHAIN + 1]
    oid = object_id(b"blob", base)
    fake = [(oid, 0, depth_limit), (b"\x00" * 19 + b"\x01", 0, too_deep)]
    (folder / f"pack-{checksum.hex()}.pack").write_bytes(bytes(pack + checksum))
    (folder / f"pack-{checksum.hex()}.idx").write_bytes(idx_bytes(fake, checksum))
    pack_file = Pack.open(
        str(folder / f"pack-{checksum.hex()}.idx"), str(folder / f"pack-{checksum.hex()}.pack")
    )
    assert pack_file.read(depth_limit) == (OBJ_BLOB, base)
    assert pack_file.read(too_deep) is None
    pack_file.close()
    reader = PackReader(folder)
    assert reader.read(oid) == (b"blob", base)
    assert reader.read(b"\x00" * 19 + b"\x01") is None
    reader.close()


def test_index_large_offsets_are_followed(tmp_path: Path) -> None:
    """An offset with the high bit set is looked up in the 64-bit table (packs over 2 GiB)."""
    rows = [(IDS[0], 0, 0x1_2345_6789), (IDS[2], 0, 0x8000_0000), (IDS[4], 0, 12)]
    checksum = b"\x42" * 20
    (tmp_path / "x.idx").write_bytes(idx_bytes(rows, checksum, large=True))
    (tmp_path / "x.pack").write_bytes(b"PACK" + struct.pack(">II", 2, 3) + checksum)
    pack = Pack.open(str(tmp_path / "x.idx"), str(tmp_path / "x.pack"))
    assert [pack.find(oid) for oid, _, _ in rows] == [at for _, _, at in rows]
    assert pack.find(IDS[1]) is None and pack.find(b"\xff" * 19 + b"\xfe") is None
    pack.close()


def test_pack_reader_skips_files_that_are_not_packs(tmp_path: Path) -> None:
    """An empty or foreign .idx in objects/pack is ignored; the real packs next to it are still read."""
    (tmp_path / "pack-empty.idx").write_bytes(b"")
    (tmp_path / "pack-empty.pack").write_bytes(b"")
    (tmp_path / "pack-v1.idx").write_bytes(b"\x00" * 1100)
    (tmp_path / "pack-v1.pack").write_bytes(b"PACK" + b"\x00" * 30)
    (tmp_path / "pack-nopack.idx").write_bytes(b"\377tOc\x00\x00\x00\x02")
    write_pack(tmp_path, {blob(b"real").oid: blob(b"real")}).publish()
    reader = PackReader(tmp_path)
    assert reader.read(blob(b"real").oid) == (b"blob", b"real")
    assert len(reader.packs) == 1
    reader.close()


# -- deltas --------------------------------------------------------------------------------------------


def test_apply_delta_copies_and_inserts() -> None:
    """Copies (any offset bytes, a 0x10000 copy written without length bytes) and inserts build the target."""
    base = bytes(range(256)) * 1100  # 281 600 bytes
    ops: list[bytes | tuple[int, int]] = [(0x10203, 0x10000), b"literal", (0, 1), (0x40000, 3), (0xFF, 0x100)]
    target = (
        base[0x10203 : 0x10203 + 0x10000] + b"literal" + base[:1] + base[0x40000:0x40003] + base[0xFF:0x1FF]
    )
    made = delta(len(base), len(target), *ops)
    assert copy_op(0x10203, 0x10000) == bytes([0x80 | 0x07, 0x03, 0x02, 0x01])  # no length bytes
    assert apply_delta(base, made) == target
    assert apply_delta(b"", delta(0, 3, b"new")) == b"new"
    assert apply_delta(b"abc", delta(3, 0)) == b""


@pytest.mark.parametrize(
    ("base", "made"),
    [
        (b"abcdef", delta(5, 6, (0, 6))),  # base size mismatch
        (b"abcdef", delta(6, 7, (0, 6))),  # target shorter than announced
        (b"abcdef", delta(6, 5, (0, 6))),  # target longer than announced
        (b"abcdef", delta(6, 6, (0, 3)) + b"\x00"),  # opcode 0 (reserved)
    ],
)
def test_apply_delta_refuses_an_inconsistent_delta(base: bytes, made: bytes) -> None:
    """A delta that does not fit its base or its announced size raises ValueError, never returns bytes."""
    with pytest.raises(ValueError):
        apply_delta(base, made)


@pytest.mark.parametrize(
    ("base", "made"),
    [
        (b"abcdef", delta(6, 6, (4, 4), b"WXYZ")),  # copies "ef" only; the insert makes up the size
        (b"abcdef", delta(6, 6, (6, 3), b"uvwxyz")),  # copies nothing at all
        (b"abcdef", delta(6, 6, (0x1000000, 2), b"qrstuv")),  # an offset far past the base
    ],
)
def test_apply_delta_refuses_a_copy_outside_the_base(base: bytes, made: bytes) -> None:
    """A copy reaching past the end of the base is refused (git: "delta replay has gone wild"), even when
    an insert brings the result to the announced size."""
    with pytest.raises(ValueError):
        apply_delta(base, made)


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_apply_delta_refuses_a_truncated_delta(cut: int) -> None:
    """A delta cut short (in its header, an insert or a copy's arguments) raises instead of returning."""
    base = b"0123456789" * 30
    made = delta(len(base), 20, (0x102, 10), b"0123456789")
    made = {1: made[:1], 2: made[:3], 3: made[:6], 4: made[:-3]}[cut]
    with pytest.raises((ValueError, IndexError)):
        apply_delta(base, made)


def test_tree_class_is_plain_bytes() -> None:
    """A Tree built by hand answers find and items from its keys and records alone."""
    tree = Tree([b"a.b", b"a/"], [b"100644 a.b\x00" + IDS[0], b"40000 a\x00" + IDS[1]])
    assert tree.find("a") == (TREE_MODE, IDS[1].hex())
    assert list(tree.items()) == [("a.b", (FILE, IDS[0].hex())), ("a", (TREE_MODE, IDS[1].hex()))]
