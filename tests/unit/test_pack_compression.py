"""Which pack entries wikiq deflates (``worker.git.objects.encode``): small objects are stored, bigger blobs
and commits deflated, trees always stored; every entry inflates back to its object."""

from __future__ import annotations

import zlib

import pytest

from worker.git.objects import (
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    STORED_MAX_BYTES,
    TYPE_NAMES,
    PackedObject,
    encode,
    object_id,
)


def zlib_stream(raw: bytes) -> bytes:
    """The zlib stream of a raw pack entry (after its variable-length type-and-size header)."""
    at = 0
    while raw[at] & 0x80:
        at += 1
    return raw[at + 1 :]


@pytest.mark.parametrize(
    ("kind", "size", "stored"),
    [
        (OBJ_BLOB, 300, True),
        (OBJ_BLOB, STORED_MAX_BYTES, True),
        (OBJ_BLOB, STORED_MAX_BYTES + 1, False),
        (OBJ_BLOB, 200_000, False),
        (OBJ_COMMIT, 250, True),
        (OBJ_COMMIT, 5_000, False),
        (OBJ_TREE, 200_000, True),
    ],
)
def test_small_objects_are_stored_bigger_blobs_and_commits_deflated(
    kind: int, size: int, stored: bool
) -> None:
    """The first deflate block of the entry is a stored one (BTYPE 00) exactly for small objects and trees,
    and every entry inflates back to the object's bytes."""
    data = (b"# A page\n\nSome text that compresses well, written again and again.\n" * (size // 60 + 1))[
        :size
    ]
    oid = object_id(TYPE_NAMES[kind], data)
    assert [entry[0] for entry in encode([PackedObject(kind, oid, data)])] == [oid]
    ((_, raw),) = encode([PackedObject(kind, oid, data)])
    stream = zlib_stream(raw)
    assert zlib.decompress(stream) == data
    assert (stream[2] >> 1) & 3 == 0 if stored else (stream[2] >> 1) & 3 != 0
    assert (len(stream) > len(data)) == stored
