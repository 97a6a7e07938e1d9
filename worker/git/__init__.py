"""Git without a working tree: packs written in process, ``main`` moved by compare-and-swap.

objects      trees and the pack writer (pure bytes)
packs        the pack reader, and the process-wide cache of open packs
commits      identities, the Wikiq-Job trailer, parsing
refs         reading main, the durable CAS swap under main.lock
snapshot     the process-wide tree caches and the engine's view of a commit
rollup       which small packs a commit's pack absorbs (the bound on packs per wiki)
reader       the object-reader protocol (trees, blobs, heads): what snapshot, search, textindex read
repo         one repository: reads, commits
grep         git grep and git cat-file --batch over one tree: which files mention a text, many blobs at once
search       searching a commit's pages: literal text, RE2 patterns
textindex    a repository's SQLite FTS5 trigram index: literal search reads only the pages that may match
linkindex    a repository's SQLite index of page links: backlinks resolve only the links that may match
warmup       building both indexes in the background when a wiki is attached or first opened
maintenance  background git repacks and prunes, one at a time per process
store        every wiki under <data>/wikis
policy       a wiki's zone policy override file
remote/      wikis kept in a branch of a git remote: the remotes file, credentials, git transport
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
