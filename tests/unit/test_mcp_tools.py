"""The MCP tool definitions without a server process: descriptions, schemas, limits, argument errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any, get_args

import jsonschema
import pytest
from mcp.types import ListToolsResult
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from api.mcp.listing import EDIT_FAMILIES, keywords, lean
from api.mcp.listing import KEYWORDS as ALLOWED
from api.mcp.tools import (
    HINTS,
    LINK_EXAMPLES,
    LINK_FILES,
    LINK_PAGE,
    CheckOutcome,
    Invariants,
    JobOutcome,
    Listing,
    Outline,
    WriteOutcome,
    _refusal,
    build_server,
    edit_lines,
    file_lines,
    invalid_arguments,
    shown_warnings,
    summary,
    trimmed,
    wanted,
)
from worker.engine import DictHead, blob_id, check_static, preflight, review
from worker.engine.backlinks import find_backlinks
from worker.engine.markdown.links import find_links, resolve_target
from worker.engine.paths import DEFAULT_POLICY
from worker.errors import CODES, BatchRejected
from worker.jobs.results import job_result
from worker.schema import answers
from worker.schema.answers import EditError, ErrorInfo, FileDiff
from worker.schema.edits import OPS, Batch, Edit, EditModel, Limits, PlanSubmission

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)

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
    # each check makes a new job and plan: not idempotent, whatever it reads
    assert found["check_batch"].annotations.idempotent_hint is False
    assert found["get_job"].annotations.idempotent_hint is True


def test_descriptions_state_the_configured_limits() -> None:
    """The limits in the descriptions and the edits schema are the server's settings, not constants."""
    found = tools(Limits(max_edits=7, max_content_bytes=3 * 1024 * 1024, max_file_bytes=2 * 1024 * 1024))
    write = found["write_batch"]
    assert "7 edits, 3 MiB sent, 2 MiB a file" in write.description
    assert write.input_schema["properties"]["edits"]["description"].startswith("1 to 7 edits")
    assert "write_batch's" in found["check_batch"].description  # it states none of its own
    assert "over\n2 MiB" in found["read_page"].description or "over 2 MiB" in found["read_page"].description


def test_write_batch_stays_short_and_names_the_codes_an_agent_acts_on() -> None:
    """write_batch's description stays within its share of the budget and names the codes whose error
    carries details to act on or whose recovery is the agent's own (split, check again, ask, retry); every
    other code a batch can meet is the failed check's, and its refusal's hint says what to do."""
    write = tools()["write_batch"].description
    assert len(write) < WRITE_BATCH_MOST
    named = {
        "VERSION_MISMATCH",
        "COUNT_MISMATCH",
        "COUNT_REQUIRED",
        "TOO_MANY_EDITS",
        "BATCH_TOO_LARGE",
        "BATCH_TOO_COSTLY",
        "PLAN_STALE",
        "PLAN_NOT_FOUND",
        "FORBIDDEN",
        "RATE_LIMITED",
        "INTERNAL",
    }
    assert {code for code in named if code not in write} == set()
    assert "VERSION_MISMATCH (details.current_version)" in write
    assert "COUNT_MISMATCH (details.actual_count)" in write
    # refusals of the request itself (its webhook URL, its Host), not of the batch's edits
    assert set(CODES) <= set(HINTS) | {
        "WIKI_EXISTS",
        "WEBHOOK_REFUSED",
        "INVALID_WEBHOOK",
        "MISDIRECTED_HOST",
    }
    assert "check_batch" in HINTS["COUNT_REQUIRED"] and "plan" in HINTS["COUNT_REQUIRED"]
    assert "details.actual_count" in HINTS["COUNT_MISMATCH"]
    assert "index (0-based)" in write


def test_write_batch_states_a_version_rule_an_agent_cannot_trip() -> None:
    """An agent writing from the description alone gives the version it read, which the engine accepts
    at every point of the batch (tests/unit/engine/test_batch_version.py): the description says so and
    offers no "batch" value, whose rule depends on what the earlier edits checked; VERSION_REQUIRED's
    hint repeats the rule."""
    write = tools()["write_batch"].description
    rule = "expected_version: the version you read (read_page, list_pages); it holds for the whole batch, "
    assert rule + "also after earlier edits changed the page." in write
    # merge_pages, retarget_links, replace_across, each and the pages whose links an op rewrites take none
    assert "other ops and link rewrites take none" in write
    assert '"batch"' not in write
    assert "holds for the whole batch" in HINTS["VERSION_REQUIRED"]


