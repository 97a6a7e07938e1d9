"""worker.gitobjects against real git in tmp_path: trees vs ``git mktree``, packs vs ``git verify-pack`` /
``index-pack`` / ``fsck``, and the in-process reader and ``apply_delta`` vs ``git cat-file`` on repos that
git itself repacked (OFS and REF deltas, deep chains), up to 200 commits through WikiRepo.
"""

from __future__ import annotations

import base64
import random
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gitutil import bare, fsck, git
from worker.engine import blob_id, check_static, preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.maintenance import repack
from worker.git.objects import (
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    TREE_MODE,
    PackedObject,
    TreeEditor,
    encode_name,
    object_id,
    parse_tree,
    write_pack,
)
from worker.git.packs import Pack, PackReader, apply_delta
from worker.git.rollup import MAX_PACKS
from worker.schema.edits import Batch, Create, Delete, Edit, Overwrite

FILE, EXEC, LINK, GITLINK = 0o100644, 0o100755, 0o120000, 0o160000
KIND = {FILE: "blob", EXEC: "blob", LINK: "blob", GITLINK: "commit", TREE_MODE: "tree"}
ALICE = Identity("Alice Example", "alice@example.org")


def mktree(repo: Path, entries: dict[str, tuple[int, str]]) -> str:
    """The id ``git mktree`` gives ``{name: (mode, hex id)}`` (ids need not exist)."""
    lines = b"".join(
        b"%o %s %s\t%s\x00" % (mode, KIND[mode].encode(), oid.encode(), encode_name(name))
        for name, (mode, oid) in entries.items()
    )
    return git(repo, "mktree", "-z", "--missing", input=lines).decode().strip()


def all_objects(repo: Path) -> dict[bytes, tuple[bytes, bytes]]:
    """Every object in ``repo`` as plain git reads it: binary id -> (type, bytes)."""
    listing = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    out = git(repo, "cat-file", "--batch", input=b"\n".join(listing) + b"\n")
    objects, at = {}, 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        oid, kind, size = out[at:header_end].split()
        start = header_end + 1
        objects[bytes.fromhex(oid.decode())] = (kind, out[start : start + int(size)])
        at = start + int(size) + 1
    assert len(objects) == len(listing)
    return objects


def pack_names(repo: Path) -> set[str]:
    return {p.stem for p in (repo / "objects" / "pack").glob("pack-*.idx")}


def deltas(repo: Path) -> list[tuple[Path, str, int, int, str]]:
    """``(pack, id, offset, depth, base id)`` of every deltified object, from ``git verify-pack -v``."""
    found = []
    for idx in (repo / "objects" / "pack").glob("pack-*.idx"):
        for line in git(repo, "verify-pack", "-v", str(idx)).decode().splitlines():
            fields = line.split()
            if len(fields) == 7 and len(fields[0]) == 40:
                found.append((idx.with_suffix(".pack"), fields[0], int(fields[4]), int(fields[5]), fields[6]))
    return found


