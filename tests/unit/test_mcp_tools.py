"""The MCP tool definitions without a server process: descriptions, schemas, limits, argument errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
import pytest
from mcp.types import ListToolsResult
from pydantic import BaseModel, Field, ValidationError

from api.mcp.listing import KEYWORDS as ALLOWED
from api.mcp.listing import keywords, lean
from api.mcp.tools import (
    HINTS,
    LINK_EXAMPLES,
    LINK_FILES,
    LINK_PAGE,
    CheckOutcome,
    Outline,
    WriteOutcome,
    build_server,
    invalid_arguments,
    shown,
    summed,
    trimmed,
)
from worker.engine.markdown.links import find_links, resolve_target
from worker.errors import CODES
from worker.schema import answers
from worker.schema.answers import FileDiff
from worker.schema.edits import OPS, Edit, Limits

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
WRITE_BATCH_MOST = 4800  # characters of write_batch's description: the ops in prose, the link rule
TOOL_LIST_BUDGET = 24_000  # characters of the compact tools/list (about 6 000 tokens)


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
    assert "7 edits, 3 MiB sent, 2 MiB a file" in write.description
    assert write.input_schema["properties"]["edits"]["description"].startswith("1 to 7 edits")
    assert "write_batch's" in found["check_batch"].description  # it states none of its own
    assert "over\n2 MiB" in found["read_page"].description or "over 2 MiB" in found["read_page"].description


def test_write_batch_stays_short_and_names_every_batch_error() -> None:
    """write_batch's description stays within its share of the budget, yet names each code a batch can
    meet, with a recovery."""
    write = tools()["write_batch"].description
    assert len(write) < WRITE_BATCH_MOST
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
        "QUERY_TOO_COSTLY",
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


def test_every_argument_is_described_and_every_edit_field_named_in_the_prose() -> None:
    """Every tool argument has a description; every field of every op family is named in write_batch's
    description, where the ops are described once (the schema itself stays small)."""
    found = tools()
    for name, tool in found.items():
        missing = [
            field for field, spec in tool.input_schema["properties"].items() if "description" not in spec
        ]
        assert missing == [], (name, missing)
    families = found["write_batch"].input_schema["properties"]["edits"]["items"]["anyOf"]
    prose = found["write_batch"].description
    for family in families:
        assert set(family["properties"]["op"]["enum"]) <= set(OPS)
        for field in family["properties"]:
            assert field in prose, field
    assert {op for family in families for op in family["properties"]["op"]["enum"]} == set(OPS)
    assert all(op in prose for op in OPS)


def test_schema_constraints_agents_rely_on() -> None:
    """old is non-empty, edits names its bounds, message has its length; no pattern anywhere (the server
    checks ids and paths and says why), write_batch has no dry_run (check_batch does that) and takes edits
    or check_batch's plan."""
    write = tools()["write_batch"].input_schema
    text_family = next(f for f in write["properties"]["edits"]["items"]["anyOf"] if "old" in f["properties"])
    assert text_family["properties"]["old"]["minLength"] == 1
    assert write["properties"]["edits"]["description"].startswith("1 to 1000 edits")
    assert "pattern" not in write["properties"]["wiki"]
    assert write["properties"]["message"]["maxLength"] == 10_000
    assert "dry_run" not in write["properties"]
    assert set(write["required"]) == {"wiki", "message"}
    assert {"edits", "plan"} <= set(write["properties"])


def _listing(limits: Limits | None = None) -> str:
    """``tools/list`` as the server sends it: compact JSON of the result, nulls left out."""
    server = build_server(lambda ctx: None, limits or Limits())  # type: ignore[arg-type,return-value]
    result = ListToolsResult(tools=asyncio.run(server.list_tools()))
    return json.dumps(
        result.model_dump(mode="json", by_alias=True, exclude_none=True),
        separators=(",", ":"),
        ensure_ascii=False,
    )


def test_the_tool_list_stays_within_its_budget() -> None:
    """Every agent session pays for the tool list before its first call: compact, it stays within
    TOOL_LIST_BUDGET characters (about 6 000 tokens), with limits of any size."""
    for limits in (Limits(), Limits(max_edits=10**9, max_content_bytes=10**12, max_file_bytes=10**12 - 1)):
        size = len(_listing(limits))
        assert size <= TOOL_LIST_BUDGET, size