def test_the_each_text_is_what_the_engine_does() -> None:
    """write_batch's each: the prefix picks pages in subfolders too, a rename moves each page to
    new_path/<file name> (subfolders flattened, so two pages of one name clash: PATH_EXISTS), the glob
    matches the whole path; without expected_count a dry run takes every page picked, while edits written
    without a plan are COUNT_REQUIRED. Both descriptions give that flow: check, then the plan."""
    found = tools()
    write, check = found["write_batch"].description, found["check_batch"].description
    assert "under prefix (subfolders too)" in write and "glob: whole path" in write
    assert "(into folder new_path, subfolders flattened: same names PATH_EXISTS)" in write
    assert "check_batch without it, commit its plan (edits alone: COUNT_REQUIRED)" in write
    assert "An each without expected_count takes every page it selects" in check
    each_family = found["write_batch"].input_schema["properties"]["edits"]["items"]["anyOf"][5]
    assert "expected_count" not in each_family["required"]
    head = DictHead({"wiki/p/a.md": b"# A\n", "wiki/p/x/b.md": b"# B\n", "wiki/pq.md": b"# Q\n"})
    edit = EDIT.validate_python(
        {"op": "each", "select": {"prefix": "wiki/p", "glob": "wiki/p/**"}}
        | {"do": "rename", "new_path": "wiki/archive/"}
    )
    moved = [(entry.path, entry.new_path) for entry in preflight(head, [edit]).applied]
    assert moved == [("wiki/p/a.md", "wiki/archive/a.md"), ("wiki/p/x/b.md", "wiki/archive/b.md")]
    check_static(Batch(message="m", edits=[edit], dry_run=True))
    with pytest.raises(BatchRejected) as refused:
        check_static(Batch(message="m", edits=[edit]))
    assert refused.value.code == "COUNT_REQUIRED"
    clash = DictHead({"wiki/p/a.md": b"# A\n", "wiki/p/x/a.md": b"# A too\n"})
    with pytest.raises(BatchRejected) as refused:
        preflight(clash, [edit])
    assert refused.value.code == "PATH_EXISTS"


def test_amend_indexes_and_section_addresses_are_stated_as_the_server_takes_them() -> None:
    """amend's keys count from 0, as error.errors' indexes; a section op's heading takes page_outline's
    address, not its path, and the section version is page_outline's sections[].version."""
    found = tools()
    amend = found["check_batch"].input_schema["properties"]["amend"]["description"]
    assert "0-based, as error.errors[].index" in amend
    assert "a new plan comes back" in found["check_batch"].description
    outline = found["page_outline"].description
    assert "heading trail 'A > B', not a file" in outline and "address (its shortest unique trail" in outline
    write = found["write_batch"].description
    assert "heading is page_outline's address" in write and "page_outline's sections[].version" in write


def test_search_wiki_states_how_count_mode_counts() -> None:
    """count=true counts by replace_across's rule, not the list's: case-sensitive whatever case_sensitive
    says, a pattern over the whole page, and a total over every page, listed or not."""
    search = tools()["search_wiki"].description
    for claim in ("always case-sensitive", "a pattern over the whole page", "total, over all pages"):
        assert claim in search, claim


