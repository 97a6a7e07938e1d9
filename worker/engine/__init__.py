"""The pure engine: batches checked and materialised in memory, no git, no Redis, no HTTP.

``preflight(head, edits, policy, limits) -> Plan`` or one ``BatchRejected``; ``check_static`` for the checks
that need no repository; ``review(head, plan, policy)`` for what a dry run answers besides ``applied``
(a diff per changed file, warnings). Path shapes and zones live in ``worker.engine.paths``, the markdown
toolkit (links, sections, front matter, patterns) in ``worker.engine.markdown``.
"""

from __future__ import annotations

from worker.engine.plan import (
    Applied,
    BatchWarning,
    DictHead,
    HeadView,
    NewFile,
    Plan,
    blob_id,
)
from worker.engine.preflight import check_static, preflight
from worker.engine.review import FileDiff, Review, review

__all__ = [
    "Applied",
    "BatchWarning",
    "DictHead",
    "FileDiff",
    "HeadView",
    "NewFile",
    "Plan",
    "Review",
    "blob_id",
    "check_static",
    "preflight",
    "review",
]