def test_the_tool_list_uses_only_the_schema_keywords_hosts_accept() -> None:
    """Every input and output schema uses only the JSON Schema subset hosts commonly register (no
    pattern, title, $ref, if/then, oneOf, discriminator, additionalProperties...)."""
    for tool in json.loads(_listing())["tools"]:
        for label in ("inputSchema", "outputSchema"):
            used = keywords(tool.get(label, {}))
            assert used <= ALLOWED, (tool["name"], label, used - ALLOWED)
        # no schema titles (a field may be called title: extract_section's is)
        assert "title" not in keywords(tool.get("inputSchema", {})), tool["name"]


def test_keywords_finds_nested_keywords() -> None:
    """The walk behind the subset test sees keywords at any depth, not property names."""
    schema = {"type": "object", "properties": {"pattern": {"anyOf": [{"items": {"$ref": "#/x"}}]}}}
    assert keywords(schema) == {"type", "properties", "anyOf", "items", "$ref"}


def test_lean_drops_what_hosts_refuse_and_keeps_the_rest() -> None:
    """A generated schema loses titles, patterns and null options; descriptions, bounds, defaults stay."""
    generated = {
        "title": "Args",
        "type": "object",
        "properties": {
            "wiki": {"title": "Wiki", "type": "string", "pattern": "^[a-z]+$", "description": "id"},
            "cursor": {"anyOf": [{"type": "string", "maxLength": 9}, {"type": "null"}], "default": None},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
        },
        "required": ["wiki"],
    }
    assert lean(generated) == {
        "type": "object",
        "properties": {
            "wiki": {"type": "string", "description": "id"},
            "cursor": {"type": "string", "maxLength": 9},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
        },
        "required": ["wiki"],
    }


def _instance(model: type[BaseModel]) -> dict[str, Any]:
    """A sample answer of ``model`` as a tool sends it (unset fields left out)."""
    samples: dict[type[BaseModel], dict[str, Any]] = {
        answers.WikiList: {"wikis": [{"id": "w", "head": None}]},
        answers.PageList: {"pages": [{"path": "a", "version": "v", "size": 1}], "next_cursor": None},
        answers.Page: {"path": "a", "version": "v", "content": "x", "size": 1, "commit": "c", "sections": []},
        answers.PageSet: {"commit": None, "pages": [], "errors": []},
        answers.MatchList: {"matches": [{"path": "a", "line": 1, "text": "x", "version": "v"}]},
        answers.BacklinkList: {
            "path": "a",
            "version": "v",
            "commit": None,
            "backlinks": [],
            "truncated": False,
        },
        answers.Job: {"job_id": "j", "status": "queued", "wiki": "w", "result": None, "error": None},
    }
    return model.model_validate(samples[model]).model_dump(mode="json", exclude_unset=True)


def test_answer_schemas_name_only_fields_the_answers_have() -> None:
    """Each short answer schema names fields of the model the tool answers with, requires only fields
    it always sends, and accepts a real answer (hosts validate structured results against it)."""
    models: dict[str, type[BaseModel]] = {
        "list_wikis": answers.WikiList,
        "list_pages": answers.PageList,
        "read_page": answers.Page,
        "read_pages": answers.PageSet,
        "page_outline": Outline,
        "search_wiki": answers.MatchList,
        "find_backlinks": answers.BacklinkList,
        "check_batch": CheckOutcome,
        "write_batch": WriteOutcome,
        "get_job": answers.Job,
        "cancel_job": answers.Job,
    }
    for name, tool in tools().items():
        model = models[name]
        schema = tool.output_schema
        extras = {"replace_count", "replace_pages"} if name == "search_wiki" else set()  # set by the tool
        assert schema is not None and set(schema["properties"]) <= set(model.model_fields) | extras, name
        for field in schema["required"]:
            assert model.model_fields[field].is_required(), (name, field)
        if model not in (Outline, CheckOutcome, WriteOutcome):
            jsonschema.validate(_instance(model), schema)
    applied = [answers.Applied(index=0, op="create", path="wiki/a.md", version="v")]
    write, check = tools()["write_batch"].output_schema, tools()["check_batch"].output_schema
    for outcome, schema in (
        (WriteOutcome(job_id="j", status="queued", hint="wait"), write),
        (WriteOutcome(job_id="j", status="succeeded", commit="c", applied=applied), write),
        (CheckOutcome(job_id="j", status="succeeded", applied=applied, diff=[], warnings=[]), check),
    ):
        jsonschema.validate(outcome.model_dump(mode="json", exclude_unset=True), schema)


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


