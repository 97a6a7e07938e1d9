"""The refactor section: a rename with rewrite_links, and backlinks, on a 10 000-page wiki.

The wiki is the engine section's nested 10 000 pages plus a hub page ``wiki/t0050/hub.md`` that 500 pages
(every 20th, in every folder) link to in the three usual forms: a bare ``[[hub]]``, a path-qualified
``[[t0050/hub|the hub]]`` and a relative markdown link ``[hub](../t0050/hub.md#top)``. Each timed batch
renames the hub (to ``core.md`` and back, so every link must be rewritten) with ``rewrite_links``, the way
the worker runs it: a fresh head snapshot, ``preflight``, ``commit_plan``. Targets: ≤ 250 ms a batch, and
≤ 50 ms for the backlinks of a page.

Backlinks are read through the service's ``LinkReads`` (git grep for the name, then the pages that mention
it), for the hub and for an ordinary page (two links): cold (fresh caches: the tree's file index built and
every candidate page parsed), parsed (the candidates' links cached by blob id, as after a commit that did
not touch them) and repeated (the same head again, the answer cached).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from bench.report import Context, Row
from bench.wikis import Layout, build_bare, initial_files
from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git.snapshot import FILE_INDEXES
from worker.schema.edits import Rename
from worker.service.links import LinkReads

AUTHOR = Identity("bench", "bench@localhost")
HUB = "wiki/t0050/hub.md"
LINKERS = 500
TARGET_RENAME_MS = 250.0
TARGET_BACKLINKS_MS = 50.0
FORMS = ("see [[{name}]]", "see [[t0050/{name}|the hub]]", "see [hub](../t0050/{name}.md#top)")


def wiki_files(layout: Layout) -> Iterator[tuple[str, bytes]]:
    """The pages of ``layout`` with ``LINKERS`` of them linking to the hub, and the hub itself."""
    step = layout.pages // LINKERS
    for number, (path, data) in enumerate(initial_files(layout)):
        page = number - 3  # the three root files come first
        if page >= 0 and page % step == 0:
            data += (FORMS[page // step % len(FORMS)].format(name="hub") + "\n").encode()
        yield path, data
    yield HUB, b"# Hub\n\nEvery page comes here.\n"


def rename_batch(repo: WikiRepo, source: str, target: str) -> tuple[float, int]:
    """Rename ``source`` to ``target`` with rewrite_links and commit it: (seconds, pages rewritten)."""
    start = time.perf_counter()
    snapshot = repo.snapshot()
    version = snapshot.version(source)
    edit = Rename(op="rename", path=source, new_path=target, expected_version=version, rewrite_links=True)
    plan = preflight(snapshot, [edit])
    repo.commit_plan(plan, snapshot.commit, f"Rename {source} to {target}", AUTHOR)
    elapsed = time.perf_counter() - start
    return elapsed, sum(1 for a in plan.applied if a.op == "rewrite_links")


def time_backlinks(repo: WikiRepo, path: str, rounds: int) -> tuple[float, float, float, int]:
    """Backlinks of ``path``, median ms of ``rounds``: cold (fresh caches), parsed (the pages' links
    cached, as after a commit that did not change them), repeated (the same head again); links found."""
    cold, parsed, repeated = [], [], []
    found = 0
    for _ in range(rounds):
        reads = LinkReads(None)  # type: ignore[arg-type]  # collect() needs no Reads
        FILE_INDEXES.indexes.clear()
        for times in (cold, parsed, repeated):
            if times is parsed:
                reads.answers.items.clear()
            start = time.perf_counter()
            found = len(reads.collect(repo.snapshot(), path, 10_000).backlinks)
            times.append(time.perf_counter() - start)
    return (*(statistics.median(t) * 1000 for t in (cold, parsed, repeated)), found)  # type: ignore[return-value]


def _verdict(ms: float, target: float) -> str:
    return f"target ≤ {target:g} ms: {'met' if ms <= target else 'MISSED'}"


def section(ctx: Context) -> list[Row]:
    """Rename with rewrite_links and backlinks on a 10 000-page wiki (2 000 with --quick)."""
    layout = Layout("nested", 2000 if ctx.quick else 10_000)
    data: Path = ctx.workdir / "refactor"
    build_bare(data, "refactor", layout, wiki_files(layout))
    store = GitStore(data)
    rows: list[Row] = []
    try:
        repo = store.open("refactor")
        batches = 4 if ctx.quick else 12
        times, rewritten = [], 0
        names = [HUB, "wiki/t0050/core.md"]
        for number in range(batches + 1):
            elapsed, rewritten = rename_batch(repo, names[number % 2], names[(number + 1) % 2])
            if number:  # the first one warms the tree cache
                times.append(elapsed)
        median = statistics.median(times) * 1000
        key = f"refactor.{layout.pages}"
        rows.append(
            Row(
                f"{key}.rename_rewrite_ms",
                median,
                "ms",
                f"rename + rewrite_links, {rewritten} pages rewritten, median of {batches}; "
                + _verdict(median, TARGET_RENAME_MS),
            )
        )
        rows.append(Row(f"{key}.rename_rewrite_max_ms", max(times) * 1000, "ms", "slowest batch"))
        hub = names[(batches + 1) % 2]
        rounds = 3 if ctx.quick else 7
        for label, path in (("hub", hub), ("page", layout.path(5000 % layout.pages))):
            cold, parsed, repeated, found = time_backlinks(repo, path, rounds)
            notes = {
                "cold": f"{found} links, fresh caches (file index, parsed links), median of {rounds}",
                "parsed": "links of unchanged pages cached (by blob id): a new head",
                "repeated": "the same head again: the answer is cached",
            }
            for kind, ms in (("cold", cold), ("parsed", parsed), ("repeated", repeated)):
                rows.append(
                    Row(
                        f"{key}.backlinks_{label}_{kind}_ms",
                        ms,
                        "ms",
                        f"{notes[kind]}; " + _verdict(ms, TARGET_BACKLINKS_MS),
                    )
                )
    finally:
        store.close()
    return rows
