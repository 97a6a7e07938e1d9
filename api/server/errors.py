"""HTTP face of the error family: status per code, and handlers that always answer the contract's
error object ``{"error": {"code", "message", "index"}}`` — never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from worker.errors import MAX_EDIT_ERRORS, WikiqError
from worker.schema.answers import ErrorInfo
from worker.schema.edits import OPS

log = logging.getLogger("wikiq.api")

STATUS = {
    "TOO_MANY_EDITS": 413,
    "BATCH_TOO_LARGE": 413,
    "BATCH_TOO_COSTLY": 413,
    "WIKI_NOT_FOUND": 404,
    "JOB_NOT_FOUND": 404,
    "PLAN_NOT_FOUND": 404,
    "PROPOSAL_NOT_FOUND": 404,
    "NOT_FOUND": 404,
    "WIKI_EXISTS": 409,
    "NOT_CANCELLABLE": 409,
    "PROPOSAL_NOT_OPEN": 409,
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "RATE_LIMITED": 429,
    "REMOTE_UNAVAILABLE": 502,
    "REMOTE_REJECTED": 502,
    "STORAGE_UNAVAILABLE": 503,
    "INTERNAL": 500,
    "MISDIRECTED_HOST": 421,
}


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"code", "message", "index"}}``."""

    error: ErrorInfo


_DOC = {
    400: "malformed request",
    401: "missing or unknown bearer token (UNAUTHORIZED)",
    403: "the token does not allow this, or the request comes from another site's page (FORBIDDEN)",
    404: "no such wiki, page, job, plan, proposal or route (the same answer when the caller may not read it)",
    405: "method not allowed",
    409: "conflict (WIKI_EXISTS, NOT_CANCELLABLE, PROPOSAL_NOT_OPEN)",
    413: "over a limit (TOO_MANY_EDITS, BATCH_TOO_LARGE, BATCH_TOO_COSTLY)",
    414: "query string too long",
    421: "the Host header names no host this server answers for (MISDIRECTED_HOST)",
    422: "refused: shape, path, zone, encoding, webhook, idempotency, or a read over its budget "
    "(QUERY_TOO_COSTLY; see the code)",
    429: "rate limited (RATE_LIMITED, with Retry-After)",
    431: "headers too large",
    500: "internal error (no details are leaked)",
    502: "the wiki's git remote cannot be reached or refused (REMOTE_UNAVAILABLE, REMOTE_REJECTED)",
    503: "storage cannot keep it now: Redis away or not confirming a job durable, or the data directory "
    "full or read-only (STORAGE_UNAVAILABLE)",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in _DOC.items()
}


def error_body(code: str, message: str, index: int | None = None) -> dict[str, Any]:
    """The contract's error object."""
    return {"error": {"code": code, "message": message, "index": index}}


def error_response(code: str, message: str, index: int | None = None, **headers: str) -> JSONResponse:
    """A JSON error answer with the status the code maps to (422 by default)."""
    return JSONResponse(error_body(code, message, index), status_code=STATUS.get(code, 422), headers=headers)


def refusal_response(exc: WikiqError, **headers: str) -> JSONResponse:
    """The answer to a refusal: its whole error object (``details``, and every failing edit of a batch
    refused by its checks), with the status its code maps to."""
    return JSONResponse({"error": exc.to_dict()}, status_code=STATUS.get(exc.code, 422), headers=headers)


def _validation_code(exc: RequestValidationError) -> str:
    """The code of a refused request: a bad wiki id in the URL is a wiki that does not exist, a bad page
    path in the URL is ``INVALID_PATH``, anything else ``INVALID_BATCH``."""
    first = exc.errors()[0] if exc.errors() else {}
    loc = tuple(first.get("loc", ()))
    if loc == ("path", "wiki"):
        return "WIKI_NOT_FOUND"
    if loc == ("path", "path"):
        return "INVALID_PATH"
    return "INVALID_BATCH"


def _validation_message(exc: RequestValidationError) -> tuple[str, int | None]:
    return _located(exc.errors()[0] if exc.errors() else {})


def _located(first: Any) -> tuple[str, int | None]:
    """The message of one validation error, naming the field, and the index of the edit it is in."""
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    if loc and loc[0] in ("batch", "plan"):  # the submission's tag (a batch or a plan): drop it
        loc = loc[1:]
    index = None
    if len(loc) >= 2 and loc[0] in ("edits", "amend") and loc[1].isdigit():  # amend's keys are indexes
        index = int(loc[1])
        loc = loc[2:]
        # the discriminated union puts the op's name in the location: drop it
        if loc and loc[0] in OPS:
            loc = loc[1:]
    where = ".".join(loc) or "body"
    message = str(first.get("msg", "invalid request"))
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON", None
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}", index


def _failing_edits(exc: RequestValidationError, code: str) -> list[dict[str, Any]]:
    """When edits of a submitted batch fail the schema: the first error (the answer's own), then each other
    failing edit with its first error, in order, at most ``MAX_EDIT_ERRORS`` in all; empty when no edit
    fails."""
    found: dict[int | None, dict[str, Any]] = {}
    for error in exc.errors():
        message, index = _located(error)
        if index not in found and len(found) < MAX_EDIT_ERRORS:
            found[index] = {"code": code, "message": message, "index": index}
    if all(index is None for index in found):
        return []
    return list(found.values())


def _is_ui_page(path: str) -> bool:
    # the status page's HTML routes, not its JSON state polls or static files
    return path.startswith("/ui") and not path.endswith("/state") and "/static/" not in path


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path (for a ``405``'s ``Allow``).

    Included routers are walked too (FastAPI keeps them as one entry holding the ``original_router``).
    """
    methods: set[str] = set()

    def walk(routes: list[BaseRoute]) -> None:
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(inner.routes)
            elif route.matches(request.scope)[0] != Match.NONE:
                methods.update(getattr(route, "methods", None) or ())

    walk(request.app.router.routes)
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into the contract's error object."""

    @app.exception_handler(WikiqError)
    async def wikiq_error(request: Request, exc: WikiqError) -> Response:
        if exc.code == "UNAUTHORIZED" and request.method == "GET" and _is_ui_page(request.url.path):
            return RedirectResponse("/ui/login", status_code=303)
        headers = {}
        if exc.code == "UNAUTHORIZED":
            headers["WWW-Authenticate"] = "Bearer"
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        return refusal_response(exc, **headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        code = _validation_code(exc)
        if code == "WIKI_NOT_FOUND":
            return error_response(code, "no wiki by that id: ids match ^[a-z0-9][a-z0-9._-]{0,62}$")
        message, index = _validation_message(exc)
        body = error_body(code, message, index)
        failing = _failing_edits(exc, code)
        if failing:
            body["error"]["errors"] = failing
        return JSONResponse(body, status_code=STATUS.get(code, 422))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return JSONResponse(error_body("NOT_FOUND", "no such route"), status_code=404)
        if exc.status_code == 400:  # FastAPI could not parse the body (not UTF-8, nested too deeply, ...)
            return error_response(
                "INVALID_BATCH", "the body is not valid JSON (UTF-8, not nested too deeply)"
            )
        if exc.status_code == 405:
            allowed = ", ".join(allowed_methods(request))
            return JSONResponse(
                error_body("NOT_FOUND", f"this route has no {request.method}; it answers {allowed}"),
                status_code=405,
                headers={"Allow": allowed},
            )
        return JSONResponse(error_body("INVALID_BATCH", str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(RecursionError)
    async def too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        return error_response("INVALID_BATCH", "the JSON body is nested too deeply")

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("INTERNAL", "internal error; it has been logged"), status_code=500)
