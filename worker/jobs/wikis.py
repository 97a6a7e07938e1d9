"""Every wiki a process can serve: local ones in its data directory, and those whose system of record is
a git remote (CONTRACT section 6), through the Redis registry and a local cache.

A remote-backed wiki has, in each process that touches it, a bare cache ``<data>/wikis/<id>.git`` cloned on
first use; nothing but Redis and the remote is shared, so workers and API processes may have separate data
directories. Reads serve the head the registry names (the cache fetches when it lacks that commit) and
never move the cache's ``main``: only the wiki's writer does that, after a publish or a fetch (see
``worker.jobs.targets``), so a data directory shared by an API process and a worker stays consistent.

Attaching (``attach``) takes an operator-declared remote by name: an empty remote branch gets the initial
commit pushed, a non-empty one is taken as it is and its tree is checked (paths wikiq refuses, files
outside the zones, symbolic links and submodules are recorded as ``problems``, shown by ``wikiq doctor``
and ``/ui``); the check runs again whenever a publish or a fetch brings commits someone else pushed
(``note_head``). If an attach fails, nothing is left behind: no registry entry, no cache.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from worker.engine import NewFile, Plan
from worker.engine.paths import DEFAULT_POLICY, ZonePolicy, path_problem
from worker.errors import BatchRejected, WikiExists, WikiNotFound
from worker.git import INITIAL_FILES, SERVICE, GitStore, WikiRepo, object_id
from worker.git.objects import TREE_MODE
from worker.git.policy import policy_for
from worker.git.remote import (
    Accepted,
    Moved,
    Remote,
    RemoteRegistry,
    RemoteRejected,
    RemoteUnavailable,
    clone_or_init_cache,
    fetch,
    push_cas,
)
from worker.git.remote.errors import RemoteNotFound
from worker.git.warmup import warm
from worker.jobs.clock import now_ms
from worker.jobs.registry import WikiEntry, WikiRegistry

MAX_PROBLEMS = 50


@dataclass(frozen=True)
class Head:
    """A wiki ready to read: its repository (or cache), the commit reads serve, and its registry entry."""

    repo: WikiRepo
    commit: str | None
    entry: WikiEntry | None


@dataclass(frozen=True)
class Target:
    """A wiki as a submission sees it: the zone policy its batches are checked against, and its head."""

    policy: ZonePolicy
    commit: str | None


_SYMLINK_MODE = 0o120000
_GITLINK_MODE = 0o160000  # a submodule's entry


def tree_problems(repo: WikiRepo, commit: str | None) -> list[str]:
    """What in the tree at ``commit`` wikiq would refuse to write or cannot serve: bad paths, files outside
    the zones, symbolic links and submodules (listed by git, read by nobody here); at most
    ``MAX_PROBLEMS``."""
    if commit is None:
        return []
    problems: list[str] = []

    def walk(tree_id: str, base: str) -> bool:
        for name, (mode, oid) in repo.tree(tree_id).items():
            path = base + name
            if mode == TREE_MODE:
                if not walk(oid, path + "/"):
                    return False
                continue
            if mode == _GITLINK_MODE:
                problems.append(f"{path!r}: a submodule, which wikiq does not serve")
            elif mode == _SYMLINK_MODE:
                problems.append(f"{path!r}: a symbolic link, which wikiq does not serve")
            elif (problem := path_problem(path)) is not None:
                problems.append(f"{path!r}: {problem}")
            else:
                try:
                    DEFAULT_POLICY.check("create", path, None)
                except BatchRejected as exc:
                    problems.append(f"{path!r}: {exc.message}")
            if len(problems) >= MAX_PROBLEMS:
                problems.append("... and more")
                return False
        return True

    walk(repo.tree_of(commit), "")
    return problems


class Wikis:
    """Local and remote-backed wikis of one process (see the module)."""

    def __init__(self, store: GitStore, registry: WikiRegistry, remotes: RemoteRegistry) -> None:
        self.store = store
        self.registry = registry
        self.remotes = remotes
        self._fetching: dict[str, asyncio.Lock] = {}
        self._local: set[str] = set()  # wikis known to be local: they stay so (no remote is ever attached
        # to an existing id), so they cost no registry lookup again

    async def entry(self, wiki: str) -> WikiEntry | None:
        """The registry entry of ``wiki`` when it is remote-backed, else None."""
        if wiki in self._local:
            return None
        entry = await self.registry.get(wiki)
        if entry is None and self.store.exists(wiki):
            # an attach registers the id before its cache exists, so a repository without an entry is local
            self._local.add(wiki)
        return entry

    async def ids(self) -> list[str]:
        """Every wiki: local ones and remote-backed ones, sorted."""
        remote = await self.registry.all()
        return sorted(set(self.store.ids()) | set(remote))

    async def exists(self, wiki: str) -> bool:
        """True when ``wiki`` is a local wiki or a remote-backed one."""
        return self.store.exists(wiki) or await self.entry(wiki) is not None

    def remote(self, entry: WikiEntry) -> Remote:
        """The declared remote of ``entry``; ``REMOTE_NOT_FOUND`` when the operator no longer declares it."""
        return self.remotes.lookup(entry.remote)

    async def cache(self, wiki: str, entry: WikiEntry) -> WikiRepo:
        """The local cache of a remote-backed wiki, cloned now if this process has none."""
        repo = self.store.opened(wiki)
        if repo is not None:
            return repo
        if not self.store.exists(wiki):
            remote = self.remote(entry)
            await anyio.to_thread.run_sync(lambda: clone_or_init_cache(self.store.path(wiki), remote))
        return await anyio.to_thread.run_sync(lambda: self.store.open(wiki))

    async def target(self, wiki: str) -> Target:
        """What a submission to ``wiki`` needs, without reading its tree: its zone policy and the head it is
        submitted on (a remote-backed wiki's cache is neither cloned nor fetched: the worker checks the
        batch on the branch's head). ``WIKI_NOT_FOUND`` when there is no such wiki."""
        entry = await self.entry(wiki)
        if entry is not None:
            return Target(policy_for(self.store.path(wiki)), entry.head)
        repo = self.store.opened(wiki)
        if repo is None:
            repo = await anyio.to_thread.run_sync(lambda: self.store.open(wiki))
        return Target(policy_for(repo.path), repo.head())

    async def head(self, wiki: str) -> Head:
        """``wiki`` ready to read at its head: for a remote-backed one, the head the registry names, fetched
        into the cache when the cache lacks it; ``WIKI_NOT_FOUND`` when there is no such wiki."""
        entry = await self.entry(wiki)
        if entry is None:
            repo = self.store.opened(wiki)
            if repo is None:
                repo = await anyio.to_thread.run_sync(lambda: self.store.open(wiki))
            head = repo.head()
            warm(repo, head)  # first opened: its indexes are built in the background (once per repo)
            return Head(repo, head, None)
        repo = await self.cache(wiki, entry)
        if entry.head is not None and not repo.has_object(entry.head):
            lock = self._fetching.setdefault(wiki, asyncio.Lock())
            async with lock:
                if not repo.has_object(entry.head):
                    remote = self.remote(entry)
                    await anyio.to_thread.run_sync(lambda: fetch(repo.path, remote))
            if not repo.has_object(entry.head):
                raise RemoteUnavailable(
                    f"remote {entry.remote!r} no longer has the head {entry.head[:12]}; try again shortly",
                    kind="not_found",
                )
        warm(repo, entry.head)  # once the cache holds the head
        return Head(repo, entry.head, entry)

    async def note_head(
        self,
        wiki: str,
        repo: WikiRepo,
        entry: WikiEntry,
        head: str,
        ours: int,
        *,
        published_ms: int | None,
        partition: int,
        owner: str | None,
    ) -> None:
        """Record ``head`` as ``wiki``'s head after a publish or a fetch (fenced by ``owner``'s lease), and
        check its tree for problems again when commits other than wikiq's came with it: when the commit
        ``ours`` first parents below ``head`` (the head our ``ours`` commits were built on) is not the head
        ``entry`` had. wikiq's own commits never add or remove a problem, so they cost no tree walk."""
        moved = await self.registry.set_head(
            wiki, head, published_ms=published_ms, partition=partition, owner=owner
        )
        if not moved or head == entry.head:
            return

        def check() -> list[str] | None:
            base: str | None = head
            for _ in range(ours):
                parents = repo.commit_info(base).parents if base is not None else []
                base = parents[0] if parents else None
            return None if base == entry.head else tree_problems(repo, head)

        problems = await anyio.to_thread.run_sync(check)
        if problems is not None and problems != entry.problems:
            await self.registry.set_problems(wiki, problems)

    async def attach(self, wiki: str, remote_name: str) -> WikiEntry:
        """Attach ``wiki`` to the declared remote ``remote_name`` (see the module); its registry entry.

        ``WIKI_EXISTS`` when the id is taken, ``REMOTE_NOT_FOUND`` for an unknown remote,
        ``REMOTE_UNAVAILABLE`` when it cannot be reached or refuses the credentials, ``REMOTE_REJECTED``
        when it refuses the initial commit.
        """
        remote = self.remotes.lookup(remote_name)
        if self.store.exists(wiki):
            raise WikiExists(f"wiki {wiki!r} already exists")
        claim = WikiEntry(remote=remote.name, attached_ms=now_ms())
        if not await self.registry.attach(wiki, claim):
            raise WikiExists(f"wiki {wiki!r} already exists")
        try:
            entry = await anyio.to_thread.run_sync(lambda: self._clone(wiki, remote, claim))
        except BaseException:
            await self.registry.forget(wiki)
            raise
        await self.registry.update(wiki, entry)
        repo = await anyio.to_thread.run_sync(lambda: self.store.open(wiki))
        warm(repo, entry.head)  # the indexes are built now, in the background, not by the first read
        return entry

    def _clone(self, wiki: str, remote: Remote, claim: WikiEntry) -> WikiEntry:
        """Make the cache under a temporary name, push the initial commit to an empty branch, move it in."""
        final = self.store.path(wiki)
        work = Path(tempfile.mkdtemp(prefix=f".attach-{wiki}.", dir=self.store.root))
        cache = work / "cache.git"
        try:
            head = clone_or_init_cache(cache, remote)
            repo = WikiRepo(cache)
            try:
                if head is None:
                    head = self._initial_commit(repo, wiki, remote)
                repo.move_main(None, head)
                problems = tree_problems(repo, head)
            finally:
                repo.close()
            if final.exists():
                raise WikiExists(f"wiki {wiki!r} already exists")
            cache.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return claim.model_copy(update={"head": head, "problems": problems})

    @staticmethod
    def _initial_commit(repo: WikiRepo, wiki: str, remote: Remote) -> str:
        """Push the initial commit (index.md, log.md, schema.md) to the empty branch; the branch's head."""
        plan = Plan(changes={p: NewFile(object_id("blob", d), d) for p, d in INITIAL_FILES.items()})
        commit = repo.write_commit(plan, None, f"Create wiki {wiki}", SERVICE)
        result = push_cas(repo.path, remote, commit, None)
        if isinstance(result, Accepted):
            return commit
        if isinstance(result, Moved):  # someone created the branch meanwhile: take it as it is
            head = fetch(repo.path, remote)
            if head is not None:
                return head
        reason = getattr(result, "reason", "the branch kept changing")
        raise RemoteRejected(f"remote {remote.name!r} refused the initial commit: {reason}")


__all__ = ["Head", "RemoteNotFound", "WikiNotFound", "Wikis", "tree_problems"]
