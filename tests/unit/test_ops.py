"""The edit vocabulary (contract 3.1): models, encodings and per-batch limits."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pydantic import ValidationError

from worker.engine import DictHead, check_static, preflight
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Create, Delete, Limits, Overwrite, Rename, Replace, decoded

V = "0" * 40


def _batch(*edits: dict[str, Any], **extra: Any) -> Batch:
    return Batch.model_validate({"message": "m", "edits": list(edits), **extra})


def _rejected(batch: Batch, limits: Limits | None = None) -> tuple[str, int | None]:
    with pytest.raises(BatchRejected) as info:
        check_static(batch, limits=limits)
    return info.value.code, info.value.index


# -- models --------------------------------------------------------------------------------------------


MINIMAL: dict[str, dict[str, Any]] = {
    "create": {"op": "create", "path": "wiki/a.md", "content": "x"},
    "overwrite": {"op": "overwrite", "path": "wiki/a.md", "content": "x"},
    "replace": {"op": "replace", "path": "wiki/a.md", "old": "x", "new": "y"},
    "delete": {"op": "delete", "path": "wiki/a.md"},
    "rename": {"op": "rename", "path": "wiki/a.md", "new_path": "wiki/b.md"},
}
MODEL = {"create": Create, "overwrite": Overwrite, "replace": Replace, "delete": Delete, "rename": Rename}


@pytest.mark.parametrize("op", list(MINIMAL))
def test_discriminator_picks_the_model_of_each_op(op: str) -> None:
    """The ``op`` field selects the edit model."""
    edit = _batch(MINIMAL[op]).edits[0]
    assert type(edit) is MODEL[op]
    assert edit.op == op


@pytest.mark.parametrize("op", list(MINIMAL))
def test_each_required_field_is_required(op: str) -> None:
    """Dropping any one field of an op's minimal form fails validation."""
    for field in MINIMAL[op]:
        body = {k: v for k, v in MINIMAL[op].items() if k != field}
        with pytest.raises(ValidationError):
            _batch(body)


@pytest.mark.parametrize("op", list(MINIMAL))
def test_unknown_edit_fields_are_refused(op: str) -> None:
    """An edit with a field its op does not define is refused."""
    with pytest.raises(ValidationError, match="extra"):
        _batch({**MINIMAL[op], "mode": "0755"})


def test_fields_of_other_ops_are_refused() -> None:
    """A create carrying expected_version, or a delete carrying content, is refused as unknown fields."""
    with pytest.raises(ValidationError):
        _batch({**MINIMAL["create"], "expected_version": V})
    with pytest.raises(ValidationError):
        _batch({**MINIMAL["delete"], "content": "x"})
    with pytest.raises(ValidationError):
        _batch({**MINIMAL["overwrite"], "new_path": "wiki/b.md"})


def test_unknown_batch_fields_are_refused() -> None:
    """A batch with an unknown top-level field, or an unknown webhook field, is refused."""
    with pytest.raises(ValidationError):
        _batch(MINIMAL["create"], author="someone")
    with pytest.raises(ValidationError):
        _batch(MINIMAL["create"], webhook={"url": "https://example.org/h", "secret": "s"})
    assert _batch(MINIMAL["create"], webhook={"url": "https://example.org/h"}).webhook is not None


def test_unknown_op_and_missing_op_are_refused() -> None:
    """An edit whose op is unknown or absent does not validate."""
    with pytest.raises(ValidationError):
        _batch({"op": "move", "path": "wiki/a.md", "new_path": "wiki/b.md"})
    with pytest.raises(ValidationError):
        _batch({"path": "wiki/a.md", "content": "x"})


def test_message_is_required_and_non_empty() -> None:
    """A batch needs a non-empty message."""
    with pytest.raises(ValidationError):
        Batch.model_validate({"edits": [MINIMAL["create"]]})
    with pytest.raises(ValidationError):
        Batch.model_validate({"message": "", "edits": [MINIMAL["create"]]})


def test_defaults_of_optional_fields() -> None:
    """encoding defaults to utf-8, replace_all to false, expected_count and expected_version to None."""
    batch = _batch(MINIMAL["create"], MINIMAL["replace"], MINIMAL["delete"])
    create, replace, delete = batch.edits
    assert isinstance(create, Create) and create.encoding == "utf-8"
    assert isinstance(replace, Replace)
    assert (replace.replace_all, replace.expected_count, replace.expected_version) == (False, None, None)
    assert isinstance(delete, Delete) and delete.expected_version is None
    assert batch.dry_run is False and batch.webhook is None


def test_expected_version_must_be_a_blob_id() -> None:
    """expected_version must be 40 lowercase hex digits."""
    for bad in ["abc", "G" * 40, "A" * 40, "0" * 41]:
        with pytest.raises(ValidationError):
            _batch({**MINIMAL["delete"], "expected_version": bad})
    edit = _batch({**MINIMAL["delete"], "expected_version": V}).edits[0]
    assert isinstance(edit, Delete) and edit.expected_version == V


def test_encoding_accepts_only_utf8_and_base64() -> None:
    """encoding is "utf-8" or "base64"; anything else is refused."""
    with pytest.raises(ValidationError):
        _batch({**MINIMAL["create"], "encoding": "latin-1"})


def test_expected_count_is_at_least_one() -> None:
    """expected_count of zero is refused by the model."""
    with pytest.raises(ValidationError):
        _batch({**MINIMAL["replace"], "expected_count": 0})


def test_models_are_frozen() -> None:
    """Validated edits are immutable."""
    edit = _batch(MINIMAL["create"]).edits[0]
    with pytest.raises(ValidationError):
        edit.path = "wiki/other.md"


# -- encodings -----------------------------------------------------------------------------------------


