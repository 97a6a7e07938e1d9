"""The API process's state, made at start-up (``lifespan``, on ``worker.bootstrap``) and handed to routes.

``AppState`` holds the ``Service`` every route calls, and what only HTTP needs (the authenticator and the
status page's sessions). Routes take ``Svc`` and ``Caller`` parameters; nothing else reaches into
``request.app.state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from api.server.auth import Authenticator, Principal, principal
from api.server.stopping import Draining
from api.server.ui.sessions import Sessions
from worker.service import Service


@dataclass
class AppState:
    """Everything a route needs."""

    service: Service
    auth: Authenticator
    sessions: Sessions
    draining: Draining  # set once the process is stopping: long-polls answer at once


async def state(request: Request) -> AppState:
    """The API process's ``AppState`` (FastAPI dependency; ``async`` so it costs no thread hop)."""
    value: AppState = request.app.state.wikiq
    return value


async def service(request: Request) -> Service:
    """The service of this API process (FastAPI dependency)."""
    value: AppState = request.app.state.wikiq
    return value.service


App = Annotated[AppState, Depends(state)]
Svc = Annotated[Service, Depends(service)]
Caller = Annotated[Principal, Depends(principal)]
