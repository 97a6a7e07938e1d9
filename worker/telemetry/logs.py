"""Structured logs for every wikiq process: JSON lines when stderr is not a terminal, colour otherwise.

``configure`` runs once at process start. wikiq's own events go through structlog (``get``); lines from
the standard library's loggers (arq, uvicorn, ``logging.getLogger("wikiq....")``) are rendered by the same
processors, so a process's stderr holds one format only. Keys that could carry content or secrets
(``content``, ``batch``, ``token``, ...) are dropped from every line as a last guard: callers log ids,
counts, codes and durations, never bodies.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor

FORBIDDEN_KEYS = frozenset(
    {"content", "batch", "edits", "old", "new", "body", "token", "authorization", "secret", "headers", "url"}
)


def _drop_forbidden(_: Any, __: str, event: EventDict) -> EventDict:
    """Remove keys that may hold page content or credentials."""
    if not FORBIDDEN_KEYS.isdisjoint(event):
        for key in FORBIDDEN_KEYS.intersection(event):
            del event[key]
    return event


_generation = 0


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """Send structlog and standard-library logging to ``stream`` (stderr) at ``level``, JSON unless a tty."""
    global _generation
    _generation += 1
    stream = stream if stream is not None else sys.stderr
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        number = logging.INFO
    pretty = stream.isatty()
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_forbidden,
    ]
    renderer: Processor
    if pretty:
        renderer = structlog.dev.ConsoleRenderer()
        tail: list[Processor] = []
    else:
        renderer = structlog.processors.JSONRenderer()
        tail = [structlog.processors.format_exc_info]
    structlog.configure(
        processors=[*shared, *tail, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail, renderer],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    # arq logs a line per job start and end; wikiq's own job lines replace them (kept when debugging)
    logging.getLogger("arq").setLevel(number if number <= logging.DEBUG else max(number, logging.WARNING))
    # httpx (the Python client, the MCP bridge) logs every request's full URL at info, query and all
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(number, logging.WARNING))


class Logger:
    """A structlog logger adding ``logger=<name>`` to its lines, bound at first use after ``configure``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._bound: Any = None
        self._generation = -1

    def _logger(self) -> Any:
        if self._generation != _generation:
            self._bound = structlog.get_logger().bind(logger=self.name)
            self._generation = _generation
        return self._bound

    def debug(self, event: str, **fields: Any) -> None:
        """Log ``event`` at debug level."""
        self._logger().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log ``event`` at info level."""
        self._logger().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log ``event`` at warning level."""
        self._logger().warning(event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log ``event`` at error level."""
        self._logger().error(event, **fields)


def get(name: str) -> Logger:
    """The logger named ``name``."""
    return Logger(name)
