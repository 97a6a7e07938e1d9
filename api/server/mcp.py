"""``/mcp``: the MCP tools served by the API itself (Streamable HTTP, stateless, JSON answers).

Tool calls go straight to the service in process, acting as the principal of the request's bearer token;
no URL is ever derived from request headers and nothing loops back over the network. The token is checked
here, before any tool list or call (``401`` with the contract's error object for a missing or unknown one),
and each principal may have at most ``WIKIQ_MCP_MAX_CONCURRENT`` MCP requests in flight (``429`` beyond).
Only POST is served: the server is stateless and answers JSON, so there is no stream for a GET to open
(``405`` with ``Allow: POST``, as the Streamable HTTP transport allows).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.mcp.tools import Backend, Refused, build_server
from api.server.auth import Principal, principal
from api.server.deps import AppState
from api.server.stopping import Draining
from worker.errors import WikiqError
from worker.schema.answers import (
    BacklinkList,
    ErrorInfo,
    Job,
    MatchList,
    Page,
    PageList,
    PageSet,
    Proposal,
    WikiList,
)
from worker.schema.edits import Batch, PlanSubmission
from worker.service import Service


class ServiceBackend:
    """The tools' backend in the API process: the service, called as ``caller``; its waits for a job end
    at once when the process is stopping (``draining``)."""

    def __init__(self, service: Service, caller: Principal, draining: Draining | None = None) -> None:
        self.service = service
        self.caller = caller
        self.draining = draining if draining is not None else Draining()

    async def _call(self, call: Any) -> Any:
        try:
            return await call
        except WikiqError as exc:
            raise Refused(ErrorInfo.model_validate(exc.to_dict())) from None

    async def list_wikis(self) -> WikiList:
        found: WikiList = await self._call(self.service.reads.list_wikis(self.caller))
        return found

    async def list_pages(self, wiki: str, prefix: str, limit: int, cursor: str | None) -> PageList:
        found: PageList = await self._call(
            self.service.reads.list_pages(self.caller, wiki, prefix, limit, cursor)
        )
        return found

    async def read_page(self, wiki: str, path: str, sections: bool) -> Page:
        found: Page = await self._call(self.service.reads.read_page(self.caller, wiki, path, sections))
        return found

    async def read_pages(self, wiki: str, paths: list[str], sections: bool, cursor: str | None) -> PageSet:
        found: PageSet = await self._call(
            self.service.reads.read_pages(self.caller, wiki, paths, sections, cursor)
        )
        return found

    async def backlinks(self, wiki: str, path: str, limit: int, cursor: str | None) -> BacklinkList:
        found: BacklinkList = await self._call(
            self.service.links.backlinks(self.caller, wiki, path, limit, cursor)
        )
        return found

    async def search(
        self,
        wiki: str,
        query: str,
        limit: int,
        regex: bool,
        case_sensitive: bool,
        prefix: str,
        cursor: str | None,
        *,
        outside_code: bool = False,
        multiline: bool = False,
        count: bool = False,
    ) -> MatchList:
        found: MatchList = await self._call(
            self.service.reads.find(
                self.caller,
                wiki,
                query,
                limit,
                count=count,
                regex=regex,
                prefix=prefix,
                case_sensitive=case_sensitive,
                cursor=cursor,
                outside_code=outside_code,
                multiline=multiline,
            )
        )
        return found

    async def submit(
        self, wiki: str, batch: Batch | PlanSubmission, wait: float, idempotency_key: str | None
    ) -> Job:
        answer = await self._call(self.service.submissions.submit(self.caller, wiki, batch, idempotency_key))
        if isinstance(answer, Job) and (answer.finished or wait <= 0):
            return answer
        return await self.job(answer.job_id, wait)

    async def job(self, job_id: str, wait: float) -> Job:
        found: Job = await self._call(
            self.draining.long_poll(lambda left: self.service.jobs.get(self.caller, job_id, left), wait)
        )
        return found

    async def cancel(self, job_id: str) -> Job:
        found: Job = await self._call(self.service.jobs.cancel(self.caller, job_id))
        return found

    async def proposal(self, proposal_id: str) -> Proposal:
        found: Proposal = await self._call(self.service.proposals.view(self.caller, proposal_id, False))
        return found


def _refusal(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "index": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def _envelope_problem(content_type: str, body: bytes) -> tuple[int, str] | None:
    """Why ``body`` is not one JSON-RPC 2.0 request or notification, as a JSON-RPC error; None when it is."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        return -32700, "send JSON-RPC with Content-Type: application/json"
    try:
        message = json.loads(body)
    except ValueError:
        return -32700, "the body is not JSON"
    if not isinstance(message, dict):
        return -32600, "send one JSON-RPC request object"
    if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str) or not message["method"]:
        return -32600, 'a JSON-RPC request has "jsonrpc": "2.0" and a method name'
    if "id" in message and (
        isinstance(message["id"], bool) or not isinstance(message["id"], int | str) or message["id"] == ""
    ):
        return -32600, "a JSON-RPC id is a number or a non-empty string"
    if "params" in message and not isinstance(message["params"], dict):
        return -32600, "JSON-RPC params are an object"
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the MCP app the body already read, then the connection's own events."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # waits until the client goes away

    return replay


class _Guard:
    """Authenticates every ``/mcp`` request before the MCP app sees it, and bounds each principal's
    requests in flight; the principal is left in ``request.state`` for the tools."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if request.method != "POST":  # stateless, JSON answers: no server-to-client stream to open
            message = f"/mcp answers POST (JSON-RPC requests), not {request.method}"
            await _refusal(405, "NOT_FOUND", message, Allow="POST")(scope, receive, send)
            return
        body = await request.body()
        problem = _envelope_problem(request.headers.get("content-type", ""), body)
        if problem is not None:
            answer = {"jsonrpc": "2.0", "id": None, "error": {"code": problem[0], "message": problem[1]}}
            await JSONResponse(answer, status_code=400)(scope, receive, send)
            return
        receive = _replay(body, receive)
        try:
            caller = await principal(request)
        except WikiqError as exc:
            await _refusal(401, exc.code, exc.message, **{"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        if self.in_flight[caller.id] >= self.limit:
            message = f"more than {self.limit} MCP requests in flight for your token; wait for one to end"
            await _refusal(429, "RATE_LIMITED", message, **{"Retry-After": "1"})(scope, receive, send)
            return
        self.in_flight[caller.id] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[caller.id] -= 1
            if not self.in_flight[caller.id]:
                del self.in_flight[caller.id]


def mount(app: FastAPI, settings: Any) -> None:
    """Serve the MCP tools at ``/mcp`` on ``app``."""

    def backend_for(ctx: Context) -> Backend:
        request = ctx.request_context.request
        assert isinstance(request, Request), "the HTTP transport hands tools the Starlette request"
        state: AppState = request.app.state.wikiq
        caller = request.state.principal  # set by _Guard (through api.server.auth.principal)
        assert isinstance(caller, Principal)
        return ServiceBackend(state.service, caller, state.draining)

    server = build_server(backend_for, settings.limits)
    # Host and Origin are checked for the whole app, /mcp in every mode included (api.server.hosts)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    http_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=security,
        max_request_body_size=settings.max_body_bytes,
    )
    for route in http_app.routes:
        if isinstance(route, Route):
            route = Route(
                route.path, endpoint=_Guard(route.app, settings.mcp_max_concurrent), methods=route.methods
            )
        app.router.routes.append(route)

    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(target: Any) -> AsyncIterator[Any]:
        async with outer(target) as state, server.session_manager.run():
            yield state

    app.router.lifespan_context = lifespan
