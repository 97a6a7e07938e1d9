"""Every wiki under ``<data>/wikis``: creating them, and the bounded set of open repositories.

Opening a repository is cheap (``WikiRepo`` does no I/O until asked; its packs and parsed trees live in
process-wide caches that outlive it), so the bound on open repositories is about what each may hold: its
packs (two descriptors for each memory-mapped one) and, once a read needed git, its ``git cat-file``
processes. ``max_open`` shrinks to fit the file-descriptor limit.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import git

from worker.engine import NewFile, Plan
from worker.errors import WikiExists, WikiNotFound
from worker.git.commits import SERVICE, Identity
from worker.git.refs import fsync_dir
from worker.git.repo import WikiRepo, object_id
from worker.git.rollup import MAX_PACKS

WIKI_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")  # \Z: "$" would let a trailing "\n" in

INITIAL_FILES: Mapping[str, bytes] = {
    "index.md": b"# Index\n\nOne line per page of the wiki.\n",
    "log.md": b"# Log\n\nAppend-only record of changes.\n",
    "schema.md": (
        b"# Schema\n\n- `wiki/` pages: any edit.\n- `raw/` sources: create only.\n"
        b"- `index.md`, `log.md`, `schema.md`: never deleted or renamed.\n"
    ),
}


MAX_OPEN = 32
FDS_PER_REPO = 2 * MAX_PACKS + 8  # every pack mapped, plus the pipes of two git cat-file processes
FDS_RESERVED = 256  # for everything else: sockets, Redis, logs, the process-wide pack cache's maps


def fitting_open_repos(wanted: int = MAX_OPEN) -> int:
    """How many repositories may stay open under this process's file-descriptor limit (at least 4)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(4, min(wanted, (soft - FDS_RESERVED) // FDS_PER_REPO))


class GitStore:
    """Every wiki under ``<data>/wikis``; open repositories kept in a bounded LRU (see the module)."""

    def __init__(self, data_dir: Path, max_open: int = MAX_OPEN) -> None:
        self.root = Path(data_dir) / "wikis"
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_open = fitting_open_repos(max_open)
        self._open: OrderedDict[str, WikiRepo] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, wiki: str) -> Path:
        """Where wiki ``wiki`` lives (the id is checked first)."""
        if not WIKI_ID.match(wiki):
            raise WikiNotFound(f"no wiki {wiki[:80]!r}: ids match ^[a-z0-9][a-z0-9._-]{{0,62}}$")
        return self.root / f"{wiki}.git"

    def exists(self, wiki: str) -> bool:
        """True when wiki ``wiki`` exists."""
        return WIKI_ID.match(wiki) is not None and (self.path(wiki) / "HEAD").exists()

    def ids(self) -> list[str]:
        """Every wiki id, sorted."""
        return sorted(p.name[: -len(".git")] for p in self.root.glob("*.git") if (p / "HEAD").exists())

    def opened(self, wiki: str) -> WikiRepo | None:
        """The repository of ``wiki`` if it is open already (no I/O), else None."""
        with self._lock:
            return self._open.get(wiki)

    def open(self, wiki: str) -> WikiRepo:
        """The repository of ``wiki``; ``WikiNotFound`` when there is none."""
        with self._lock:
            repo = self._open.get(wiki)
            if repo is not None:
                self._open.move_to_end(wiki)
                return repo
        if not self.exists(wiki):
            raise WikiNotFound(f"no wiki {wiki!r}; create it with POST /v1/wikis")
        with self._lock:
            repo = self._open.get(wiki)
            if repo is None:
                repo = WikiRepo(self.path(wiki))
                self._open[wiki] = repo
                while len(self._open) > self.max_open:
                    _, evicted = self._open.popitem(last=False)
                    evicted.close()
            return repo

    def create(
        self, wiki: str, author: Identity = SERVICE, files: Mapping[str, bytes] = INITIAL_FILES
    ) -> str:
        """Create wiki ``wiki`` with one initial commit of ``files``; ``WikiExists`` if it is there."""
        final = self.path(wiki)
        if final.exists():
            raise WikiExists(f"wiki {wiki!r} already exists")
        tmp = Path(tempfile.mkdtemp(prefix=f".{wiki}.", suffix=".tmp", dir=self.root))
        try:
            git.Repo.init(tmp, bare=True, mkdir=False, initial_branch="main").close()
            repo = WikiRepo(tmp)
            plan = Plan(
                changes={path: NewFile(object_id("blob", data), data) for path, data in files.items()}
            )
            commit = repo.commit_plan(plan, None, f"Create wiki {wiki}", author, committer=SERVICE)
            repo.close()
            try:
                os.rename(tmp, final)
            except OSError:
                raise WikiExists(f"wiki {wiki!r} already exists") from None
            fsync_dir(self.root)
            return commit
        finally:
            if tmp.exists():
                subprocess.run(["rm", "-rf", str(tmp)], check=False)

    def close(self) -> None:
        """Close every open repository."""
        with self._lock:
            for repo in self._open.values():
                repo.close()
            self._open.clear()
