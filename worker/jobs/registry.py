"""The registry of remote-backed wikis, in Redis: which remote each one lives in, and its current head.

Workers and API processes of a deployment may have no filesystem in common; what they share about a wiki
kept in a git remote is two hashes: ``wikiq:wikis`` (wiki id -> JSON: remote, when attached, problems),
written once at attach, and ``wikiq:wiki-heads`` (wiki id -> ``"<commit> <published ms>"``). The writer of a
wiki (the holder of its partition's lease) sets the head after every publish and after every fetch that
finds the remote moved; reads serve the head named here. The update is fenced by the lease, so a writer that
lost its partition cannot move the head back.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, Field
from redis.asyncio import Redis

from worker import keys
from worker.jobs.scripts import Call, Script, arg, key


class WikiEntry(BaseModel):
    """A remote-backed wiki: its remote's name, the branch's head as last seen, when it was last published,
    and problems found in its tree (paths wikiq refuses, files outside the zones, links and submodules)
    at attach and after each fetch that brought someone else's commits."""

    remote: str
    head: str | None = None
    attached_ms: int
    published_ms: int | None = None
    problems: list[str] = Field(default_factory=list)


@dataclass
class SetHead(Call):
    """Set ``wiki``'s head in the heads hash as ``"<commit> <published ms>"`` (the published time kept
    when ``published_ms`` is ''), only while ``owner`` holds ``lease`` ('' = unchecked): 1 set, 0 not."""

    heads: str = key()
    lease: str = key()
    wiki: str = arg()
    head: str = arg()
    published_ms: str = arg()
    owner: str = arg()


SET_HEAD = Script(
    SetHead,
    body="""
if A.owner ~= '' and redis.call('GET', K.lease) ~= A.owner then return 0 end
local value = A.head
if A.published_ms == '' then
  local old = redis.call('HGET', K.heads, A.wiki)
  local published = old and string.match(old, ' (%d+)$')
  if published then value = value .. ' ' .. published end
else
  value = value .. ' ' .. A.published_ms
end
redis.call('HSET', K.heads, A.wiki, value)
return 1
""",
)


def _head(raw: bytes | str | None) -> tuple[str | None, int | None]:
    if raw is None:
        return None, None
    text = raw.decode() if isinstance(raw, bytes) else raw
    commit, _, published = text.partition(" ")
    return commit or None, int(published) if published else None


class WikiRegistry:
    """Reads and writes ``wikiq:wikis``."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def get(self, wiki: str) -> WikiEntry | None:
        """The entry of ``wiki``, or None when it is not remote-backed (or does not exist)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.WIKIS, wiki)
            pipe.hget(keys.WIKI_HEADS, wiki)
            raw, head = await pipe.execute()
        if raw is None:
            return None
        entry = WikiEntry.model_validate_json(raw)
        entry.head, entry.published_ms = _head(head)
        return entry

    async def all(self) -> dict[str, WikiEntry]:
        """Every remote-backed wiki."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.WIKIS)
            pipe.hgetall(keys.WIKI_HEADS)
            found, heads = await pipe.execute()
        out: dict[str, WikiEntry] = {}
        for name, raw in found.items():
            wiki = name.decode() if isinstance(name, bytes) else name
            entry = out[wiki] = WikiEntry.model_validate_json(raw)
            entry.head, entry.published_ms = _head(heads.get(name))
        return out

    async def attach(self, wiki: str, entry: WikiEntry) -> bool:
        """Register ``wiki`` with its head; False when an entry exists already (nothing changed)."""
        static = entry.model_dump_json(exclude={"head", "published_ms"})
        if not await cast(Awaitable[int], self.redis.hsetnx(keys.WIKIS, wiki, static)):
            return False
        if entry.head is not None:
            await self.set_head(wiki, entry.head, published_ms=entry.published_ms)
        return True

    async def set_head(
        self,
        wiki: str,
        head: str,
        *,
        published_ms: int | None = None,
        partition: int = 0,
        owner: str | None = None,
    ) -> bool:
        """Set the head of ``wiki`` (and, after a publish, when); with ``owner``, only while ``owner`` still
        holds ``partition``'s lease. False when the lease check refused."""
        published = "" if published_ms is None else str(published_ms)
        call = SetHead(keys.WIKI_HEADS, keys.lease(partition), wiki, head, published, owner or "")
        return bool(await SET_HEAD.run(self.redis, call))

    async def update(self, wiki: str, entry: WikiEntry) -> None:
        """Rewrite the entry of ``wiki`` (its attacher, once the clone is done), head included."""
        await cast(
            Awaitable[int],
            self.redis.hset(keys.WIKIS, wiki, entry.model_dump_json(exclude={"head", "published_ms"})),
        )
        if entry.head is not None:
            await self.set_head(wiki, entry.head, published_ms=entry.published_ms)

    async def set_problems(self, wiki: str, problems: list[str]) -> None:
        """Replace the problems recorded for ``wiki`` (its writer, after its tree was checked again);
        nothing when ``wiki`` is not registered."""
        raw = await cast(Awaitable[Any], self.redis.hget(keys.WIKIS, wiki))
        if raw is None:
            return
        entry = WikiEntry.model_validate_json(raw).model_copy(update={"problems": problems})
        static = entry.model_dump_json(exclude={"head", "published_ms"})
        await cast(Awaitable[int], self.redis.hset(keys.WIKIS, wiki, static))

    async def forget(self, wiki: str) -> None:
        """Remove ``wiki`` from the registry (an attach that failed)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.WIKIS, wiki)
            pipe.hdel(keys.WIKI_HEADS, wiki)
            await pipe.execute()
