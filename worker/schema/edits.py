"""The edit vocabulary: the five ops of the contract, a batch, and its limits.

One closed set of pydantic models, validated once at the edge and shared by the HTTP API, the worker and
the MCP tools. Unknown fields are refused. ``content`` is text (``encoding="utf-8"``) or base64 of bytes;
``decoded()`` turns it into the exact bytes that will be written.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from worker.errors import BatchRejected

Version = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{40}$",
        description="the version you read (the git blob id, from read_page or the pages list); "
        "required to change a path that exists at the head, ignored for a path created earlier in the batch",
    ),
]
Encoding = Annotated[
    Literal["utf-8", "base64"],
    Field(description="utf-8: content is the text itself; base64: content is base64 of the exact bytes"),
]
Content = Annotated[str, Field(description="the whole new file content (see encoding)")]


class _Edit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="relative POSIX path inside the wiki, e.g. wiki/redis.md")


class Create(_Edit):
    """Create a file that does not exist yet."""

    op: Literal["create"]
    content: Content
    encoding: Encoding = "utf-8"


class Overwrite(_Edit):
    """Replace the whole content of an existing file."""

    op: Literal["overwrite"]
    content: Content
    encoding: Encoding = "utf-8"
    expected_version: Version | None = None


class Replace(_Edit):
    """Replace byte-exact occurrences of ``old`` by ``new`` in an existing file."""

    op: Literal["replace"]
    old: Annotated[str, Field(description="non-empty text matched byte-exactly (read the page raw first)")]
    new: Annotated[str, Field(description="the replacement text")]
    expected_version: Version | None = None
    replace_all: Annotated[bool, Field(description="replace every occurrence; else old must be unique")] = (
        False
    )
    expected_count: Annotated[
        int | None, Field(ge=1, description="refuse unless old occurs exactly this many times")
    ] = None


class Delete(_Edit):
    """Delete an existing file."""

    op: Literal["delete"]
    expected_version: Version | None = None


class Rename(_Edit):
    """Move an existing file to a path that does not exist."""

    op: Literal["rename"]
    new_path: Annotated[str, Field(description="where the file moves; must not exist")]
    expected_version: Version | None = None


Edit = Annotated[Create | Overwrite | Replace | Delete | Rename, Field(discriminator="op")]


class Webhook(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[str, Field(min_length=1, max_length=2048)]


class Batch(BaseModel):
    """A batch: edits applied in order as one commit on ``main``, or not at all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message: Annotated[str, Field(min_length=1, max_length=10_000, description="the commit message")]
    edits: Annotated[
        list[Edit], Field(description="applied in order, each to the state the earlier ones left")
    ]
    webhook: Annotated[Webhook | None, Field(description="POST the finished job here, signed")] = None
    dry_run: Annotated[bool, Field(description="check everything against the head, commit nothing")] = False


class Limits(BaseModel):
    """Per-batch limits; over one is ``413``.

    ``max_edits`` and ``max_content_bytes`` bound the request (contract rule 10); ``max_file_bytes`` and
    ``max_output_bytes`` bound what the batch produces (one file, and all new content together), so a small
    request cannot ask a worker to build a huge result (a ``replace_all`` multiplies its input).
    """

    max_edits: int = 1000
    max_content_bytes: int = 8 * 1024 * 1024
    max_file_bytes: int = 8 * 1024 * 1024
    max_output_bytes: int = 64 * 1024 * 1024


def utf8(text: str, index: int | None, what: str = "content") -> bytes:
    """``text`` as UTF-8 bytes; ``INVALID_ENCODING`` for text that has no UTF-8 form (lone surrogates)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BatchRejected(
            "INVALID_ENCODING", f"{what} is not valid Unicode text; send bytes as base64", index
        ) from None


def decoded(edit: Create | Overwrite, index: int) -> bytes:
    """The exact bytes ``edit.content`` stands for; ``INVALID_ENCODING`` when it cannot be decoded."""
    if edit.encoding == "utf-8":
        return utf8(edit.content, index)
    try:
        return base64.b64decode(edit.content, validate=True)
    except (binascii.Error, ValueError):
        raise BatchRejected("INVALID_ENCODING", "content is not valid base64", index) from None


def content_size(edit: Create | Overwrite | Replace | Delete | Rename, index: int) -> int:
    """Decoded bytes an edit carries (content, or ``old`` + ``new``), counted against the batch limit."""
    if isinstance(edit, Create | Overwrite):
        return len(decoded(edit, index))
    if isinstance(edit, Replace):
        return len(utf8(edit.old, index, "old")) + len(utf8(edit.new, index, "new"))
    return 0


def check_limits(batch: Batch, limits: Limits) -> None:
    """Refuse an empty batch (BATCH_EMPTY) or one over a limit (TOO_MANY_EDITS, BATCH_TOO_LARGE)."""
    if not batch.edits:
        raise BatchRejected("BATCH_EMPTY", "the batch has no edits; add at least one")
    if len(batch.edits) > limits.max_edits:
        raise BatchRejected(
            "TOO_MANY_EDITS",
            f"{len(batch.edits)} edits is over the limit of {limits.max_edits}; split the batch",
        )
    sizes = [content_size(edit, index) for index, edit in enumerate(batch.edits)]
    total = sum(sizes)
    if total > limits.max_content_bytes:
        raise BatchRejected(
            "BATCH_TOO_LARGE",
            f"{total} bytes of content is over the limit of {limits.max_content_bytes}; split the batch",
        )
    for index, (edit, size) in enumerate(zip(batch.edits, sizes, strict=True)):
        if isinstance(edit, Create | Overwrite) and size > limits.max_file_bytes:
            raise BatchRejected(
                "BATCH_TOO_LARGE",
                f"the content is {size} bytes, over the limit of {limits.max_file_bytes} bytes a file; "
                "split the page",
                index,
            )
