"""The pure engine: batches checked and materialised in memory, no git, no Redis, no HTTP.

``preflight(head, edits, policy, limits) -> Plan`` or one ``BatchRejected``; ``check_static`` for the checks
that need no repository. Path shapes and zones live in ``worker.engine.paths``.
"""

from __future__ import annotations

from worker.engine.preflight import (
    Applied,
    DictHead,
    HeadView,
    NewFile,
    Plan,
    blob_id,
    check_static,
    preflight,
)

__all__ = ["Applied", "DictHead", "HeadView", "NewFile", "Plan", "blob_id", "check_static", "preflight"]