def test_a_refusal_of_several_edits_lists_them_with_a_hint_for_each_code() -> None:
    """A refused batch's error keeps its first failure and lists every failing edit; the hint says to fix
    them all at once and gives each code's own hint; a single failure keeps its code's hint alone."""
    errors = [
        EditError(index=1, code="OLD_NOT_FOUND", message="'old' does not occur"),
        EditError(index=4, code="VERSION_MISMATCH", message="changed", details={"current_version": "v"}),
        EditError(index=6, code="OLD_NOT_FOUND", message="'old' does not occur"),
    ]
    first = errors[0]
    error = ErrorInfo(code=first.code, message=first.message, index=1, errors=errors, unchecked=7)
    result = _refusal(error, job_id="j", status="failed")
    data = result.structured_content
    assert result.is_error and data is not None
    assert [(e["index"], e["code"]) for e in data["error"]["errors"]] == [
        (1, "OLD_NOT_FOUND"),
        (4, "VERSION_MISMATCH"),
        (6, "OLD_NOT_FOUND"),
    ]
    assert data["error"]["errors"][1]["details"] == {"current_version": "v"}
    assert data["error"]["unchecked"] == 7 and "from 7 on were not checked" in data["hint"]
    assert data["hint"].count("OLD_NOT_FOUND: ") == 1 and "VERSION_MISMATCH: " in data["hint"]
    single = ErrorInfo(code="OLD_NOT_FOUND", message="m", index=1, errors=[first])
    assert _refusal(single).structured_content["hint"] == HINTS["OLD_NOT_FOUND"]  # type: ignore[index]


