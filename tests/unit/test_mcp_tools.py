"""The MCP tool definitions without a server process: descriptions, schemas, limits, argument errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from api.mcp.tools import HINTS, build_server, invalid_arguments, trimmed
from worker.errors import CODES
from worker.schema.answers import FileDiff
from worker.schema.edits import Edit, Limits

READ_TOOLS = {
    "list_wikis",
    "list_pages",
    "read_page",
    "read_pages",
    "page_outline",
    "search_wiki",
    "find_backlinks",
    "check_batch",
    "get_job",
}
WRITE_BATCH_BEFORE = 2440  # characters of write_batch's description before refactor-grade edits


def tools(limits: Limits | None = None) -> dict[str, Any]:
    server = build_server(lambda ctx: None, limits or Limits())  # type: ignore[arg-type,return-value]
    return {tool.name: tool for tool in asyncio.run(server.list_tools())}


def test_read_tools_are_read_only_and_the_rest_are_marked_destructive() -> None:
    """Reads and the dry run are read-only, so hosts need no confirmation; writes say they are not."""
    found = tools()
    assert set(found) == READ_TOOLS | {"write_batch", "cancel_job"}
    for name, tool in found.items():
        assert tool.annotations.read_only_hint is (name in READ_TOOLS), name
        assert tool.annotations.destructive_hint is (name not in READ_TOOLS), name


def test_descriptions_state_the_configured_limits() -> None:
    """The limits in the descriptions and the edits schema are the server's settings, not constants."""
    found = tools(Limits(max_edits=7, max_content_bytes=3 * 1024 * 1024, max_file_bytes=2 * 1024 * 1024))
    write = found["write_batch"]
    assert "7 edits, 3 MiB of content, 2 MiB per file" in write.description
    assert write.input_schema["properties"]["edits"]["maxItems"] == 7
    assert "7 edits" in found["check_batch"].description
    assert "over\n2 MiB" in found["read_page"].description or "over 2 MiB" in found["read_page"].description


def test_write_batch_is_shorter_than_before_and_names_every_batch_error() -> None:
    """write_batch's description got shorter, yet names each code a batch can meet, with a recovery."""
    write = tools()["write_batch"].description
    assert len(write) < WRITE_BATCH_BEFORE
    batch_codes = CODES - {
        "JOB_NOT_FOUND",
        "NOT_CANCELLABLE",
        "WIKI_EXISTS",
        "WEBHOOK_REFUSED",
        "UNAUTHORIZED",
        "BATCH_EMPTY",
        "REMOTE_NOT_FOUND",
        "REMOTE_UNAVAILABLE",
        "REMOTE_REJECTED",
        "STORAGE_UNAVAILABLE",
        "INVALID_WEBHOOK",
        "MISDIRECTED_HOST",
    }
    assert {code for code in batch_codes if code not in write} == set()
    # refusals of the request itself (its webhook URL, its Host), not of the batch's edits
    assert set(CODES) <= set(HINTS) | {
        "WIKI_EXISTS",
        "WEBHOOK_REFUSED",
        "INVALID_WEBHOOK",
        "MISDIRECTED_HOST",
    }


def _fields(schema: dict[str, Any], defs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, field in schema.get("properties", {}).items():
        out.append((name, field))
    for definition in defs.values():
        for name, field in definition.get("properties", {}).items():
            out.append((f"{definition.get('title')}.{name}", field))
    return out


def test_every_input_and_output_field_is_described() -> None:
    """Every parameter, every edit field and every output field has a description."""
    for name, tool in tools().items():
        for label, schema in (("input", tool.input_schema), ("output", tool.output_schema or {})):
            missing = [
                field for field, spec in _fields(schema, schema.get("$defs", {})) if "description" not in spec
            ]
            assert missing == [], (name, label, missing)


def test_schema_constraints_agents_rely_on() -> None:
    """old is non-empty, edits has bounds and an example, wiki has its pattern, message its length."""
    write = tools()["write_batch"].input_schema
    assert write["$defs"]["Replace"]["properties"]["old"]["minLength"] == 1
    edits = write["properties"]["edits"]
    assert (edits["minItems"], edits["maxItems"]) == (1, 1000) and edits["examples"]
    assert write["properties"]["wiki"]["pattern"] == "^[a-z0-9][a-z0-9._-]{0,62}$"
    assert write["properties"]["message"]["maxLength"] == 10_000


class _Args(BaseModel):
    wiki: str = Field(pattern="^[a-z]+$")
    edits: list[Edit] = Field(min_length=1, max_length=2)


@pytest.mark.parametrize(
    ("arguments", "code", "index", "message"),
    [
        ({"wiki": "A", "edits": [{"op": "delete", "path": "x"}]}, "INVALID_BATCH", None, "wiki:"),
        ({"wiki": "a", "edits": []}, "BATCH_EMPTY", None, "edits:"),
        ({"wiki": "a", "edits": [{"op": "delete", "path": "x"}] * 3}, "TOO_MANY_EDITS", None, "edits:"),
        (
            {"wiki": "a", "edits": [{"op": "replace", "path": "x", "old": "a"}]},
            "INVALID_BATCH",
            0,
            "edits.0.new:",
        ),
        (
            {"wiki": "a", "edits": [{"op": "delete", "path": "x", "extra": 1}]},
            "INVALID_BATCH",
            0,
            "edits.0.extra:",
        ),
    ],
    ids=["bad-wiki", "no-edits", "too-many", "missing-field", "unknown-field"],
)
def test_argument_errors_name_the_field_and_the_edit(
    arguments: dict[str, Any], code: str, index: int | None, message: str
) -> None:
    """A validation error becomes the usual refusal: code, message naming the field, index, hint."""
    with pytest.raises(ValidationError) as info:
        _Args.model_validate(arguments)
    result = invalid_arguments(info.value)
    assert result.is_error and result.structured_content is not None
    error = result.structured_content["error"]
    assert (error["code"], error["index"]) == (code, index)
    assert error["message"].startswith(message), error
    assert result.structured_content["hint"]


def test_a_checks_diff_is_trimmed_for_agents_at_line_ends() -> None:
    """The diff an agent gets is cut at a line end within the budget; later files keep only their path."""
    diff = [
        FileDiff(path="a", diff="x\n" * 10),
        FileDiff(path="b", diff="y\n" * 10),
        FileDiff(path="c", diff="z\n"),
    ]
    cut = trimmed(diff, 25)
    assert cut is not None
    assert [(e.path, e.diff, e.truncated) for e in cut] == [
        ("a", "x\n" * 10, None),
        ("b", "y\n" * 2, True),
        ("c", "", True),
    ]
    assert trimmed(None) is None
