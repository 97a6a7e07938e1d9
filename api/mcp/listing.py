"""What ``tools/list`` shows of each tool's arguments and answer: lean JSON schemas an agent reads in full.

Arguments are validated by the tool functions' own pydantic signatures (the edits by the same models the
HTTP API uses), so the schema listed here only has to tell a model what to send. ``lean`` turns a
signature's generated schema into the subset of JSON Schema hosts commonly accept (``KEYWORDS``): no
``title``, no ``pattern`` (the server checks paths and ids and answers ``INVALID_PATH`` or
``INVALID_BATCH`` with the reason), an optional ``X | None`` shown as ``X``. The edits of a batch are shown
as one small flat object per op family (``EDIT_FAMILIES``); what each op does is in the write_batch
description, once, in prose. Answers get short schemas of their top-level fields (``OUTPUTS``), enough for
a host that types structured results; the descriptions say the nested shapes.
"""

from __future__ import annotations

from typing import Any

KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "description",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "default",
        "anyOf",
    }
)
# schema keywords that hold a mapping of names to schemas, or one schema, or a list of schemas
_NAMED = ("properties",)
_ONE = ("items",)
_MANY = ("anyOf",)
_DROPPED = ("title", "pattern", "examples", "additionalProperties", "$defs", "format")


def _s(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


_TEXT = {"type": "string"}
_VERSION = {"type": "string"}  # what it takes is in the description, once
EDIT_FAMILIES: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["create", "overwrite", "append"]},
            "path": _s("string", "e.g. wiki/redis.md"),
            "content": _TEXT,
            "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8"},
            "expected_version": _VERSION,
        },
        "required": ["op", "path", "content"],
    },
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["delete", "rename", "frontmatter", "merge_pages"]},
            "path": _TEXT,
            "expected_version": _VERSION,
            "new_path": _TEXT,
            "rewrite_links": {"type": "boolean", "default": False},
            "redirect_links_to": _TEXT,
            "set": {"type": "object"},
            "unset": {"type": "array", "items": _TEXT},
            "pages": {"type": "array", "items": _TEXT},
            "title": _TEXT,
            "headings": {"type": "string", "enum": ["demote", "keep"]},
        },
        "required": ["op", "path"],
    },
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["replace"]},
            "path": _TEXT,
            "old": {"type": "string", "minLength": 1},
            "new": _TEXT,
            "replace_all": {"type": "boolean", "default": False},
            "expected_count": {"type": "integer", "minimum": 1},
            "expected_version": _VERSION,
        },
        "required": ["op", "path", "old", "new"],
    },
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["replace_across"]},
            "prefix": _TEXT,
            "old": {"type": "string", "minLength": 1},
            "pattern": {"type": "string", "minLength": 1},
            "new": _TEXT,
            "expected_count": {"type": "integer", "minimum": 1},
            "outside_code": {"type": "boolean", "default": False},
            "select": {"type": "object"},
        },
        "required": ["op", "prefix", "new"],
    },
    {
        "type": "object",
        "properties": {
            "op": {
                "type": "string",
                "enum": [
                    "replace_section",
                    "append_section",
                    "insert_section_after",
                    "remove_section",
                    "rename_section",
                    "extract_section",
                ],
            },
            "path": _TEXT,
            "heading": _s("string", "page_outline's address, e.g. 'Ops > Paging'.", minLength=1),
            "content": _TEXT,
            "new_heading": {"type": "string", "minLength": 1},
            "level": {"type": "integer", "minimum": 1, "maximum": 6},
            "expected_version": _VERSION,
            "expected_section_version": _TEXT,
            "new_path": _TEXT,
            "title": _TEXT,
            "leave_link": {"type": "boolean", "default": False},
            "rewrite_links": {"type": "boolean", "default": False},
        },
        "required": ["op", "path", "heading"],
    },
    {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["each"]},
            "select": {
                "type": "object",
                "properties": {
                    "prefix": _TEXT,
                    "glob": _TEXT,
                    "frontmatter": {"type": "object"},
                    "contains": _TEXT,
                    "outside_code": {"type": "boolean", "default": False},
                },
                "required": ["prefix"],
            },
            "expected_count": {"type": "integer", "minimum": 0},
            "do": {"type": "string", "enum": ["frontmatter", "append", "delete", "rename"]},
            "set": {"type": "object"},
            "unset": {"type": "array", "items": _TEXT},
            "content": _TEXT,
            "new_path": _TEXT,
            "rewrite_links": {"type": "boolean", "default": False},
            "redirect_links_to": _TEXT,
        },
        "required": ["op", "select", "do"],
    },
    {
        "type": "object",
        "properties": {"op": {"type": "string", "enum": ["retarget_links"]}, "from": _TEXT, "to": _TEXT},
        "required": ["op", "from", "to"],
    },
]