def test_argument_errors_list_every_failing_edit() -> None:
    """Edits that fail the schema are listed one entry each (its first error), after the first error."""
    with pytest.raises(ValidationError) as info:
        _Args.model_validate(
            {
                "wiki": "a",
                "edits": [
                    {"op": "replace", "path": "x", "old": "a"},
                    {"op": "delete", "path": "x", "extra": 1},
                ],
            }
        )
    data = invalid_arguments(info.value).structured_content
    assert data is not None
    assert [(e["index"], e["message"]) for e in data["error"]["errors"]] == [
        (0, "edits.0.new: Field required"),
        (1, "edits.1.extra: unknown field"),
    ]


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
    or check_batch's plan; both take a plan's amend."""
    write = tools()["write_batch"].input_schema
    text_family = next(f for f in write["properties"]["edits"]["items"]["anyOf"] if "old" in f["properties"])
    assert text_family["properties"]["old"]["minLength"] == 1
    assert write["properties"]["edits"]["description"].startswith("1 to 1000 edits")
    assert "pattern" not in write["properties"]["wiki"]
    assert write["properties"]["message"]["maxLength"] == 10_000
    assert "dry_run" not in write["properties"]
    assert set(write["required"]) == {"wiki", "message"}
    assert {"edits", "plan", "amend"} <= set(write["properties"])
    check = tools()["check_batch"].input_schema  # edits, or an earlier check's plan with amend
    assert check["required"] == ["wiki"] and {"edits", "plan", "amend"} <= set(check["properties"])


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
    """A generated schema loses titles, patterns and null options; descriptions, bounds (of lists too),
    defaults stay."""
    generated = {
        "title": "Args",
        "type": "object",
        "properties": {
            "wiki": {"title": "Wiki", "type": "string", "pattern": "^[a-z]+$", "description": "id"},
            "cursor": {"anyOf": [{"type": "string", "maxLength": 9}, {"type": "null"}], "default": None},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
            "paths": {
                "title": "Paths",
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": 3,
            },
        },
        "required": ["wiki"],
    }
    assert lean(generated) == {
        "type": "object",
        "properties": {
            "wiki": {"type": "string", "description": "id"},
            "cursor": {"type": "string", "maxLength": 9},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        },
        "required": ["wiki"],
    }


def _instance(model: type[BaseModel]) -> dict[str, Any]:
    """A sample answer of ``model`` as a tool sends it (unset fields left out)."""
    samples: dict[type[BaseModel], dict[str, Any]] = {
        answers.WikiList: {"wikis": [{"id": "w", "head": None}]},
        Listing: {"folders": {"": ["a"], "wiki/": ["b.md"]}, "next_cursor": None},
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
        "list_pages": Listing,
        "read_page": answers.Page,
        "read_pages": answers.PageSet,
        "page_outline": Outline,
        "search_wiki": answers.MatchList,
        "find_backlinks": answers.BacklinkList,
        "check_batch": CheckOutcome,
        "write_batch": WriteOutcome,
        "get_job": JobOutcome,
        "cancel_job": answers.Job,
    }
    for name, tool in tools().items():
        model = models[name]
        schema = tool.output_schema
        assert schema is not None and set(schema["properties"]) <= set(model.model_fields), name
        for field in schema.get("required", []):
            assert model.model_fields[field].is_required(), (name, field)
        if model not in (Outline, CheckOutcome, WriteOutcome, JobOutcome):
            jsonschema.validate(_instance(model), schema)
    lines = ["0 create wiki/a.md"]
    checks = Invariants(links=None, code_changed=0, unnamed=0)
    listed = tools()
    write, check = listed["write_batch"].output_schema, listed["check_batch"].output_schema
    job = listed["get_job"].output_schema
    for outcome, schema in (
        (WriteOutcome(job_id="j", status="queued", hint="wait"), write),
        (WriteOutcome(job_id="j", status="succeeded", commit="c", edits=lines, checks=checks), write),
        (
            CheckOutcome(job_id="j", status="succeeded", edits=lines, files=[], checks=checks, warnings=[]),
            check,
        ),
        (JobOutcome(job_id="j", status="succeeded", dry_run=True, edits=lines, checks=checks, diff=[]), job),
        (
            JobOutcome(job_id="j", status="failed", error=answers.ErrorInfo(code="NOT_FOUND", message="m")),
            job,
        ),
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
    assert "ambiguous" in {target for _, target in derived}
    shown = ", ".join(f"{link} is {target}" for link, target in derived)
    assert f"wiki/a/redis.md and wiki/b/redis.md: {shown}." in tools()["write_batch"].description


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


def test_edit_lines_say_what_each_edit_matched_and_changed() -> None:
    """One line per edit: its op and paths (several under their common folder, moves with where to),
    counts, the links its rewrites repointed, a section op's heading and the keys a frontmatter edit
    sets; an extracted page is named once; an edit with no entry says it changed nothing."""
    applied = [_applied(index=0, op="replace", path="index.md")]
    applied += [
        _applied(index=1, op="rename", path=f"wiki/queue/q{n}.md", new_path=f"wiki/platform/queue/q{n}.md")
        for n in range(40)
    ]
    applied += [_applied(index=1, op="rewrite_links", path=f"wiki/t/{n}.md", count=2) for n in range(30)]
    applied += [
        _applied(index=2, op="extract_section", path="wiki/ops.md", new_path="wiki/ops/failover.md"),
        _applied(index=2, op="create", path="wiki/ops/failover.md"),
        _applied(index=2, op="rewrite_links", path="wiki/t/1.md", count=1),
        _applied(index=4, op="replace_across", path="wiki/a.md", count=3),
        _applied(index=4, op="replace_across", path="wiki/b.md", count=1),
    ]
    applied += [_applied(index=5, op="frontmatter", path=f"wiki/p/{n}.md") for n in range(25)]
    edits = [
        {"op": "replace", "path": "index.md", "old": "a", "new": "b", "expected_version": "0" * 40},
        {"op": "rename", "path": "wiki/queue", "new_path": "wiki/platform/queue", "rewrite_links": True},
        {"op": "extract_section", "path": "wiki/ops.md", "heading": "Redis failover"}
        | {"new_path": "wiki/ops/failover.md", "expected_version": "0" * 40},
        {"op": "retarget_links", "from": "wiki/x.md", "to": "wiki/y.md"},
        {"op": "replace_across", "prefix": "wiki/", "old": "colour", "new": "color"},
        {"op": "each", "select": {"prefix": "wiki/p/"}, "expected_count": 25, "do": "frontmatter"}
        | {"set": {"status": "archived", "owner": "ops"}, "unset": ["draft"]},
    ]
    typed = [EDIT.validate_python(edit) for edit in edits]
    assert edit_lines(applied, typed) == [
        "0 replace index.md",
        "1 rename 40 files in wiki/queue/ -> wiki/platform/queue/, links 60 in 30 pages",
        "2 extract_section wiki/ops.md -> wiki/ops/failover.md 'Redis failover', links 1 in 1 pages",
        "3 retarget_links: no change",
        "4 replace_across wiki/a.md 3, wiki/b.md 1 (4 replaced)",
        "5 frontmatter 25 files in wiki/p/ set status, owner unset draft",
    ]
    # without the edits (a plan's commit, get_job): what the entries say, for the edits that have some
    assert edit_lines(applied)[2:4] == [
        "2 extract_section wiki/ops.md -> wiki/ops/failover.md, links 1 in 1 pages",
        "4 replace_across wiki/a.md 3, wiki/b.md 1 (4 replaced)",
    ]


def _file(path: str, **fields: Any) -> answers.FileCheck:
    return answers.FileCheck.model_validate(
        {"change": "modified", "added": 1, "removed": 1, "named": True, "path": path, **fields}
    )


def test_file_lines_list_each_file_then_sum_the_folders() -> None:
    """Up to 20 changed files: a line each (moves, created and deleted files, links, code, unnamed);
    past that, four or more files of a folder that changed alike are one line (a file whose code changed
    keeps its own), files that changed otherwise keep theirs; past 60 lines the rest are one."""
    few = [
        _file("index.md", added=2, removed=0),
        _file("wiki/archive/a.md", old_path="wiki/old/a.md", change="moved", added=0, removed=0),
        _file("wiki/gone.md", change="deleted", added=0, removed=4),
        _file("wiki/new.md", change="created", added=3, removed=0, code_added=1),
        _file("wiki/t.md", links=2, named=False),
        _file("wiki/pic.png", added=None, removed=None),
    ]
    assert file_lines(few) == [
        "index.md +2 -0",
        "wiki/archive/a.md <- wiki/old/a.md +0 -0",
        "wiki/gone.md deleted +0 -4",
        "wiki/new.md created +3 -0, code +1 -0",
        "wiki/t.md +1 -1, links 2, unnamed",
        "wiki/pic.png",
    ]
    many = [_file("index.md")]
    many += [
        _file(f"wiki/archive/{n}.md", old_path=f"wiki/old/{n}.md", change="moved", links=1) for n in range(5)
    ]
    many += [_file(f"wiki/topics/{n:02d}.md", links=2, named=False) for n in range(30)]
    many[7] = _file("wiki/topics/01.md", code_added=1, code_removed=1)
    many += [_file("wiki/x/a.md"), _file("wiki/x/b.md", added=None, removed=None)]
    many += [_file("wiki/y/a.md"), _file("wiki/y/b.md"), _file("wiki/y/c.md", change="deleted")]
    many += [_file("wiki/y/d.md", change="deleted"), _file("wiki/y/e.md", change="deleted")]
    assert file_lines(many) == [
        "index.md +1 -1",
        "wiki/archive/* 5 files (5 moved) +5 -5, links 5",
        "wiki/topics/* 29 files +29 -29, links 58, 29 unnamed",
        "wiki/topics/01.md +1 -1, code +1 -1",
        "wiki/x/a.md +1 -1",
        "wiki/x/b.md",
        "wiki/y/a.md +1 -1",
        "wiki/y/b.md +1 -1",
        "wiki/y/c.md deleted +1 -1",
        "wiki/y/d.md deleted +1 -1",
        "wiki/y/e.md deleted +1 -1",
    ]
    scattered = [_file(f"wiki/f{n:03d}/p.md", links=1) for n in range(100)]
    lines = file_lines(scattered)
    assert len(lines) == 60 and lines[:2] == [
        "wiki/f000/p.md +1 -1, links 1",
        "wiki/f001/p.md +1 -1, links 1",
    ]
    assert lines[-1] == "and more: 41 files +41 -41, links 41"


def test_warnings_past_the_bound_are_counted_by_code() -> None:
    """Fifty warnings are listed; the rest are one TRUNCATED that counts them by code."""
    warnings = [answers.BatchWarning(code="LINK_BROKEN", path=f"wiki/{n}.md", message="m") for n in range(55)]
    warnings += [answers.BatchWarning(code="NOT_IN_INDEX", path="wiki/n.md", message="m")]
    shown = shown_warnings(warnings)
    assert shown[:50] == warnings[:50] and len(shown) == 51
    assert (shown[50].code, shown[50].message) == (
        "TRUNCATED",
        "5 LINK_BROKEN, 1 NOT_IN_INDEX more: fix these and check again",
    )
    assert shown_warnings(warnings[:50]) == warnings[:50]


WIKI = {
    "index.md": "# Index\n\n- [[guide]]\n",
    "wiki/guide.md": (
        "# Guide\n\n## Install\n\nRun it:\n\n```\n[[old/a]] stays\n```\n\n## Use\n\nSee [[old/a]].\n"
    ),
    **{f"wiki/old/{name}.md": f"# {name}\n\n[[guide]] and `[[guide]]`\n" for name in "abcde"},
    **{
        f"wiki/topics/t{n:02d}.md": f"# t{n}\n\nSee [[old/a]] and [[b]].\n\n    [[old/a]] in code\n"
        for n in range(22)
    },
}
REFACTOR: list[dict[str, Any]] = [
    {"op": "rename", "path": "wiki/old", "new_path": "wiki/archive", "rewrite_links": True},
    {
        "op": "extract_section",
        "path": "wiki/guide.md",
        "heading": "Install",
        "new_path": "wiki/guide/install.md",
    },
    {
        "op": "replace",
        "path": "index.md",
        "old": "- [[guide]]\n",
        "new": "- [[guide]]\n- [[guide/install]]\n",
    },
]


def _checked(edits: list[dict[str, Any]]) -> tuple[answers.JobResult, list[Edit]]:
    """The result a dry run of ``edits`` on ``WIKI`` answers, by the engine and the worker's own shaping."""
    head = DictHead({path: text.encode() for path, text in WIKI.items()})
    versions = {path: blob_id(text.encode()) for path, text in WIKI.items()}
    typed = [
        EDIT.validate_python(
            {**edit, "expected_version": versions[edit["path"]]} if edit["path"] in versions else edit
        )
        for edit in edits
    ]
    plan = preflight(head, typed)
    result = job_result(None, plan, review(head, plan, DEFAULT_POLICY))
    result.plan = "plan-x"
    return result, typed


