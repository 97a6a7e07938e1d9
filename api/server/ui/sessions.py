"""Browser sessions of the status page: a random session id in the cookie, the token's digest in Redis.

The cookie never holds the API token: it holds a random id whose SHA-256 names a Redis key holding the
SHA-256 of the token that signed in. Each request looks the token up in the current tokens file again, so
removing a token from the file ends its sessions at once. Sessions expire after ``SESSION_SECONDS``.
"""

from __future__ import annotations

import hashlib
import secrets

from redis.asyncio import Redis
from redis.exceptions import RedisError

from api.server.auth import Authenticator, Principal
from worker import keys

SESSION_SECONDS = 12 * 3600


_key = keys.ui_session


class Sessions:
    """Creates and resolves status-page sessions."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def create(self, token: str) -> str:
        """A new session for the holder of ``token`` (already authenticated); the id for the cookie."""
        session_id = secrets.token_urlsafe(32)
        digest = hashlib.sha256(token.encode()).hexdigest()
        await self.redis.set(_key(session_id), digest, ex=SESSION_SECONDS)
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
        """Forget a session (sign-out)."""
        if session_id:
            await self.redis.delete(_key(session_id))