def test_base64_content_decodes_to_exact_bytes() -> None:
    """base64 content stands for its decoded bytes, non-UTF-8 included."""
    data = b"\x00\xff\xfe binary \r\n"
    edit = Create(op="create", path="raw/b.bin", content=base64.b64encode(data).decode(), encoding="base64")
    assert decoded(edit, 0) == data
    plan = preflight(DictHead({}), [edit])
    new = plan.changes["raw/b.bin"]
    assert new is not None and new.data == data


def test_utf8_content_is_written_byte_exact() -> None:
    """utf-8 content is its UTF-8 encoding, line endings and all."""
    edit = Create(op="create", path="wiki/a.md", content="é\r\nx\n")
    assert decoded(edit, 3) == "é\r\nx\n".encode()


@pytest.mark.parametrize("content", ["not base64!", "aGVsbG8", "aGVs\nbG8=", "====", "aGVsbG8=x"])
def test_invalid_base64_is_invalid_encoding(content: str) -> None:
    """Content that is not strict base64 is INVALID_ENCODING at its edit."""
    batch = _batch(
        MINIMAL["create"],
        {"op": "overwrite", "path": "wiki/b.md", "content": content, "encoding": "base64"},
    )
    assert _rejected(batch) == ("INVALID_ENCODING", 1)


def test_lone_surrogate_in_content_is_invalid_encoding() -> None:
    """Text content with a lone surrogate has no UTF-8 form and is INVALID_ENCODING."""
    batch = _batch(MINIMAL["create"], {"op": "create", "path": "wiki/b.md", "content": "a\ud800b"})
    assert _rejected(batch) == ("INVALID_ENCODING", 1)


@pytest.mark.parametrize("field", ["old", "new"])
def test_lone_surrogate_in_replace_is_invalid_encoding(field: str) -> None:
    """A replace whose old or new holds a lone surrogate is INVALID_ENCODING."""
    batch = _batch({**MINIMAL["replace"], field: "\udfff"})
    assert _rejected(batch) == ("INVALID_ENCODING", 0)


def test_lone_surrogate_is_refused_by_preflight_too() -> None:
    """Preflight without the static check also refuses undecodable content."""
    edits = _batch({"op": "create", "path": "wiki/b.md", "content": "\ud800"}).edits
    with pytest.raises(BatchRejected) as info:
        preflight(DictHead({}), edits)
    assert (info.value.code, info.value.index) == ("INVALID_ENCODING", 0)


# -- limits --------------------------------------------------------------------------------------------


def _creates(n: int, content: str = "x") -> Batch:
    return _batch(*({"op": "create", "path": f"wiki/p{i}.md", "content": content} for i in range(n)))


def test_empty_batch_is_batch_empty() -> None:
    """A batch with no edits is BATCH_EMPTY with no index."""
    assert _rejected(_batch()) == ("BATCH_EMPTY", None)


def test_too_many_edits_over_configured_limit() -> None:
    """With max_edits=3, three edits pass and four are TOO_MANY_EDITS."""
    limits = Limits(max_edits=3)
    check_static(_creates(3), limits=limits)
    assert _rejected(_creates(4), limits) == ("TOO_MANY_EDITS", None)


def test_batch_too_large_over_configured_limit() -> None:
    """Content bytes up to max_content_bytes pass; one byte more is BATCH_TOO_LARGE."""
    check_static(_creates(2, "abcde"), limits=Limits(max_content_bytes=10))
    assert _rejected(_creates(2, "abcde"), Limits(max_content_bytes=9)) == ("BATCH_TOO_LARGE", None)


def test_batch_size_counts_decoded_base64_bytes() -> None:
    """The size limit counts decoded bytes: 12 bytes sent as 16 base64 characters fit a 12-byte limit."""
    encoded = base64.b64encode(b"\xff" * 12).decode()
    assert len(encoded) == 16
    batch = _batch({"op": "create", "path": "raw/b.bin", "content": encoded, "encoding": "base64"})
    check_static(batch, limits=Limits(max_content_bytes=12))
    assert _rejected(batch, Limits(max_content_bytes=11)) == ("BATCH_TOO_LARGE", None)


def test_batch_size_counts_utf8_bytes_not_characters() -> None:
    """Text is counted in UTF-8 bytes: four 'é' are 8 bytes."""
    batch = _batch({"op": "create", "path": "wiki/a.md", "content": "éééé"})
    check_static(batch, limits=Limits(max_content_bytes=8))
    assert _rejected(batch, Limits(max_content_bytes=7)) == ("BATCH_TOO_LARGE", None)


def test_batch_size_counts_replace_old_and_new() -> None:
    """A replace counts the bytes of old plus new against the limit."""
    batch = _batch({**MINIMAL["replace"], "old": "abc", "new": "defg"})
    check_static(batch, limits=Limits(max_content_bytes=7))
    assert _rejected(batch, Limits(max_content_bytes=6)) == ("BATCH_TOO_LARGE", None)


def test_default_limits_are_1000_edits_and_8_mib() -> None:
    """By default 1000 edits and 8 MiB of content pass, and one more of either is refused."""
    assert Limits().max_edits == 1000
    assert Limits().max_content_bytes == 8 * 1024 * 1024
    check_static(_creates(1000))
    assert _rejected(_creates(1001)) == ("TOO_MANY_EDITS", None)
    big = "x" * (8 * 1024 * 1024)
    check_static(_batch({"op": "create", "path": "wiki/big.md", "content": big}))
    too_big = _batch(
        {"op": "create", "path": "wiki/big.md", "content": big},
        {"op": "create", "path": "wiki/one.md", "content": "y"},
    )
    assert _rejected(too_big) == ("BATCH_TOO_LARGE", None)
