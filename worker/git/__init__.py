"""Git without a working tree: packs written in process, ``main`` moved by compare-and-swap.

objects      trees, the pack writer and reader (pure bytes)
commits      identities, the Wikiq-Job trailer, parsing
refs         reading main, the CAS swap under main.lock, syncfs
snapshot     tree caches and the engine's view of a commit
repo         one repository: reads, commits
maintenance  rolling packs up in the background
store        every wiki under <data>/wikis
policy       a wiki's zone policy override file
"""

from __future__ import annotations

from worker.git.commits import JOB_TRAILER, SERVICE, CommitInfo, Identity
from worker.git.refs import STALE_LOCK_SECONDS
from worker.git.repo import FileEntry, WikiRepo, object_id
from worker.git.store import INITIAL_FILES, WIKI_ID, GitStore

__all__ = [
    "INITIAL_FILES",
    "JOB_TRAILER",
    "SERVICE",
    "STALE_LOCK_SECONDS",
    "WIKI_ID",
    "CommitInfo",
    "FileEntry",
    "GitStore",
    "Identity",
    "WikiRepo",
    "object_id",
]