def test_the_link_rule_examples_are_what_the_engine_resolves() -> None:
    """Each example of write_batch's link rule is derived from the engine: the file the engine resolves
    the link to from the example page, or its reason for broken; and the description shows them all."""
    derived = []
    for link_text, _ in LINK_EXAMPLES:
        links = find_links(link_text + "\n")
        assert len(links) == 1, link_text
        found = resolve_target(links[0], LINK_PAGE, LINK_FILES)
        derived.append((link_text, found.path or found.reason))
    assert derived == list(LINK_EXAMPLES)
    assert {target for _, target in derived} >= {"ambiguous", "missing"}
    shown = ", ".join(f"{link} is {target}" for link, target in derived)
    assert (
        f"wiki/a/redis.md and wiki/b/redis.md: in {LINK_PAGE}, {shown}." in tools()["write_batch"].description
    )


def test_the_link_rule_states_the_engines_resolution_order() -> None:
    """The rule's claims, checked on the engine: a path-qualified link tries the root before wiki/, then a
    path suffix; .md is tried before the bare name; a markdown link gets .md only when the path is no file."""
    files = [
        "dir/name.md",
        "wiki/dir/name.md",
        "wiki/x/dir/name.md",
        "wiki/v1.2 notes.md",
        "wiki/p",
        "wiki/p.md",
    ]

    def to(link_text: str, files: list[str]) -> str | None:
        return resolve_target(find_links(link_text + "\n")[0], "wiki/q.md", files).path

    assert to("[[dir/name]]", files) == "dir/name.md"
    assert to("[[dir/name]]", files[1:]) == "wiki/dir/name.md"
    assert to("[[dir/name]]", files[2:]) == "wiki/x/dir/name.md"
    assert to("[[v1.2 notes]]", files) == "wiki/v1.2 notes.md"
    assert to("[[p]]", files) == "wiki/p.md"
    assert to("[t](p)", files) == "wiki/p" and to("[t](p)", ["wiki/p.md"]) == "wiki/p.md"
    description = tools()["write_batch"].description
    for claim in (
        "tries T.md, then T",
        "that path from the root, else under wiki/",
        "relative to the linking",
    ):
        assert claim in description, claim


def _applied(**fields: Any) -> answers.Applied:
    return answers.Applied.model_validate({"version": "0" * 40, **fields})


def test_an_edits_many_moves_and_rewrites_are_summed_past_the_bound() -> None:
    """A folder rename of 21 files with 22 rewritten pages answers one entry of each; 20 stay listed."""
    many = [
        _applied(index=1, op="rename", path=f"wiki/q/{n}.md", new_path=f"wiki/p/{n}.md") for n in range(21)
    ]
    many += [_applied(index=1, op="rewrite_links", path=f"wiki/t/{n}.md", count=2) for n in range(22)]
    edit = _applied(index=0, op="replace", path="index.md")
    out = summed([edit, *many])
    assert out is not None
    assert [e.model_dump(exclude_none=True) for e in out] == [
        edit.model_dump(exclude_none=True),
        {"index": 1, "op": "rename", "files": 21},
        {"index": 1, "op": "rewrite_links", "files": 22, "count": 44},
    ]
    few = many[:20]
    assert summed(few) == few


def test_the_diff_shows_what_the_edits_changed_and_lists_the_rest() -> None:
    """Files the edits changed keep their diff; moved or link-rewritten ones are listed with their links."""
    applied = [
        _applied(index=0, op="replace", path="index.md"),
        _applied(index=1, op="rename", path="wiki/a.md", new_path="wiki/b/a.md"),
        _applied(index=1, op="rewrite_links", path="wiki/t.md", count=3),
    ]
    diff = [
        FileDiff(path="index.md", diff="-a\n+b\n"),
        FileDiff(path="wiki/b/a.md", old_path="wiki/a.md", diff=""),
        FileDiff(path="wiki/t.md", diff="-[[a]]\n+[[b/a]]\n"),
    ]
    out = shown(diff, applied)
    assert out is not None
    assert [e.model_dump(exclude_none=True) for e in out] == [
        {"path": "index.md", "diff": "-a\n+b\n"},
        {"path": "wiki/b/a.md", "old_path": "wiki/a.md"},
        {"path": "wiki/t.md", "links": 3},
    ]
