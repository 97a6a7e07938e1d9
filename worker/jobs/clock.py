"""The one clock of job records: milliseconds since the epoch (``now_ms``), and the contract's ISO 8601
rendering of such a moment (``iso``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def iso(ms: int | None) -> str | None:
    """``ms`` (milliseconds since the epoch) as ISO 8601 UTC with milliseconds, or None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    """The current time in milliseconds since the epoch (the one clock every record timestamp uses)."""
    return int(time.time() * 1000)
