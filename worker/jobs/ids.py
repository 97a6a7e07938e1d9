"""What names a job and where it runs: job ids (ULIDs, sorting in acceptance order) and a wiki's partition."""

from __future__ import annotations

import hashlib
import os
import threading
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class _Ulid:
    """ULIDs, monotonic within a process so ids sort in acceptance order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_ms = 0
        self.last_rand = 0

    def new(self) -> str:
        with self.lock:
            ms = int(time.time() * 1000)
            if ms <= self.last_ms:
                ms, rand = self.last_ms, self.last_rand + 1
            else:
                rand = int.from_bytes(os.urandom(10), "big") >> 1
            self.last_ms, self.last_rand = ms, rand
        value = (ms << 80) | rand
        return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


new_job_id = _Ulid().new


def partition_of(wiki: str, partitions: int) -> int:
    """The partition that serialises wiki ``wiki``: a stable hash, the same in every process."""
    return int.from_bytes(hashlib.sha256(wiki.encode()).digest()[:8], "big") % partitions
