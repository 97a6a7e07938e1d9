"""``/openapi.json``: FastAPI's schema, completed with what the models cannot say by themselves.

- the batch's edit count (``minItems`` 1, ``maxItems`` from ``WIKIQ_MAX_EDITS``), declared but checked in
  code so an empty or too long batch gets its contract code (``BATCH_EMPTY``, ``TOO_MANY_EDITS``);
- the remotes a wiki may be attached to (an ``enum`` of the names the remotes file declares now; none: the
  field may only be null), so an undeclared name is outside the schema as it is outside the contract;
- the bearer scheme, when a tokens file is configured (``/healthz``, ``/readyz`` and ``/metrics`` need none);
- ``POST /mcp``: JSON-RPC requests in, JSON-RPC answers out.

The schema is rebuilt when the declared remotes change.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from worker.git.remote import RemoteRegistry
from worker.settings import Settings

PUBLIC = ("/healthz", "/readyz")
JSONRPC_REQUEST = {
    "type": "object",
    "description": "a JSON-RPC 2.0 request of the Model Context Protocol (initialize, tools/list, ...)",
    "required": ["jsonrpc", "method"],
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {
            "oneOf": [{"type": "integer"}, {"type": "string", "minLength": 1}],
            "description": "absent for a notification, which gets no answer (202)",
        },
        "method": {"type": "string", "minLength": 1},
        "params": {"type": "object"},
    },
}
JSONRPC_ANSWER = {
    "type": "object",
    "description": "a JSON-RPC 2.0 answer: result, or error {code, message, data}",
    "required": ["jsonrpc"],
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
        "result": {"type": "object"},
        "error": {"type": "object"},
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _mcp(settings: Settings) -> dict[str, Any]:
    error = {"$ref": "#/components/schemas/ErrorBody"}
    responses = {
        "200": _json(JSONRPC_ANSWER, "the JSON-RPC answer (a refused call is an answer with an error)"),
        "202": {"description": "a notification (no id) was taken; it has no answer"},
        "400": _json(JSONRPC_ANSWER, "not a JSON-RPC request"),
        "403": _json(error, "the request comes from another site's page (an Origin not this server's)"),
        "413": _json(error, "the request body is over WIKIQ_MAX_BODY_BYTES"),
        "414": _json(error, "the query string is too long"),
        "421": _json(error, "the Host header names no host this server answers for"),
        "429": _json(error, "too many MCP requests of this principal in flight"),
        "431": _json(error, "the request headers are too large"),
    }
    if settings.tokens_file is not None:
        responses["401"] = _json(error, "missing or unknown bearer token")
    return {
        "post": {
            "tags": ["mcp"],
            "summary": "MCP tools (Streamable HTTP, stateless, JSON answers)",
            "operationId": "mcp",
            "requestBody": {"required": True, "content": {"application/json": {"schema": JSONRPC_REQUEST}}},
            "responses": responses,
        }
    }


def install(app: FastAPI, settings: Settings, remotes: RemoteRegistry) -> None:
    """Serve the completed schema at ``/openapi.json`` (and to ``/docs``)."""
    built: dict[tuple[str, ...], dict[str, Any]] = {}

    def schema() -> dict[str, Any]:
        names = tuple(sorted(remotes.remotes()))
        if names not in built:
            built.clear()
            built[names] = _complete(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                ),
                settings,
                names,
            )
        return built[names]

    app.openapi = schema  # type: ignore[method-assign]


def _complete(spec: dict[str, Any], settings: Settings, remotes: tuple[str, ...]) -> dict[str, Any]:
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    batch = schemas.get("Batch", {}).get("properties", {})
    if "edits" in batch:
        batch["edits"].update({"minItems": 1, "maxItems": settings.max_edits})
    new_wiki = schemas.get("NewWiki", {}).get("properties", {})
    if "remote" in new_wiki:
        new_wiki["remote"] = (
            {"anyOf": [{"type": "string", "enum": list(remotes)}, {"type": "null"}], "default": None}
            if remotes
            else {"type": "null", "default": None}
        ) | {"description": new_wiki["remote"].get("description", "")}
    spec["paths"]["/mcp"] = _mcp(settings)
    for operations in spec["paths"].values():  # the HTTP server's own answer, before any of the app's
        for operation in operations.values():
            unparsed = operation.setdefault("responses", {}).setdefault(
                "400", {"description": "a request the HTTP server cannot parse (a request line over 64 KiB)"}
            )
            unparsed.setdefault("content", {})["text/plain"] = {"schema": {"type": "string"}}
    for path in PUBLIC:  # the request limits (api.server.limits) answer before any route, these too
        for operation in spec["paths"].get(path, {}).values():
            responses = operation.setdefault("responses", {})
            responses.setdefault(
                "414", _json({"$ref": "#/components/schemas/ErrorBody"}, "query string too long")
            )
            responses.setdefault(
                "431", _json({"$ref": "#/components/schemas/ErrorBody"}, "headers too large")
            )
    if settings.tokens_file is not None:
        spec["components"]["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
        spec["security"] = [{"bearerAuth": []}]
        for path in PUBLIC:
            for operation in spec["paths"].get(path, {}).values():
                operation["security"] = []
    return spec