def raw_entry(pack: bytes, offset: int) -> tuple[int, bytes]:
    """``(pack type, inflated payload)`` of the entry at ``offset`` (for a delta: the delta itself)."""
    byte = pack[offset]
    kind, pos = (byte >> 4) & 7, offset + 1
    while byte & 0x80:
        byte = pack[pos]
        pos += 1
    if kind == 6:  # OFS_DELTA: skip the distance back
        while pack[pos] & 0x80:
            pos += 1
        pos += 1
    elif kind == 7:  # REF_DELTA: skip the base id
        pos += 20
    return kind, zlib.decompressobj().decompress(pack[pos:])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bare repository for ``git mktree`` (ids are never read back, objects need not exist)."""
    return bare(tmp_path_factory.mktemp("mktree") / "repo.git")


# -- trees ---------------------------------------------------------------------------------------------

SAMPLE = {
    "a": (TREE_MODE, "4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
    "a.b": (FILE, "ce013625030ba8dba906f756967f9e9ca394464a"),
    "a0": (EXEC, "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"),
    "a-": (LINK, "ce013625030ba8dba906f756967f9e9ca394464a"),
    "a b": (FILE, "11" * 20),
    "sub": (GITLINK, "22" * 20),
    "é.md": (FILE, "33" * 20),
    "caf\udce9": (FILE, "44" * 20),  # not UTF-8: the byte 0xe9
    "A": (TREE_MODE, "55" * 20),
}


def test_parse_tree_reads_what_git_mktree_wrote(scratch: Path) -> None:
    """parse_tree of ``git cat-file tree`` gives every entry of ``git mktree`` in ``git ls-tree`` order."""
    tree_id = mktree(scratch, SAMPLE)
    data = git(scratch, "cat-file", "tree", tree_id)
    tree = parse_tree(data)
    assert dict(tree.items()) == SAMPLE
    listed = [
        record.split(b"\t", 1)[1].decode("utf-8", "surrogateescape")
        for record in git(scratch, "ls-tree", "-z", tree_id).split(b"\x00")
        if record
    ]
    assert [name for name, _ in tree.items()] == listed
    assert listed.index("a-") < listed.index("a.b") < listed.index("a") < listed.index("a0")
    assert tree.data() == data and object_id(b"tree", tree.data()).hex() == tree_id
    for name, entry in SAMPLE.items():
        assert tree.find(name) == entry


def test_edits_around_a_folder_build_what_git_mktree_builds(scratch: Path) -> None:
    """Each step of put/remove/put (exec kept, file<->folder "a" next to "a.b", "a0") matches git mktree."""
    entries = {
        "a": (TREE_MODE, "4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
        "a.b": (EXEC, "11" * 20),
        "a0": (FILE, "22" * 20),
    }
    edit = TreeEditor(parse_tree(git(scratch, "cat-file", "tree", mktree(scratch, entries))))
    steps: list[tuple[str, str, int, str, bool]] = [
        ("put", "a.b", FILE, "33" * 20, True),  # stays 100755
        ("put", "a", FILE, "44" * 20, True),  # folder a -> file a, between "a.b" and "a0" no more
        ("remove", "a.b", 0, "", False),
        ("put", "a.b", FILE, "55" * 20, True),  # back, now 100644: nothing executable to keep
        ("put", "a", TREE_MODE, "66" * 20, False),  # file a -> folder a
        ("put", "a-", EXEC, "77" * 20, False),
        ("remove", "a", 0, "", False),
        ("put", "a", EXEC, "88" * 20, False),
        ("put", "a", FILE, "99" * 20, True),  # an executable stays one
    ]
    for op, name, mode, oid, keep_exec in steps:
        if op == "remove":
            entries.pop(name)
            edit.remove(name)
        else:
            old = entries.get(name)
            entries[name] = (EXEC if keep_exec and old and old[0] == EXEC else mode, oid)
            edit.put(name, mode, oid, keep_exec=keep_exec)
        assert object_id(b"tree", edit.build().data()).hex() == mktree(scratch, entries), (op, name)
    assert entries["a.b"][0] == FILE and entries["a"] == (EXEC, "99" * 20)


NAMES = ["a", "a.b", "a0", "a-", "a b", "ab", "b", "A", "é", "\udcff"]
MODES = [FILE, EXEC, TREE_MODE, LINK, GITLINK]
HEXES = [f"{n:02x}" * 20 for n in (0x00, 0x3C, 0x7F, 0xAB, 0xFF)]
entry = st.tuples(st.sampled_from(MODES), st.sampled_from(HEXES))
edit_op = st.one_of(
    st.tuples(
        st.just("put"), st.sampled_from(NAMES), st.sampled_from(MODES), st.sampled_from(HEXES), st.booleans()
    ),
    st.tuples(st.just("remove"), st.sampled_from(NAMES), st.just(0), st.just(""), st.just(False)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.dictionaries(st.sampled_from(NAMES), entry, max_size=7), ops=st.lists(edit_op, max_size=10))
def test_random_edits_build_what_git_mktree_builds(
    scratch: Path, start: dict[str, tuple[int, str]], ops: list[tuple[str, str, int, str, bool]]
) -> None:
    """Random puts and removes on a tree git wrote give the id git mktree gives the same sorted dict."""
    reference = dict(start)
    data = git(scratch, "cat-file", "tree", mktree(scratch, start))
    assert dict(parse_tree(data).items()) == start
    edit = TreeEditor(parse_tree(data))
    for op, name, mode, oid, keep_exec in ops:
        if op == "remove":
            reference.pop(name, None)
            edit.remove(name)
        else:
            old = reference.get(name)
            reference[name] = (EXEC if keep_exec and old and old[0] == EXEC else mode, oid)
            edit.put(name, mode, oid, keep_exec=keep_exec)
    built = edit.build()
    assert object_id(b"tree", built.data()).hex() == mktree(scratch, reference)
    assert dict(built.items()) == reference


# -- packs ---------------------------------------------------------------------------------------------


def objects_for(count: int) -> tuple[dict[bytes, PackedObject], bytes]:
    """``count`` blobs (text, empty, binary, one of 100 KiB random bytes) plus a tree and a commit of them."""
    rng = random.Random(count)
    datas = [b"", b"\x00\xff\xfe binary \r\n\x00", rng.randbytes(100 * 1024), b"x\n" * 50_000]
    datas += [f"page {i}\n".encode() * (1 + i % 9) for i in range(count)]
    blobs = {object_id(b"blob", data): data for data in datas[:count]}
    objects = {oid: PackedObject(OBJ_BLOB, oid, data) for oid, data in blobs.items()}
    names = sorted((b"f%d" % n, oid) for n, oid in enumerate(sorted(blobs)))
    tree = b"".join(b"100644 %s\x00%s" % (name, oid) for name, oid in names)
    tree_oid = object_id(b"tree", tree)
    commit = (
        b"tree %s\nauthor A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000\n\npack test\n" % tree_oid.hex().encode()
    )
    commit_oid = object_id(b"commit", commit)
    objects[tree_oid] = PackedObject(OBJ_TREE, tree_oid, tree)
    objects[commit_oid] = PackedObject(OBJ_COMMIT, commit_oid, commit)
    return objects, commit_oid


@pytest.mark.parametrize("count", [0, 1, 4, 300])
def test_published_pack_is_read_by_plain_git(tmp_path: Path, count: int) -> None:
    """A published pack passes verify-pack and fsck --strict, cat-file reads every object, and
    ``git index-pack`` rebuilds an .idx byte-identical to ours (fanout, names, crc32s, offsets)."""
    repo = bare(tmp_path / "repo.git")
    pack_dir = repo / "objects" / "pack"
    objects, commit = objects_for(count)
    pending = write_pack(pack_dir, objects)
    pending.publish()
    git(repo, "update-ref", "refs/heads/main", commit.hex())
    pack = pack_dir / f"pack-{pending.name}.pack"
    verify = git(repo, "verify-pack", "-v", str(pack.with_suffix(".idx"))).decode()
    listed = {line.split()[0] for line in verify.splitlines() if len(line.split()[0]) == 40}
    assert listed == {oid.hex() for oid in objects}
    assert "chain length" not in verify  # undeltified
    rebuilt = tmp_path / "rebuilt.idx"
    assert git(repo, "index-pack", "-o", str(rebuilt), str(pack)).decode().strip() == pending.name
    assert rebuilt.read_bytes() == pack.with_suffix(".idx").read_bytes()
    assert all_objects(repo) == {
        oid: ({OBJ_BLOB: b"blob", OBJ_TREE: b"tree", OBJ_COMMIT: b"commit"}[obj.kind], obj.data)
        for oid, obj in objects.items()
    }
    assert git(repo, "cat-file", "-p", commit.hex()).endswith(b"\n\npack test\n")
    fsck(repo)


def test_rolled_up_pack_is_what_git_index_pack_makes_of_it(tmp_path: Path) -> None:
    """A pack built from new objects plus two absorbed packs copied as blocks (one sharing objects with the
    new ones, so copied entry by entry without them) holds every object once, and ``git index-pack``
    rebuilds its .idx byte for byte (the CRCs taken from the absorbed indexes are right)."""
    repo = bare(tmp_path / "repo.git")
    pack_dir = repo / "objects" / "pack"
    objects, commit = objects_for(40)
    items = list(objects.values())
    first = dict((obj.oid, obj) for obj in items[:15])
    second = dict((obj.oid, obj) for obj in items[10:30])  # shares five objects with the new ones below
    new = dict((obj.oid, obj) for obj in items[25:])
    packs = []
    for part in (first, second):
        pending = write_pack(tmp_path / "elsewhere", part)
        pending.publish()
        base = tmp_path / "elsewhere" / pending.stem
        packs.append(Pack.open(f"{base}.idx", f"{base}.pack"))
    pending = write_pack(pack_dir, new, blocks=[pack.block() for pack in packs])
    pending.publish()
    git(repo, "update-ref", "refs/heads/main", commit.hex())
    pack = pack_dir / f"{pending.stem}.pack"
    verify = git(repo, "verify-pack", "-v", str(pack.with_suffix(".idx"))).decode()
    listed = [line.split()[0] for line in verify.splitlines() if len(line.split()[0]) == 40]
    assert sorted(listed) == sorted(oid.hex() for oid in objects)  # each once
    rebuilt = tmp_path / "rebuilt.idx"
    assert git(repo, "index-pack", "-o", str(rebuilt), str(pack)).decode().strip() == pending.name
    assert rebuilt.read_bytes() == pack.with_suffix(".idx").read_bytes()
    fsck(repo)


def test_empty_pack_is_valid(tmp_path: Path) -> None:
    """A pack of no objects passes verify-pack and its .idx equals the one git index-pack writes."""
    repo = bare(tmp_path / "repo.git")
    pending = write_pack(repo / "objects" / "pack", {})
    pending.publish()
    pack = repo / "objects" / "pack" / f"pack-{pending.name}.pack"
    git(repo, "verify-pack", str(pack.with_suffix(".idx")))
    git(repo, "index-pack", "-o", str(tmp_path / "rebuilt.idx"), str(pack))
    assert (tmp_path / "rebuilt.idx").read_bytes() == pack.with_suffix(".idx").read_bytes()
    assert git(repo, "count-objects", "-v").decode().count("in-pack: 0") == 1


def test_discarded_pack_leaves_nothing_for_git(tmp_path: Path) -> None:
    """discard after write_pack leaves objects/ exactly as it was: no tmp_ file, no pack, no object."""
    repo = bare(tmp_path / "repo.git")
    before = sorted(str(p.relative_to(repo)) for p in (repo / "objects").rglob("*"))
    objects, commit = objects_for(4)
    pending = write_pack(repo / "objects" / "pack", objects)
    assert len(list((repo / "objects" / "pack").glob("tmp_*"))) == 2
    pending.discard()
    assert sorted(str(p.relative_to(repo)) for p in (repo / "objects").rglob("*")) == before
    missing = subprocess.run(
        ["git", "--git-dir", str(repo), "cat-file", "-e", commit.hex()], capture_output=True
    )
    assert missing.returncode != 0


# -- the in-process reader against git's own packs ------------------------------------------------------


def commit_edits(repo: WikiRepo, message: str, edits: list[Edit]) -> str:
    """Check ``edits`` as the worker does (check_static, preflight on the head) and commit them."""
    batch = Batch(message=message, edits=edits)
    check_static(batch)
    base = repo.head()
    return repo.commit_plan(preflight(repo.snapshot(base), batch.edits), base, message, ALICE)


def build_history(root: Path) -> Path:
    """A wiki of 13 commits (12 versions of a 100 KiB page, small and binary pages) in undeltified packs, some
    rolled up by later commits, and a loose tag."""
    store = GitStore(root / "data")
    store.create("w")
    repo = store.open("w")
    rng = random.Random(7)
    big = bytearray(rng.randbytes(50 * 1024).hex().encode())
    for n in range(12):
        at = rng.randrange(len(big))
        big[at : at + 1] = b"<edit %d>" % n
        text = big.decode()
        version = repo.snapshot().version("wiki/big.md")
        edits: list[Edit] = [
            Overwrite(op="overwrite", path="wiki/big.md", content=text, expected_version=version)
            if version
            else Create(op="create", path="wiki/big.md", content=text),
            Create(op="create", path=f"wiki/n{n % 3}/page{n}.md", content=f"page {n}\n" * (n + 1)),
        ]
        if n % 4 == 3:
            data = base64.b64encode(rng.randbytes(3000) + bytes(range(256)) * 4).decode()
            edits.append(Create(op="create", path=f"wiki/bin{n}.dat", content=data, encoding="base64"))
        commit_edits(repo, f"commit {n}", edits)
    path = store.path("w")
    store.close()
    git(path, "tag", "-a", "-m", "an annotated tag", "v1", "main")  # a loose object
    return path


def loose(repo: Path) -> set[bytes]:
    return {
        bytes.fromhex(p.parent.name + p.name)
        for p in (repo / "objects").glob("??/*")
        if len(p.parent.name + p.name) == 40
    }


def check_reader(reader: PackReader, repo: Path) -> dict[bytes, tuple[bytes, bytes]]:
    """Each packed object reads as git reads it; loose and unknown ids give None; the pack list is current."""
    objects = all_objects(repo)
    not_packed = loose(repo)
    for oid, expected in objects.items():
        assert reader.read(oid) == (None if oid in not_packed else expected), oid.hex()
    for unknown in (b"\x00" * 20, b"\xff" * 20, object_id(b"blob", b"not in this repository")):
        assert reader.read(unknown) is None
    assert set(reader.packs) == pack_names(repo)  # a miss re-listed objects/pack: gone packs dropped
    return objects


def check_deltas(repo: Path, objects: dict[bytes, tuple[bytes, bytes]]) -> list[int]:
    """apply_delta of each delta git wrote, on its base as git reads it, gives the object; returns depths."""
    found = deltas(repo)
    packs = {pack: pack.read_bytes() for pack, *_ in found}
    for pack, oid, offset, _, base in found:
        kind, made = raw_entry(packs[pack], offset)
        assert kind in (6, 7)
        assert apply_delta(objects[bytes.fromhex(base)][1], made) == objects[bytes.fromhex(oid)][1]
    return [depth for *_, depth, _ in found]


def entry_types(repo: Path) -> set[int]:
    """The pack entry types git used for its deltified objects (6: OFS_DELTA, 7: REF_DELTA)."""
    found = deltas(repo)
    return {raw_entry(pack.read_bytes(), offset)[0] for pack, _, offset, _, _ in found}


def test_reader_agrees_with_git_through_every_kind_of_repack(tmp_path: Path) -> None:
    """Undeltified packs (rolled up or not), repack -a -d, a deep --window=50 --depth=50 repack,
    gc --aggressive and a REF_DELTA repack: both a reader opened at the start and a fresh one return exactly
    git's type and bytes."""
    repo = build_history(tmp_path)
    assert 1 < len(pack_names(repo)) < 13 and len(loose(repo)) == 1
    early = PackReader(repo / "objects" / "pack")
    objects = check_reader(early, repo)
    assert {kind for kind, _ in objects.values()} == {b"blob", b"tree", b"commit", b"tag"}
    assert deltas(repo) == []
    stages: list[list[str]] = [
        ["repack", "-a", "-d"],
        ["repack", "-a", "-d", "-f", "--window=50", "--depth=50"],
        ["gc", "--aggressive", "--quiet"],
        ["-c", "repack.useDeltaBaseOffset=false", "repack", "-a", "-d", "-f"],
    ]
    for stage in stages:
        git(repo, *stage)
        assert loose(repo) == set() and len(pack_names(repo)) == 1
        assert check_reader(early, repo) == objects
        fresh = PackReader(repo / "objects" / "pack")
        assert check_reader(fresh, repo) == objects
        fresh.close()
        depths = check_deltas(repo, objects)
        assert len(depths) >= 10, stage  # the 100 KiB page's versions at least
        if "--depth=50" in stage:
            assert max(depths) >= 3
        assert entry_types(repo) == ({7} if "repack.useDeltaBaseOffset=false" in stage else {6}), stage
    early.close()
    fsck(repo)


