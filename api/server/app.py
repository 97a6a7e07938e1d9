"""The FastAPI application: lifespan wiring, error handlers, health endpoints, ``/v1`` routes, ``/ui``,
``/metrics`` and ``/mcp``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from api.server import errors, mcp, openapi
from api.server import metrics as metrics_route
from api.server.auth import Authenticator
from api.server.deps import AppState, Svc
from api.server.limits import RequestLimits
from api.server.routes import jobs, wikis
from api.server.ui import login, pages
from api.server.ui.sessions import Sessions
from worker.git import GitStore
from worker.git.remote import RemoteRegistry
from worker.jobs.queue import connect
from worker.jobs.records import JobStore
from worker.jobs.registry import WikiRegistry
from worker.jobs.waiters import Waiters
from worker.jobs.wikis import Wikis
from worker.schema.answers import Health, Readiness
from worker.service import Service, Wiring
from worker.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    """A wikiq API app bound to ``settings``; ``ValueError`` or ``OSError`` for a bad tokens/remotes file."""
    auth = Authenticator(settings)
    remotes = RemoteRegistry(settings.remotes_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = await connect(settings.redis_url)
        waiters = Waiters()
        waiters.start(redis)
        store = GitStore(settings.data_dir)
        job_store = JobStore(redis, settings.job_retention_seconds, settings.dry_run_retention_seconds)
        wikis = Wikis(store, WikiRegistry(redis), remotes)
        service = Service(Wiring(settings, redis, store, job_store, waiters, wikis))
        app.state.wikiq = AppState(service, auth, Sessions(redis))
        try:
            yield
        finally:
            await waiters.stop()
            store.close()
            await redis.aclose()

    app = FastAPI(
        title="wikiq",
        version="0.2.0",
        description="Atomic batches of edits to git-backed markdown wikis, applied through a job queue.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes)

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
        """200 when Redis answers and the data directory is writable, else 503 naming what is wrong."""
        checks = {"redis": "ok", "data_dir": "ok"}
        try:
            await svc.wiring.redis.ping()
        except (RedisError, OSError) as exc:
            checks["redis"] = f"unreachable: {type(exc).__name__}"
        try:
            with tempfile.NamedTemporaryFile(dir=svc.wiring.store.root, prefix=".ready-"):
                pass
        except OSError as exc:
            checks["data_dir"] = f"not writable: {os.strerror(exc.errno or 0)}"
        ok = all(v == "ok" for v in checks.values())
        body = Readiness(status="ok" if ok else "unavailable", **checks)
        return JSONResponse(body.model_dump(mode="json"), status_code=200 if ok else 503)

    app.include_router(wikis.router)
    app.include_router(jobs.router)
    app.include_router(metrics_route.router)
    app.include_router(login.router)
    app.include_router(pages.router)
    mcp.mount(app, settings)
    openapi.install(app, settings, remotes)
    return app
