"""Reads on a large wiki (100 000 pages in 1 000 folders of 100): listing under a prefix, slices of the full
listing from a cursor, and search for a rare phrase, through the service's reads (in process, as the API
answers them, without HTTP). The wiki is written by plain git (fast-import), not by wikiq, and first
opened here as the API opens it (``warmup.warm``): the figures include the time from that opening until a
rare-phrase search answers within 50 ms (its indexes built in the background meanwhile)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from bench.report import Context, Row
from bench.wikis import Layout, build_bare
from worker.git import GitStore, WikiRepo
from worker.git.linkindex import link_index
from worker.git.search import search
from worker.git.warmup import warm

ROUNDS = 15
FAST_MS = 50.0  # a rare-phrase search this fast: the text index answers it


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
    rare = f"Revision 0 of page {layout.pages - 124}."
    fast_s, fast_ms, text_s, links_s, searches = open_until_fast(repo, head, rare)
    found = len(search(repo, head, rare, limit=100))
    rare_ms = _median_ms(lambda: search(repo, head, rare, limit=100), rounds)
    absent_ms = _median_ms(lambda: search(repo, head, "no such phrase anywhere", limit=100), rounds)
    store.close()
    pages = layout.pages
    return [
        Row("reads.pages", pages, "pages", f"{layout.folders} folders of 100"),
        Row("reads.prefix_100_ms", prefix, "ms", "list the 100 pages of one folder; target <= 5"),
        Row("reads.slice_1000_ms", slice_ms, "ms", "1000 pages from a cursor mid-wiki; target <= 30"),
        Row("reads.search_rare_ms", rare_ms, "ms", f"a phrase on {found} page(s); target <= 50"),
        Row("reads.search_absent_ms", absent_ms, "ms", "a phrase on no page"),
        Row(
            "reads.open_to_fast_search_s",
            fast_s,
            "s",
            f"a wiki git wrote, first opened: until a rare-phrase search answers in <= {FAST_MS:g} ms "
            f"({searches} searches meanwhile); target <= 15",
        ),
        Row("reads.open_fast_search_ms", fast_ms, "ms", "that search's latency"),
        *(
            [
                Row("reads.text_index_build_s", text_s, "s", "the search index, built in the background"),
                Row("reads.link_index_build_s", links_s, "s", "then the link index, in a child process"),
            ]
            if text_s is not None and links_s is not None
            else []  # too small a wiki to index
        ),
    ]


def open_until_fast(
    repo: WikiRepo, head: str, phrase: str
) -> tuple[float, float, float | None, float | None, int]:
    """Open ``repo`` as the API does (``warmup.warm``: its indexes built in the background), then search
    for ``phrase`` over and over until one answers within ``FAST_MS``: (seconds until then, that search's
    ms, seconds until the text index held ``head`` and until the link index did too (None: not indexed, a
    small wiki), searches)."""
    started = time.perf_counter()
    building = warm(repo, head)
    assert building is not None
    text_s = None
    searches = 0
    while True:
        start = time.perf_counter()
        search(repo, head, phrase, limit=100)
        searches += 1
        ms = (time.perf_counter() - start) * 1000
        if text_s is None and repo.text_index().indexed() == head:
            text_s = time.perf_counter() - started
        if ms <= FAST_MS:
            fast_s = time.perf_counter() - started
            break
    building.join()
    links_s = time.perf_counter() - started if link_index(repo).indexed() == head else None
    return fast_s, ms, text_s, links_s, searches
