"""Building a repository's read indexes off the request path: when a wiki is attached or first opened.

``warm(repo, commit)`` starts, once per open repository, a background thread that brings the text index
(``worker.git.textindex``: literal search) and then the link index (``worker.git.linkindex``: backlinks) to
``commit`` when either holds nothing yet and the wiki is large enough to be worth indexing
(``textindex.INDEX_FROM_BYTES`` of packed objects); the link index is built in a child process (pure
Python parsing, which here would hold the GIL the requests need). Reads do not wait for it: until an index
holds a commit, they answer without it (search greps, backlinks read the pages), exactly as they would
with it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING

from worker.git.linkindex import build_in_child, link_index
from worker.git.textindex import INDEX_FROM_BYTES

if TYPE_CHECKING:
    from worker.git.repo import WikiRepo

log = logging.getLogger(__name__)

_WARMED: weakref.WeakKeyDictionary[WikiRepo, threading.Thread] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def warm(repo: WikiRepo, commit: str | None) -> threading.Thread | None:
    """Start building ``repo``'s indexes at ``commit`` in the background (see the module); the thread, or
    None when this repository was warmed already or has no commit. Never blocks."""
    if commit is None:
        return None
    with _LOCK:
        if repo in _WARMED:
            return None
        thread = _WARMED[repo] = threading.Thread(
            target=_build, args=(repo, commit), name=f"indexes {repo.path.name}", daemon=True
        )
    thread.start()
    return thread


def _build(repo: WikiRepo, commit: str) -> None:
    text, links = repo.text_index(), link_index(repo)
    try:
        if text._packed_bytes() < INDEX_FROM_BYTES:  # a small wiki: reading its pages is as fast
            return
        if text.indexed() is None:
            text.build(commit)
        if links.indexed() is None:
            build_in_child(repo, commit)
    except Exception:  # an index is a cache: a failed build leaves reads as they were
        log.exception("building the indexes of %s failed", repo.path)