def test_a_check_answers_a_summary_and_diffs_only_on_request() -> None:
    """A check's answer, from a real dry run: a line per edit and per changed file (the folder of
    link-rewritten topics summed), the checks (no broken link, no code changed: the extracted section's
    code block moved whole), the warnings and the plan; no diff unless asked, then only the files asked
    for (by path, by prefix, by the path a file moved from, or '' for all)."""
    result, typed = _checked(REFACTOR)
    answer = summary(result, typed)
    assert set(answer) == {"edits", "files", "checks", "warnings", "plan"}
    assert answer["edits"] == [
        "0 rename 5 files in wiki/old/ -> wiki/archive/, links 23 in 23 pages",
        "1 extract_section wiki/guide.md -> wiki/guide/install.md 'Install'",
        "2 replace index.md",
    ]
    assert answer["files"] == [
        "index.md +1 -0",
        "wiki/archive/* 5 files (5 moved) +0 -0",
        "wiki/guide.md +1 -9, links 1",
        "wiki/guide/install.md created +7 -0",
        "wiki/topics/* 22 files +22 -22, links 22, 22 unnamed",
    ]
    checks = answer["checks"].model_dump(exclude_none=True)
    assert checks == {
        "links": {"pages": 30, "broken_before": 0, "broken_after": 0, "ambiguous_after": 0},
        "code_changed": 0,
        "unnamed": 22,
    }
    assert answer["warnings"] == [] and answer["plan"] == "plan-x"
    assert [d.path for d in summary(result, typed, ["wiki/guide.md"])["diff"]] == ["wiki/guide.md"]
    assert len(summary(result, typed, ["wiki/topics/"])["diff"]) == 22
    moved = summary(result, typed, ["wiki/old/a.md"])["diff"]
    assert [(d.path, d.old_path) for d in moved] == [("wiki/archive/a.md", "wiki/old/a.md")]
    assert len(summary(result, typed, [""])["diff"]) == len(result.diff or []) == 30
    assert summary(result, typed, [])["diff"] == []
    assert wanted(result.diff, ["wiki/guide"]) == [
        d for d in result.diff or [] if d.path.startswith("wiki/guide")
    ]


