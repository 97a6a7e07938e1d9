"""Rolling packs up in the commit itself: which earlier packs a commit's pack absorbs.

Each commit writes one pack. Left alone they pile up (one per commit) and every reopening, every missing
object and every ``git`` reader pays for each of them. Instead, a commit's pack also carries, copied byte
for byte, the entries of the small packs it absorbs; once the commit is durable and on ``main`` those packs
are deleted (by a background thread: ``PackCache.retire``). The commit does the copying itself and nothing
waits for an idle moment, so the bound holds under continuous load; the cost is a copy of bytes already
compressed (no inflate, no delta search, the CRCs taken from the absorbed pack's index).

Which packs: size-tiered, like an LSM tree's compaction. A pack's tier is ``floor(log8(size / 16 KiB)) + 1``
(0 below 16 KiB); when a commit's pack would be the ``ROLLUP_FANOUT``-th (8th) in its tier, it absorbs the
other seven and moves up, possibly again. Each tier then holds at most seven packs, and a byte is copied at
most once per tier. Only packs of at most ``ROLLUP_MAX_BYTES`` (1 MiB) whose entries are all whole objects
(wikiq's own; git's repacks hold deltas, whose offsets would not survive a copy) and that git does not keep
(``.keep``) or use as a cruft pack (``.mtimes``) are candidates; bigger ones are left to git's geometric
repack (``worker.git.maintenance``), which deltifies them in the background. The tiers stop at 1 MiB
because every tier costs a copy of every byte (and its flush, and its deletion later): on a 100 000-page
wiki a commit writes ~80 KB of trees, so two tiers up to 1 MiB already cost twice its own bytes.

The fan-out is eight, not four, for what git has to do behind the roll-up: each byte is copied fewer
times, and packs past 1 MiB come a quarter as often, so the background repack that merges them keeps up
with a steady stream of commits on a large wiki instead of leaving the commits to hold ``MAX_PACKS`` by
copying megabytes.

Bound (``MAX_PACKS`` = 32, enforced at every commit, on the writer's view of ``objects/pack``: kept in
memory across commits, see ``PackReader``): at most seven packs per tier below 1 MiB (3 tiers: 21) plus
the big packs git keeps in a geometric progression. If a wiki still has more than ``MAX_PACKS``
packs (git's repacks have not kept up with a stream of big commits), the commit also absorbs the smallest
undeltified packs up to ``HARD_ROLLUP_MAX_BYTES``, whatever their tier, until it is back within the bound;
only packs git deltified (kept logarithmic in number by its geometric repack) are beyond its reach.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from worker.git.packs import WHOLE_CHECK_MAX_BYTES, PackInfo

ROLLUP_FANOUT = 8
ROLLUP_FLOOR = 16 * 1024  # tier 0: packs below this size
ROLLUP_MAX_BYTES = 1 << 20  # bigger packs are git's to repack (with deltas), unless over MAX_PACKS
MAX_PACKS = 32  # packs per wiki, enforced at every commit (see the module)
HARD_ROLLUP_MAX_BYTES = WHOLE_CHECK_MAX_BYTES  # the biggest pack a commit absorbs to stay within MAX_PACKS
PACK_OVERHEAD = 12 + 20  # a pack's header and trailing checksum, around its entries


def pack_size(entries: list[tuple[bytes, bytes]]) -> int:
    """The size of a pack made of ``entries`` (``(oid, raw entry)``)."""
    return PACK_OVERHEAD + sum(len(raw) for _, raw in entries)


_FANOUT_BITS = ROLLUP_FANOUT.bit_length() - 1  # the fan-out is a power of two: a tier is that many bits
assert 1 << _FANOUT_BITS == ROLLUP_FANOUT


def tier(size: int) -> int:
    """The tier of a pack of ``size`` bytes: 0 below ``ROLLUP_FLOOR``, then one more per factor of
    ``ROLLUP_FANOUT``."""
    return ((max(0, size) // ROLLUP_FLOOR).bit_length() + _FANOUT_BITS - 1) // _FANOUT_BITS


def candidates(
    packs: Mapping[str, PackInfo], pinned: Set[str], limit: int = ROLLUP_MAX_BYTES
) -> dict[str, PackInfo]:
    """The packs a commit may absorb: up to ``limit`` bytes, undeltified, not git's kept or cruft packs."""
    return {
        name: info
        for name, info in packs.items()
        if name not in pinned and info.nbytes <= limit and info.whole
    }


def choose(packs: Mapping[str, PackInfo], pinned: Set[str], new_size: int) -> list[str]:
    """The packs (by name) a new pack of ``new_size`` bytes absorbs, among a repository's ``packs`` (each
    absorbed pack adds its entries, not its header and checksum)."""
    free = candidates(packs, pinned, HARD_ROLLUP_MAX_BYTES)
    chosen: list[str] = []
    size = new_size
    while True:
        level = tier(size)
        same = [
            n for n, info in free.items() if info.nbytes <= ROLLUP_MAX_BYTES and tier(info.nbytes) == level
        ]
        if size <= ROLLUP_MAX_BYTES and len(same) + 1 >= ROLLUP_FANOUT:
            take = same  # the tier is full: absorb it and move up
        elif len(packs) - len(chosen) + 1 > MAX_PACKS and free:
            take = [min(free, key=lambda n: free[n].nbytes)]  # over the bound: the smallest, any size
        else:
            return chosen
        for name in take:
            size += free.pop(name).nbytes - PACK_OVERHEAD
            chosen.append(name)