def _collapse_optional(schema: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, {type: null}]`` (an optional argument) as ``X``, keeping description and default."""
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema
    kept = [option for option in options if option != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(options):
        return schema
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    if rest.get("default", 0) is None:
        rest.pop("default")
    return {**kept[0], **rest}


def lean(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` reduced to ``KEYWORDS``: generated titles, patterns, examples and null options dropped."""
    schema = _collapse_optional(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key in _NAMED:
            out[key] = {name: lean(sub) for name, sub in value.items()}
        elif key in _ONE:
            out[key] = lean(value)
        elif key in _MANY:
            out[key] = [lean(sub) for sub in value]
        else:
            out[key] = value
    return out


# check_batch takes write_batch's edits: it points at them rather than repeating the families
EDIT_AS_WRITE_BATCH = {"type": "object", "description": "As write_batch's."}


def input_schema(generated: dict[str, Any], edit: dict[str, Any] | None = None) -> dict[str, Any]:
    """The listed argument schema of a tool whose signature generated ``generated``: ``lean``, and a list of
    edits shown as ``edit`` (default: ``anyOf`` the ``EDIT_FAMILIES``)."""
    edits = generated.get("properties", {}).get("edits")
    shown = lean(
        {**generated, "properties": {k: v for k, v in generated["properties"].items() if k != "edits"}}
    )
    if edits is not None:
        edits_shown = {key: value for key, value in lean(edits).items() if key != "items"}
        edits_shown["items"] = edit if edit is not None else {"anyOf": EDIT_FAMILIES}
        shown["properties"] = {
            name: edits_shown if name == "edits" else shown["properties"][name]
            for name in generated["properties"]
        }
    return shown


def _obj(required: list[str], **fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": fields} | ({"required": required} if required else {})


# Answers: the types of the top-level fields (the tool descriptions say what they hold); ``{}`` for a field
# that may be null.
Schema = dict[str, Any]
_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_BOOL: Schema = {"type": "boolean"}
_ANY: Schema = {}
_ARRAY: Schema = {"type": "array"}  # of objects: the descriptions say their fields
_LINES: Schema = {"type": "array", "items": _STR}
_STATUS: Schema = {"type": "string", "enum": ["queued", "running", "succeeded", "failed", "cancelled"]}
_PAGE: dict[str, Schema] = {
    "path": _STR,
    "version": _STR,
    "content": _STR,
    "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
    "size": _INT,
    "commit": _ANY,
    "sections": _ARRAY,
}
_JOB = _obj(
    ["job_id", "status"],
    job_id=_STR,
    wiki=_ANY,
    status=_STATUS,
    dry_run=_BOOL,
    result=_ANY,
    error=_ANY,
)
OUTPUTS: dict[str, dict[str, Any]] = {
    "list_wikis": _obj(["wikis"], wikis=_ARRAY),
    "list_pages": _obj([], folders={"type": "object"}, pages=_ARRAY, next_cursor=_ANY),
    "read_page": _obj(["path", "version", "content", "size"], **_PAGE),
    "read_pages": _obj(["pages"], commit=_ANY, pages=_ARRAY, errors=_ARRAY, next_cursor=_ANY),
    "page_outline": _obj(
        ["path", "version", "sections"], path=_STR, version=_STR, commit=_ANY, sections=_ARRAY
    ),
    "search_wiki": _obj(["matches"], matches=_ARRAY, pages=_ARRAY, total=_INT, next_cursor=_ANY),
    "find_backlinks": _obj(
        ["path", "backlinks"], path=_STR, version=_STR, commit=_ANY, backlinks=_ARRAY, next_cursor=_ANY
    ),
    "check_batch": _obj(
        ["job_id", "status"],
        job_id=_STR,
        status=_STATUS,
        edits=_LINES,
        files=_LINES,
        checks=_ANY,
        warnings=_ARRAY,
        plan=_STR,
    ),
    "write_batch": _obj(
        ["job_id", "status"], job_id=_STR, status=_STATUS, commit=_ANY, edits=_LINES, hint=_STR
    ),
    "get_job": _obj(
        ["job_id", "status"], job_id=_STR, status=_STATUS, commit=_ANY, edits=_LINES, checks=_ANY, error=_ANY
    ),
    "cancel_job": _JOB,
}


def keywords(schema: Any) -> set[str]:
    """Every keyword used in ``schema`` (property names excluded), to check it against ``KEYWORDS``."""
    found: set[str] = set()
    if not isinstance(schema, dict):
        return found
    for key, value in schema.items():
        found.add(key)
        if key in _NAMED and isinstance(value, dict):
            for sub in value.values():
                found |= keywords(sub)
        elif key in _ONE:
            found |= keywords(value)
        elif key in _MANY and isinstance(value, list):
            for sub in value:
                found |= keywords(sub)
    return found