def test_code_a_batch_changes_is_counted_where_it_changed() -> None:
    """A replace inside a code block and a link rewrite that leaves code alone: the first page says
    code +1 -1 on its own line, the checks count 2, and the topics stay summed."""
    edits = [
        *REFACTOR,
        {"op": "replace", "path": "wiki/topics/t03.md", "old": "    [[old/a]] in code", "new": "    changed"},
    ]
    result, typed = _checked(edits)
    answer = summary(result, typed)
    assert answer["checks"].code_changed == 2
    assert answer["files"][-2:] == [
        "wiki/topics/* 21 files +21 -21, links 21, 21 unnamed",
        "wiki/topics/t03.md +2 -2, links 1, code +1 -1",
    ]


def test_the_read_tools_size_their_answers_and_say_more_one_way() -> None:
    """search_wiki takes outside_code, multiline and count (replace_count is gone: count says it), list_pages
    answers names unless versions=true, read_pages takes a cursor, and every read tool that may cut its
    answer says "more" the same way: next_cursor not null, repeat the call with cursor=next_cursor."""
    found = tools()
    search = found["search_wiki"].input_schema["properties"]
    assert {"outside_code", "multiline", "count"} <= set(search) and "replace_count" not in search
    assert all(search[flag]["default"] is False for flag in ("outside_code", "multiline", "count"))
    assert found["list_pages"].input_schema["properties"]["versions"]["default"] is False
    assert "cursor" in found["read_pages"].input_schema["properties"]
    for name in ("list_pages", "read_pages", "search_wiki", "find_backlinks"):
        description = found[name].description
        said = description.replace("(truncated: true)", "")  # search_wiki's mark on one cut line
        assert "next_cursor not null: repeat the call with cursor=next_cursor" in description, name
        assert "truncated" not in said, name
        assert "next_cursor" in found[name].output_schema["properties"], name
    assert "expected_count" in found["search_wiki"].description  # what a count is for


