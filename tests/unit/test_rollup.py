"""The roll-up policy (``worker.git.rollup.choose``) on simulated commit streams, without any file."""

from __future__ import annotations

import random
from collections import Counter

from worker.git.maintenance import GIT_REPACK_AT
from worker.git.packs import PackInfo
from worker.git.rollup import (
    MAX_PACKS,
    PACK_OVERHEAD,
    ROLLUP_FANOUT,
    ROLLUP_MAX_BYTES,
    candidates,
    choose,
    tier,
)


def commit(packs: dict[str, PackInfo], name: str, size: int) -> int:
    """Apply one commit of ``size`` bytes of its own to ``packs``; the bytes it copied."""
    chosen = choose(packs, set(), size)
    copied = sum(packs[n].nbytes - PACK_OVERHEAD for n in chosen)
    for n in chosen:
        del packs[n]
    packs[name] = PackInfo(size + copied, whole=True)
    return copied


def test_tiers_bound_the_count_and_the_copying_for_every_commit_size() -> None:
    """3000 commits of 200 B to 300 KB (git's repack merging the big packs as it would): never more than
    ROLLUP_FANOUT - 1 small packs per tier nor MAX_PACKS in all, and each byte copied at most once per
    tier below ROLLUP_MAX_BYTES."""
    rng = random.Random(5)
    packs = {"initial": PackInfo(20 << 20, whole=False)}  # a big deltified pack, as git leaves one
    written = copied = 0
    for n in range(3000):
        size = rng.choice([200, 600, 2_000, 40_000, 80_000, 300_000])
        written += size
        copied += commit(packs, f"c{n}", size)
        big = [name for name, info in packs.items() if not info.whole or info.nbytes > ROLLUP_MAX_BYTES]
        if len(big) >= GIT_REPACK_AT:  # what the background git repack does with them: one deltified pack
            packs[f"git{n}"] = PackInfo(sum(packs.pop(name).nbytes for name in big) // 4, whole=False)
        small = Counter(tier(p.nbytes) for p in candidates(packs, set()).values())
        assert max(small.values(), default=0) <= ROLLUP_FANOUT - 1, small
        assert len(packs) <= MAX_PACKS
    assert copied <= written * (tier(ROLLUP_MAX_BYTES) + 1)


def test_the_bound_reaches_past_the_tiers_but_never_to_deltified_or_kept_packs() -> None:
    """40 packs of 2 MiB (past the tiers): a commit absorbs the smallest until it is within MAX_PACKS;
    deltified packs and pinned ones (.keep, cruft) are never taken."""
    packs = {f"big{n}": PackInfo((2 << 20) + n, whole=True) for n in range(40)}
    packs |= {"git": PackInfo(100, whole=False), "kept": PackInfo(100, whole=True)}
    chosen = choose(packs, {"kept"}, 500)
    assert "git" not in chosen and "kept" not in chosen
    assert len(packs) - len(chosen) + 1 == MAX_PACKS
    assert chosen == [f"big{n}" for n in range(len(chosen))]  # the smallest first


def test_a_lone_commit_absorbs_nothing() -> None:
    """Below ROLLUP_FANOUT packs in its tier, a commit's pack stands alone; the one that fills the tier
    absorbs the others."""
    packs = {f"p{n}": PackInfo(1000 + n, whole=True) for n in range(ROLLUP_FANOUT - 2)}
    assert choose(packs, set(), 900) == []
    packs["last"] = PackInfo(800, whole=True)
    assert sorted(choose(packs, set(), 900)) == sorted(packs)
