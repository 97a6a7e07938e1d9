"""``worker.lru.Lru``: the bounded cache behind the process's tree, file-index, pack-info and link caches."""

from __future__ import annotations

from worker.lru import Lru


def test_drops_the_least_recently_used_first() -> None:
    cache: Lru[str] = Lru(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # now "b" is the least recently used
    cache.put("c", "C")
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c"), len(cache)) == ("A", "C", 2)


def test_bounded_by_weight_but_keeps_the_last_put() -> None:
    cache: Lru[list[int]] = Lru(5, len)
    cache.put("three", [1, 2, 3])
    cache.put("two", [1, 2])
    assert cache.held == 5
    cache.put("four", [1, 2, 3, 4])  # the two before it go
    assert (cache.get("three"), cache.get("two"), cache.held) == (None, None, 4)
    cache.put("nine", list(range(9)))  # over the bound alone: kept, as the only value
    assert (len(cache), cache.held) == (1, 9)


def test_put_again_replaces_and_reweighs() -> None:
    cache: Lru[list[int]] = Lru(10, len)
    cache.put("a", [1, 2, 3])
    cache.put("a", [1])
    assert (cache.get("a"), cache.held, len(cache)) == ([1], 1, 1)


def test_demote_forget_and_clear() -> None:
    cache: Lru[str] = Lru(2)
    cache.put("a", "A")
    cache.put("b", "B")
    cache.demote(["b", "unknown"])
    cache.put("c", "C")  # "b" was made the next to go
    assert (cache.get("a"), cache.get("b")) == ("A", None)
    cache.forget("a")
    cache.forget("a")
    assert (cache.get("a"), cache.held) == (None, 1)
    cache.clear()
    assert (len(cache), cache.held, cache.get("c")) == (0, 0, None)
