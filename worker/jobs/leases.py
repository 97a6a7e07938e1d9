"""A partition lease as the worker holding it knows it: the partition, its epoch, and whether it was lost.

Every grant of a partition's lease raises the partition's epoch counter (``keys.lease_epoch``) in the same
script that sets the lease, so the epoch is a fencing token: a run of an older epoch than the partition's
current one is a run of a worker that was paused past its lease while another took over. Every finish
script compares the run's epoch with the current one and refuses a stale run's write (``worker.errors.
Fenced``); ``main.lock`` carries the epoch too (``worker.git.refs``). A worker that sees its lease lost sets
``lost``: its job in flight stops at the next safe point (before a ref swap, before recording) and records
nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from worker import keys
from worker.errors import Fenced
from worker.jobs.scripts import Call, Script, arg, key


@dataclass
class Grant(Call):
    """Grant the free ``lease`` to ``owner`` for ``ms`` and raise the partition's epoch counter: the new
    epoch, or 0 when the lease is taken."""

    lease: str = key()
    epoch_key: str = key()
    owner: str = arg()
    ms: int = arg()


GRANT = Script(
    Grant,
    body="""
if redis.call('SET', K.lease, A.owner, 'NX', 'PX', A.ms) then return redis.call('INCR', K.epoch_key) end
return 0
""",
)


@dataclass
class Release(Call):
    """Delete ``lease`` only while it is still ``owner``'s (``RELEASE``); 0 when it is not."""

    lease: str = key()
    owner: str = arg()


@dataclass
class Renew(Release):
    """Renew ``lease`` for ``ms`` only while it is still ``owner``'s (``RENEW``); 0 when it is not."""

    ms: int = arg()


RENEW = Script(
    Renew,
    body="""
if redis.call('GET', K.lease) == A.owner then return redis.call('PEXPIRE', K.lease, A.ms) end
return 0
""",
)
RELEASE = Script(
    Release,
    body="""
if redis.call('GET', K.lease) == A.owner then return redis.call('DEL', K.lease) end
return 0
""",
)

# the Lua prelude of every script a lease fences: true when ``epoch`` ('' = not fenced) is older than the
# partition's current epoch stored under ``key``; such a script then changes nothing and replies REFUSED
FENCED = """
local function fenced(key, epoch)
  return epoch ~= '' and tonumber(redis.call('GET', key) or '0') > tonumber(epoch)
end
"""


REFUSED = -1  # what a fenced script replies (``Fenced`` for its caller)


@dataclass(frozen=True)
class Lease:
    """The lease of ``partition`` granted at ``epoch``; ``lost`` is set (from any thread) once the holder
    knows it no longer holds it."""

    partition: int
    epoch: int
    lost: threading.Event = field(default_factory=threading.Event, compare=False)

    def check(self) -> None:
        """Raise ``Fenced`` once the lease is known lost: a safe point of a run stops there."""
        if self.lost.is_set():
            raise Fenced(f"partition {self.partition}: lease of epoch {self.epoch} lost")


def fence_of(lease: Lease | None, partition: int) -> tuple[str, str]:
    """The epoch key and the epoch a script is fenced by: the lease's, or, with no lease (a job function
    called directly, as tests do), ``partition``'s key and ``''``, which the script reads as "not fenced"."""
    if lease is None:
        return keys.lease_epoch(partition), ""
    return keys.lease_epoch(lease.partition), str(lease.epoch)
