"""Reads on a large wiki (100 000 pages in 1 000 folders of 100): listing under a prefix, slices of the full
listing from a cursor, and search for a rare phrase, through the service's reads (in process, as the API
answers them, without HTTP)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from bench.report import Context, Row
from bench.wikis import Layout, build_bare
from worker.git import GitStore

ROUNDS = 15


def _median_ms(work: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def section(ctx: Context) -> list[Row]:
    """The read figures of the 100 000-page wiki (10 000 with ``--quick``)."""
    layout = Layout("nested", 10_000 if ctx.quick else 100_000)
    build_bare(ctx.workdir / "reads", "big", layout)
    store = GitStore(ctx.workdir / "reads")
    repo = store.open("big")
    head = repo.head()
    assert head is not None
    middle = layout.folders // 2
    rounds = 5 if ctx.quick else ROUNDS
    prefix = _median_ms(lambda: repo.list_files(head, f"wiki/t{middle:04d}/", limit=1001), rounds)
    after = layout.path(middle * 100 + 10)
    slice_ms = _median_ms(lambda: repo.list_files(head, "", after, 1001), rounds)
    started = time.perf_counter()
    repo.text_index().build(head)  # once per wiki, then kept up to date per commit
    build_s = time.perf_counter() - started
    rare = f"Revision 0 of page {layout.pages - 124}."
    found = len(repo.search(head, rare, limit=100))
    rare_ms = _median_ms(lambda: repo.search(head, rare, limit=100), rounds)
    absent_ms = _median_ms(lambda: repo.search(head, "no such phrase anywhere", limit=100), rounds)
    store.close()
    pages = layout.pages
    return [
        Row("reads.pages", pages, "pages", f"{layout.folders} folders of 100"),
        Row("reads.prefix_100_ms", prefix, "ms", "list the 100 pages of one folder; target <= 5"),
        Row("reads.slice_1000_ms", slice_ms, "ms", "1000 pages from a cursor mid-wiki; target <= 30"),
        Row("reads.search_rare_ms", rare_ms, "ms", f"a phrase on {found} page(s); target <= 50"),
        Row("reads.search_absent_ms", absent_ms, "ms", "a phrase on no page"),
        Row("reads.text_index_build_s", build_s, "s", "building the search index the first time"),
    ]
