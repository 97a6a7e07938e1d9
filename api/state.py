"""Wiring in one place: the settings, Redis pool, git store, job store and long-poll hub of an API process,
created at start-up (``lifespan``) and handed to routes through ``request.app.state.wikiq``."""

from __future__ import annotations

from dataclasses import dataclass

from arq.connections import ArqRedis
from fastapi import Request

from api.auth import Authenticator
from api.waiters import Waiters
from worker.gitstore import GitStore
from worker.jobstore import JobStore
from worker.settings import Settings


@dataclass
class AppState:
    """Everything a route needs."""

    settings: Settings
    redis: ArqRedis
    store: GitStore
    jobs: JobStore
    waiters: Waiters
    auth: Authenticator


async def state(request: Request) -> AppState:
    """The API process's ``AppState`` (FastAPI dependency; ``async`` so it costs no thread hop)."""
    value: AppState = request.app.state.wikiq
    return value
