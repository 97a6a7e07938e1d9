"""The FastAPI application: lifespan wiring, error handlers, health endpoints, ``/v1`` routes, ``/ui``,
``/metrics`` and ``/mcp``."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from git.exc import GitCommandError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from api.server import errors, mcp, openapi
from api.server import metrics as metrics_route
from api.server.auth import Authenticator
from api.server.deps import AppState, Svc
from api.server.hosts import AllowedHosts, HostGuard
from api.server.limits import RequestLimits
from api.server.routes import jobs, proposals, wikis
from api.server.stopping import Draining
from api.server.ui import login, pages
from api.server.ui import proposals as proposal_pages
from api.server.ui.sessions import Sessions
from worker.bootstrap import bootstrap
from worker.git.remote import RemoteRegistry
from worker.jobs.storage import free_bytes, human, storage_fault
from worker.schema.answers import Health, Readiness
from worker.service import Service
from worker.settings import Settings

log = logging.getLogger("wikiq.api")
# Redis' refusals that mean "not now" (a failover, a restart, a full disk), not a bug of ours
_TRANSIENT = ("MASTERDOWN", "LOADING", "MISCONF", "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN")

READY_TIMEOUT = 1.0  # seconds /readyz waits for Redis to answer PING


def redis_unavailable(exc: RedisError) -> bool:
    """True when ``exc`` means Redis cannot serve right now (unreachable, failing over, restarting)."""
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | ReadOnlyError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(_TRANSIENT)


def create_app(settings: Settings, bind_host: str = "127.0.0.1", draining: Draining | None = None) -> FastAPI:
    """A wikiq API app bound to ``settings``, listening on ``bind_host`` (which names it answers for,
    with ``WIKIQ_ALLOWED_HOSTS``: ``api.server.hosts``); ``draining``: set by the server when the process
    is stopping (``api.server.stopping``). ``ValueError`` or ``OSError`` for a bad tokens/remotes file."""
    auth = Authenticator(settings)
    stopping = draining if draining is not None else Draining()
    remotes = RemoteRegistry(settings.remotes_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with bootstrap(settings, remotes=remotes, listen=True) as resources:
            sessions = Sessions(resources.redis, settings.ui_sessions_per_token)
            app.state.wikiq = AppState(Service(resources), auth, sessions, stopping)
            yield

    app = FastAPI(
        title="wikiq",
        version=importlib.metadata.version("wikiq"),
        description="Atomic batches of edits to git-backed markdown wikis, applied through a job queue.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(HostGuard, allowed=AllowedHosts(bind_host, settings.allowed_hosts))
    if settings.trusted_proxies:  # their X-Forwarded-Proto is the scheme (a Secure cookie behind TLS)
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.trusted_proxies))

    @app.exception_handler(RedisError)
    async def redis_error(request: Request, exc: RedisError) -> JSONResponse:
        """Redis away (during a failover or a restart): 503, never a stack trace."""
        if not redis_unavailable(exc):
            log.error("Redis error on %s %s: %r", request.method, request.url.path, exc)
            return errors.error_response("INTERNAL", "internal error; it has been logged")
        log.warning("Redis unavailable on %s %s: %r", request.method, request.url.path, exc)
        body = errors.error_body(
            "STORAGE_UNAVAILABLE",
            "the job store (Redis) is not available right now (a restart or a failover); try again in a "
            "moment. A submission cut short by this may have been queued: submit it again with the same "
            "Idempotency-Key to get that job rather than a second one",
        )
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})

    async def storage_error(request: Request, exc: Exception) -> JSONResponse:
        """A full or read-only data directory (an ``OSError``, or git saying so) is 503
        ``STORAGE_UNAVAILABLE``; anything else is a 500 that is logged."""
        fault = storage_fault(exc)
        if fault is None:
            log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
            return errors.error_response("INTERNAL", "internal error; it has been logged")
        log.warning("storage fault on %s %s: %s", request.method, request.url.path, exc)
        return errors.error_response(fault.code, fault.message)

    app.add_exception_handler(OSError, storage_error)
    app.add_exception_handler(GitCommandError, storage_error)

    @app.get("/healthz", tags=["health"], operation_id="healthz", response_model=Health)
    async def healthz() -> Health:
        """The process is up."""
        return Health()

    @app.get(
        "/readyz",
        tags=["health"],
        operation_id="readyz",
        response_model=Readiness,
        responses={503: {"model": Readiness, "description": "Redis or the data directory is not usable"}},
    )
    async def readyz(svc: Svc) -> JSONResponse:
        """200 when Redis answers (within ``READY_TIMEOUT`` seconds) and the data directory is writable, else
        503 naming what is wrong."""
        checks = {"redis": "ok", "data_dir": "ok"}
        try:
            await asyncio.wait_for(svc.resources.redis.ping(), READY_TIMEOUT)
        except TimeoutError:
            checks["redis"] = f"unreachable: no answer within {READY_TIMEOUT:g} s"
        except (RedisError, OSError) as exc:
            checks["redis"] = f"unreachable: {type(exc).__name__}"
        try:
            with tempfile.NamedTemporaryFile(dir=svc.resources.store.root, prefix=".ready-"):
                pass
        except OSError as exc:
            checks["data_dir"] = f"not writable: {os.strerror(exc.errno or 0)}"
        else:
            free = free_bytes(svc.resources.store.root)
            if free is not None and free < settings.min_free_bytes:
                checks["data_dir"] = (
                    f"low on space: {human(free)} free, "
                    f"under WIKIQ_MIN_FREE_BYTES={human(settings.min_free_bytes)}"
                )
        ok = all(v == "ok" for v in checks.values())
        body = Readiness(status="ok" if ok else "unavailable", **checks)
        return JSONResponse(body.model_dump(mode="json"), status_code=200 if ok else 503)

    app.include_router(wikis.router)
    app.include_router(jobs.router)
    app.include_router(proposals.router)
    app.include_router(metrics_route.router)
    app.include_router(login.router)
    app.include_router(pages.router)
    app.include_router(proposal_pages.router)
    mcp.mount(app, settings)
    openapi.install(app, settings, remotes)
    return app
