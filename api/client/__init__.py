"""Python client of the wikiq HTTP API (``Client``, ``AsyncClient``); it depends on neither the server nor
the workers, only on ``worker.schema`` (the contract's models) and httpx."""

from __future__ import annotations

from api.client.http import (
    DEFAULT_URL,
    MAX_WAIT,
    AsyncClient,
    Client,
    ClientError,
    ConnectionFailed,
    SearchOptions,
    raise_for_error,
    settings_from_env,
)

__all__ = [
    "DEFAULT_URL",
    "MAX_WAIT",
    "AsyncClient",
    "Client",
    "ClientError",
    "ConnectionFailed",
    "SearchOptions",
    "raise_for_error",
    "settings_from_env",
]
