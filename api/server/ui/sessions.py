"""Browser sessions of the status page: a random session id in the cookie, the token's digest in Redis.

The cookie never holds the API token: it holds a random id whose SHA-256 names a Redis key holding the
SHA-256 of the token that signed in. Each request looks the token up in the current tokens file again, so
removing a token from the file ends its sessions at once. Sessions expire after ``SESSION_SECONDS``, and
one token keeps at most ``per_token`` of them: a new one ends the token's oldest (``keys.ui_sessions_of``
lists them).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from api.server.auth import Authenticator, Principal
from worker import keys
from worker.jobs.scripts import Call, Script, arg, key

SESSION_SECONDS = 12 * 3600


_key = keys.ui_session


@dataclass
class StartSession(Call):
    """Store a session (``session``: the token's ``digest`` for ``ttl`` seconds) and list it among its
    token's (``listed``, by creation ms ``now``), forgetting those created before ``cutoff`` (expired) and
    ending the oldest beyond ``keep``."""

    session: str = key()
    listed: str = key()
    digest: str = arg()
    ttl: int = arg()
    now: int = arg()
    cutoff: int = arg()
    keep: int = arg()


# the sessions ended here are named by the list's members (session keys), not passed as keys
START = Script(
    StartSession,
    body="""
redis.call('SET', K.session, A.digest, 'EX', A.ttl)
redis.call('ZADD', K.listed, A.now, K.session)
redis.call('ZREMRANGEBYSCORE', K.listed, '-inf', A.cutoff)
local extra = redis.call('ZCARD', K.listed) - tonumber(A.keep)
if extra > 0 then
  for _, old in ipairs(redis.call('ZRANGE', K.listed, 0, extra - 1)) do redis.call('DEL', old) end
  redis.call('ZREMRANGEBYRANK', K.listed, 0, extra - 1)
end
redis.call('EXPIRE', K.listed, A.ttl)
return 1
""",
)


class Sessions:
    """Creates and resolves status-page sessions, at most ``per_token`` per token."""

    def __init__(self, redis: Redis, per_token: int = 32) -> None:
        self.redis = redis
        self.per_token = per_token

    async def create(self, token: str) -> str:
        """A new session for the holder of ``token`` (already authenticated); the id for the cookie. The
        token's oldest session ends when it would have more than ``per_token``."""
        session_id = secrets.token_urlsafe(32)
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = int(time.time() * 1000)
        call = StartSession(
            session=_key(session_id),
            listed=keys.ui_sessions_of(digest),
            digest=digest,
            ttl=SESSION_SECONDS,
            now=now,
            cutoff=now - SESSION_SECONDS * 1000,
            keep=self.per_token,
        )
        await START.run(self.redis, call)
        return session_id

    async def principal(self, session_id: str | None, auth: Authenticator) -> Principal | None:
        """The principal of a session, or None when it is unknown, expired or its token was revoked."""
        if not session_id or len(session_id) > 128:
            return None
        try:
            raw = await self.redis.get(_key(session_id))
        except RedisError:
            return None
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        try:
            digest = bytes.fromhex(text)
        except ValueError:
            return None
        return auth.by_digest(digest)

    async def end(self, session_id: str | None) -> None:
        """Forget a session (sign-out), and take it off its token's list."""
        if not session_id or len(session_id) > 128:
            return
        session = _key(session_id)
        digest = await self.redis.get(session)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(session)
            if digest is not None:
                text = digest.decode() if isinstance(digest, bytes) else str(digest)
                pipe.zrem(keys.ui_sessions_of(text), session)
            await pipe.execute()