def test_each_edit_family_requires_what_the_server_requires_of_its_ops() -> None:
    """A family's required fields are required by every op it lists (the schema never asks for more
    than the server), and the fields every op of the family requires are required by the family (an
    edit the schema passes lacks no field all its ops need)."""
    models = {get_args(m.model_fields["op"].annotation)[0]: m for m in get_args(EditModel)}
    for family in EDIT_FAMILIES:
        ops = family["properties"]["op"]["enum"]
        required = set(family["required"]) - {"op"}
        needed = [
            {field.alias or name for name, field in models[op].model_fields.items() if field.is_required()}
            - {"op"}
            for op in ops
        ]
        assert all(required <= fields for fields in needed), (ops, required, needed)
        assert set.intersection(*needed) <= required, (ops, required, needed)


def _dry_run(files: dict[str, str], edit: dict[str, Any]) -> tuple[dict[str, str | None], list[str]]:
    """What ``edit`` makes of ``files`` (a path's new text, None once gone) and its warnings' codes."""
    head = DictHead({path: text.encode() for path, text in files.items()})
    plan = preflight(head, [EDIT.validate_python(edit)])
    texts = {
        path: None if change is None else head.read(change.source) if change.data is None else change.data
        for path, change in plan.changes.items()
    }
    warnings = [warning.code for warning in review(head, plan, DEFAULT_POLICY).warnings]
    return {path: None if data is None else data.decode() for path, data in texts.items()}, warnings


