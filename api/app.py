"""The FastAPI application: lifespan wiring, error handlers, health endpoints and the ``/v1`` routes."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from api import errors, mcp, ui, ui_login
from api import metrics as metrics_route
from api.auth import Authenticator
from api.limits import RequestLimits
from api.routes import jobs, wikis
from api.state import AppState
from api.waiters import Waiters
from worker.gitstore import GitStore
from worker.jobstore import JobStore
from worker.queue import connect
from worker.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    """A wikiq API app bound to ``settings``; ``ValueError`` or ``OSError`` for a bad tokens file."""
    auth = Authenticator(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = await connect(settings.redis_url)
        waiters = Waiters()
        waiters.start(redis)
        store = GitStore(settings.data_dir)
        job_store = JobStore(redis, settings.job_retention_seconds)
        app.state.wikiq = AppState(settings, redis, store, job_store, waiters, auth)
        try:
            yield
        finally:
            await waiters.stop()
            store.close()
            await redis.aclose()

    app = FastAPI(
        title="wikiq",
        version="0.1.0",
        description="Atomic batches of edits to git-backed markdown wikis, applied through a job queue.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz(request: Request) -> JSONResponse:
        """200 when Redis answers and the data directory is writable, else 503 naming what is wrong."""
        wikiq: AppState = request.app.state.wikiq
        checks = {"redis": "ok", "data_dir": "ok"}
        try:
            await wikiq.redis.ping()
        except (RedisError, OSError) as exc:
            checks["redis"] = f"unreachable: {type(exc).__name__}"
        try:
            with tempfile.NamedTemporaryFile(dir=wikiq.store.root, prefix=".ready-"):
                pass
        except OSError as exc:
            checks["data_dir"] = f"not writable: {os.strerror(exc.errno or 0)}"
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", **checks}, status_code=200 if ok else 503
        )

    app.include_router(wikis.router)
    app.include_router(jobs.router)
    app.include_router(metrics_route.router)
    app.include_router(ui_login.router)
    app.include_router(ui.router)
    mcp.mount(app, settings)
    return app
