"""Search benchmark: literal, case-insensitive search of the head of a 10 000-page wiki (git grep)."""

from __future__ import annotations

import statistics
import time

from bench.report import Context, Row
from bench.wikis import Layout, build_bare
from worker.git import GitStore
from worker.git.search import search

QUERIES = {
    "rare": "Revision 0 of page 9876.",  # one page
    "common": "revision",  # every page: stops at the limit
    "absent": "no such phrase anywhere",  # reads everything, finds nothing
}


def section(ctx: Context) -> list[Row]:
    """Median time of a search of the head of a 10 000-page wiki: a rare, a common, an absent phrase."""
    layout = Layout("nested", 2000 if ctx.quick else 10_000)
    build_bare(ctx.workdir / "search", "search", layout)
    store = GitStore(ctx.workdir / "search")
    repo = store.open("search")
    head = repo.head()
    assert head is not None
    rows: list[Row] = []
    rounds = 5 if ctx.quick else 15
    for name, query in QUERIES.items():
        times = []
        found = 0
        for _ in range(rounds):
            start = time.perf_counter()
            found = len(search(repo, head, query, limit=100))
            times.append(time.perf_counter() - start)
        rows.append(
            Row(
                f"search.{layout.pages}.{name}_ms",
                statistics.median(times) * 1000,
                "ms",
                f"{query!r}: {found} matches (limit 100), median of {rounds}",
            )
        )
    store.close()
    return rows
