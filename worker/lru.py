"""``Lru``: a thread-safe mapping by string key that drops its least recently used values first, bounded by
their total weight (one a value unless told otherwise).

The process's caches of things named by content (parsed trees, file indexes, pack infos, parsed links)
are all this one shape; what they differ in is only what a value weighs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

V = TypeVar("V")


def _one(_: object) -> int:
    return 1


class Lru(Generic[V]):
    """Values by key, at most ``capacity`` in total ``weight``; the least recently read or put go first,
    though the last one put always stays. Thread-safe."""

    def __init__(self, capacity: int, weight: Callable[[V], int] = _one) -> None:
        self.capacity = capacity
        self.weight = weight
        self.items: OrderedDict[str, V] = OrderedDict()
        self.held = 0  # the total weight of ``items``
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.items)

    def get(self, key: str) -> V | None:
        """The value at ``key`` (now the most recently used), or None."""
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def put(self, key: str, value: V) -> None:
        """Keep ``value`` at ``key`` as the most recently used, dropping the least recently used values
        while the total weight is over ``capacity``."""
        with self.lock:
            old = self.items.pop(key, None)
            if old is not None:
                self.held -= self.weight(old)
            self.items[key] = value
            self.held += self.weight(value)
            while self.held > self.capacity and len(self.items) > 1:
                _, dropped = self.items.popitem(last=False)
                self.held -= self.weight(dropped)

    def demote(self, keys: Iterable[str]) -> None:
        """Make the values at ``keys`` the next to go."""
        with self.lock:
            for key in keys:
                if key in self.items:
                    self.items.move_to_end(key, last=False)

    def forget(self, key: str) -> None:
        """Drop the value at ``key``, if any."""
        with self.lock:
            old = self.items.pop(key, None)
            if old is not None:
                self.held -= self.weight(old)

    def clear(self) -> None:
        """Drop every value."""
        with self.lock:
            self.items.clear()
            self.held = 0