def test_wiki_repo_falls_back_to_git_for_loose_objects(tmp_path: Path) -> None:
    """An object the reader does not have (a loose tag) is still read by WikiRepo, through git cat-file."""
    path = build_history(tmp_path)
    (tag,) = loose(path)
    repo = WikiRepo(path)
    try:
        assert repo.packed.read(tag) is None
        assert repo._read(tag.hex()) == ("tag", git(path, "cat-file", "tag", tag.hex()))
        head = repo.head()
        assert head is not None
        assert repo.snapshot(head).read("wiki/n0/page0.md") == b"page 0\n"
    finally:
        repo.close()


def test_corrupt_git_delta_is_refused(tmp_path: Path) -> None:
    """A delta git wrote, applied to the wrong base, cut short or with a wrong target size, raises."""
    repo = build_history(tmp_path)
    git(repo, "repack", "-a", "-d")
    objects = all_objects(repo)
    pack, oid, offset, _, base_id = max(deltas(repo), key=lambda d: len(objects[bytes.fromhex(d[1])][1]))
    _, made = raw_entry(pack.read_bytes(), offset)
    base, target = objects[bytes.fromhex(base_id)][1], objects[bytes.fromhex(oid)][1]
    assert len(target) > 64 * 1024 and apply_delta(base, made) == target
    with pytest.raises(ValueError):
        apply_delta(base + b"x", made)
    with pytest.raises(ValueError):
        apply_delta(base[:-1], made)
    for cut in (len(made) - 1, len(made) // 2, 3):
        with pytest.raises((ValueError, IndexError)):
            apply_delta(base, made[:cut])


# -- through WikiRepo: 200 commits, then git's repacks ---------------------------------------------------


def check_history(repo: WikiRepo, checkpoints: dict[str, dict[str, bytes]]) -> None:
    """Every file at every checkpoint reads back with the right bytes and version, in process."""
    for commit, files in checkpoints.items():
        assert {f.path: f.version for f in repo.list_files(commit)} == {
            p: blob_id(d) for p, d in files.items()
        }
        snap = repo.snapshot(commit)
        for path, data in files.items():
            assert snap.version(path) == blob_id(data)
            assert snap.read(path) == data
            assert repo.packed.read(bytes.fromhex(blob_id(data))) == (b"blob", data)  # no fallback needed
        assert sorted(snap.files_under("wiki")) == sorted(p for p in files if p.startswith("wiki/"))


def test_two_hundred_commits_read_back_after_maintenance_repacks(tmp_path: Path) -> None:
    """200 small commits (rolled up as they go), git's geometric repack without and with deltas, and
    repack -a -d -f: every file at every 20th commit still reads back right (old and fresh WikiRepo), and
    fsck is clean."""
    store = GitStore(tmp_path / "data")
    store.create("w")
    repo = store.open("w")
    path = store.path("w")
    head = repo.head()
    assert head is not None
    state = {f.path: repo.read_blob(f.version) for f in repo.list_files(head)}
    assert set(state) == {"index.md", "log.md", "schema.md"}
    checkpoints: dict[str, dict[str, bytes]] = {}
    for n in range(200):
        page = f"wiki/p{n % 23}.md"
        data = f"# page {n % 23}\n\nrevision {n}\n".encode() * (1 + n % 5)
        edits: list[Edit] = [
            Overwrite(op="overwrite", path=page, content=data.decode(), expected_version=blob_id(state[page]))
            if page in state
            else Create(op="create", path=page, content=data.decode())
        ]
        state[page] = data
        if n % 10 == 4:
            nested = f"wiki/d{n % 3}/s{n}.md"
            edits.append(Create(op="create", path=nested, content=f"nested {n}\n"))
            state[nested] = f"nested {n}\n".encode()
        if n % 7 == 6:
            gone = sorted(p for p in state if p.startswith("wiki/") and p != page)[n % 5]
            edits.append(Delete(op="delete", path=gone, expected_version=blob_id(state.pop(gone))))
        commit = commit_edits(repo, f"commit {n}", edits)
        if n % 20 == 19:
            checkpoints[commit] = dict(state)
    assert len(checkpoints) == 10 and len(pack_names(path)) <= MAX_PACKS  # rolled up by the commits
    check_history(repo, checkpoints)
    repack(path, deltas=False)  # git's geometric repack without delta search
    assert len(pack_names(path)) < 10
    assert repo.packed.read(b"\x00" * 20) is None  # a miss: the reader drops the packs git deleted
    assert set(repo.packed.packs) == pack_names(path)
    check_history(repo, checkpoints)
    repack(path, deltas=True)  # the idle repack, deltas on
    check_history(repo, checkpoints)
    # -f: git never tries a delta between two objects stored whole in the same pack (it takes that as an
    # earlier repack's verdict), so without it the window=0 pack above would stay undeltified.
    git(path, "repack", "-a", "-d", "-f")
    assert len(pack_names(path)) == 1 and len(deltas(path)) > 100
    check_history(repo, checkpoints)
    fresh = WikiRepo(path)
    try:
        check_history(fresh, checkpoints)
    finally:
        fresh.close()
    store.close()
    fsck(path)