def test_the_op_texts_are_what_the_engine_does() -> None:
    """What write_batch says of prose, moves, merges and headings, checked on the engine: outside_code
    leaves code and link targets alone but changes labels; a rename with rewrite_links fixes the moved
    page's own relative links; merged pages lose their front matter; a renamed section keeps its level and
    takes new_heading as written (a '#' in it would be text)."""
    write = tools()["write_batch"].description
    prose = "outside_code=true (old only): prose only, never code, HTML blocks, front matter or link targets"
    assert prose + " (labels are prose)" in write and "link targets too" not in write
    page = "A recieve, [recieve](recieve.md#recieve), [[recieve|recieve]], `recieve`.\n"
    across = {"op": "replace_across", "prefix": "wiki/", "old": "recieve", "new": "receive"}
    changed, _ = _dry_run({"wiki/p.md": page, "wiki/recieve.md": "# R\n"}, across | {"outside_code": True})
    fixed = "A receive, [receive](recieve.md#recieve), [[recieve|receive]], `recieve`.\n"
    assert changed["wiki/p.md"] == fixed

    assert "rewrite_links=true: links to it follow, its own relative links are fixed." in write
    files = {"wiki/a/p.md": "See [s](../specs/x.md).\n", "wiki/specs/x.md": "# X\n"}
    version = blob_id(files["wiki/a/p.md"].encode())
    move = {"op": "rename", "path": "wiki/a/p.md", "new_path": "wiki/b/c/p.md", "expected_version": version}
    changed, _ = _dry_run(files, move | {"rewrite_links": True})
    assert changed["wiki/b/c/p.md"] == "See [s](../../specs/x.md).\n"

    assert "the pages' text, front matter dropped, appended to path in order" in write
    teams = {"wiki/t1.md": "---\nowner: a\n---\n# A\n\na\n", "wiki/t2.md": "---\nowner: b\n---\n# B\n\nb\n"}
    merge = {"op": "merge_pages", "path": "wiki/teams.md", "pages": ["wiki/t1.md", "wiki/t2.md"]}
    changed, _ = _dry_run(teams, merge)
    assert changed["wiki/teams.md"] == "# A\n\n## A\n\na\n\n## B\n\nb\n"

    assert "new_heading is text, no #" in write
    ops = {"wiki/ir.md": "# IR\n\n### Paging\n\nx\n"}
    rename = {"op": "rename_section", "path": "wiki/ir.md", "heading": "Paging", "new_heading": "On-call"}
    changed, _ = _dry_run(ops, rename | {"expected_version": blob_id(ops["wiki/ir.md"].encode())})
    assert changed["wiki/ir.md"] == "# IR\n\n### On-call\n\nx\n"


def test_heading_links_are_backlinks_and_never_link_broken() -> None:
    """find_backlinks lists links to a page with or without a #heading, not the page's own #links; a
    stale #heading is no LINK_BROKEN (only a missing file is), as check_batch says, so rename_section
    without rewrite_links leaves such links unflagged."""
    found = tools()
    assert "with or without a #heading (not the page's own #links)" in found["find_backlinks"].description
    assert "LINK_BROKEN (a link to no file: fix it or add the page; #headings are not checked)" in (
        found["check_batch"].description
    )
    files = {
        "wiki/ir.md": "# IR\n\n## Paging\n\nSee [[#Paging]].\n",
        "wiki/a.md": "[[ir#Paging]], [x](ir.md#paging), [[ir]]\n",
    }
    head = DictHead({path: text.encode() for path, text in files.items()})
    links = [found_link.text for found_link in find_backlinks(head, "wiki/ir.md")]
    assert links == ["[[ir#Paging]]", "[x](ir.md#paging)", "[[ir]]"]
    rename = {"op": "rename_section", "path": "wiki/ir.md", "heading": "Paging", "new_heading": "On-call"}
    _, warnings = _dry_run(files, rename | {"expected_version": blob_id(files["wiki/ir.md"].encode())})
    assert warnings == []


def test_check_batch_states_its_unfinished_and_failed_answers() -> None:
    """check_batch may answer a job still queued or running (then get_job), and a failed check is an error
    result carrying error.plan; amend replaces or appends edits, never removes one (a null edit is
    refused); search_wiki's count answers keep an empty matches, which its answer schema requires."""
    found = tools()
    check = found["check_batch"].description
    assert "queued or running (after 60 s): get_job" in check
    assert "A failed check is an error result {error {code, message, errors, plan}, hint}" in check
    amend = found["check_batch"].input_schema["properties"]["amend"]["description"]
    assert "no edit can be removed" in amend
    with pytest.raises(ValidationError):
        PlanSubmission.model_validate({"plan": "plan-x", "amend": {"0": None}})
    search = found["search_wiki"]
    assert "count=true: {matches: [], pages: [{path, count}], total, next_cursor}" in search.description
    counted = answers.MatchList(matches=[], pages=[], total=0)
    assert search.output_schema is not None and search.output_schema["required"] == ["matches"]
    jsonschema.validate(counted.model_dump(mode="json", exclude_unset=True), search.output_schema)
