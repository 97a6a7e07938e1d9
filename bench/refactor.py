"""The refactor section: a rename with rewrite_links, and backlinks, on a 10 000-page wiki.

The wiki is the engine section's nested 10 000 pages plus a hub page ``wiki/t0050/hub.md`` that 500 pages
(every 20th, in every folder) link to in the three usual forms: a bare ``[[hub]]``, a path-qualified
``[[t0050/hub|the hub]]`` and a relative markdown link ``[hub](../t0050/hub.md#top)``. Each timed batch
renames the hub (to ``core.md`` and back, so every link must be rewritten) with ``rewrite_links``, the way
the worker runs it: a fresh head snapshot, ``preflight``, ``commit_plan``. Targets: ≤ 250 ms a batch, and
≤ 50 ms for the backlinks of a page.

Backlinks are read through the service's ``LinkReads``, for the hub and for an ordinary page (two links):
cold (a new process, the link index on disk at the head: ``worker.git.linkindex``), unindexed (no link
index: git grep for the name, then every page that mentions it parsed, with fresh caches), parsed (no
index, the candidates' links cached by blob id, as after a commit that did not touch them) and repeated
(the same head again, the answer cached). The link index's own costs: its first build, and bringing it to
a new head after a rename batch (500 pages rewritten) and after a one-page edit, which is what it adds to
each commit (paid by the first read after it). And the check of a selector batch: one ``each`` edit that
sets a front matter key on the 300 pages of three folders (a glob), as a dry run checks it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import TypeAdapter

from bench.report import Context, Row
from bench.wikis import PAGES_PER_FOLDER, Layout, build_bare, initial_files
from worker.engine import NewFile, Plan, blob_id, preflight
from worker.engine.paths import DEFAULT_POLICY
from worker.engine.review import review
from worker.git import GitStore, Identity, WikiRepo
from worker.git.linkindex import FILE_NAME, link_index
from worker.git.snapshot import FILE_INDEXES
from worker.schema.edits import Edit, Rename
from worker.service.links import LinkReads

AUTHOR = Identity("bench", "bench@localhost")
HUB = "wiki/t0050/hub.md"
LINKERS = 500
TARGET_RENAME_MS = 250.0
TARGET_BACKLINKS_MS = 50.0
SELECTED = "wiki/t000[0-2]/*.md"  # three folders of 100 pages
EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
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


def selector_check(repo: WikiRepo, rounds: int) -> tuple[float, int]:
    """Check (as a dry run does: preflight, then the review) one ``each`` edit that sets a front matter key
    on the pages of three folders, picked by a glob: (median seconds of ``rounds``, pages changed)."""
    edit = EDIT.validate_python(
        {
            "op": "each",
            "select": {"prefix": "wiki/", "glob": SELECTED},
            "expected_count": 3 * PAGES_PER_FOLDER,
            "do": "frontmatter",
            "set": {"reviewed": True},
        }
    )
    times, changed = [], 0
    for _ in range(rounds):
        start = time.perf_counter()
        snapshot = repo.snapshot()
        plan = preflight(snapshot, [edit])
        review(snapshot, plan, DEFAULT_POLICY)
        times.append(time.perf_counter() - start)
        changed = len(plan.changes)
    return statistics.median(times), changed


def time_backlinks(repo: WikiRepo, path: str, rounds: int) -> tuple[float, float, float, int]:
    """Backlinks of ``path`` without the link index, median ms of ``rounds``: unindexed (fresh caches),
    parsed (the pages' links cached, as after a commit that did not change them), repeated (the same head
    again); links found."""
    index = repo.path / FILE_NAME
    aside = index.with_suffix(".aside")
    os.rename(index, aside)
    unindexed: list[float] = []
    parsed: list[float] = []
    repeated: list[float] = []
    found = 0
    try:
        for _ in range(rounds):
            reads = LinkReads(None)  # type: ignore[arg-type]  # collect() needs no Reads
            FILE_INDEXES.clear()
            for times in (unindexed, parsed, repeated):
                if times is parsed:
                    reads.answers.items.clear()
                start = time.perf_counter()
                found = len(reads.collect(repo.snapshot(), path, 10_000).backlinks)
                times.append(time.perf_counter() - start)
    finally:
        os.rename(aside, index)
    return (*(statistics.median(t) * 1000 for t in (unindexed, parsed, repeated)), found)  # type: ignore[return-value]


def cold_backlinks(data: Path, path: str, rounds: int) -> tuple[float, int]:
    """Backlinks of ``path`` in a new process each time (nothing in memory; the link index on disk),
    median ms of ``rounds``; links found."""
    times, found = [], 0
    for _ in range(rounds):
        code = f"from bench.refactor import _cold; _cold({str(data)!r}, {path!r})"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
        ms, found = json.loads(out.stdout)
        times.append(ms)
    return statistics.median(times), found


def _cold(data: str, path: str) -> None:
    """In a new process: time one backlinks read from opening the store on, print ``[ms, links]``."""
    start = time.perf_counter()
    store = GitStore(Path(data))
    repo = store.open("refactor")
    found = len(LinkReads(None).collect(repo.snapshot(), path, 10_000).backlinks)  # type: ignore[arg-type]
    elapsed = (time.perf_counter() - start) * 1000
    store.close()
    print(json.dumps([elapsed, found]))


def time_index_update(repo: WikiRepo) -> float:
    """Ms to bring the link index to the head (after a commit), the way the first read after it does."""
    start = time.perf_counter()
    link_index(repo).build(repo.head() or "")
    return (time.perf_counter() - start) * 1000


def edit_batch(repo: WikiRepo, path: str, number: int) -> None:
    """Commit a one-page edit of ``path`` (a new line with ``number`` and a link)."""
    snapshot = repo.snapshot()
    data = snapshot.read(path) + f"edit {number}: see [[hub]]\n".encode()
    plan = Plan(changes={path: NewFile(blob_id(data), data)})
    repo.commit_plan(plan, snapshot.commit, f"Edit {path}", AUTHOR)


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
        started = time.perf_counter()
        link_index(repo).build(repo.head() or "")
        build_s = time.perf_counter() - started
        batches = 4 if ctx.quick else 12
        times, updates, rewritten = [], [], 0
        names = [HUB, "wiki/t0050/core.md"]
        for number in range(batches + 1):
            elapsed, rewritten = rename_batch(repo, names[number % 2], names[(number + 1) % 2])
            updates.append(time_index_update(repo))
            if number:  # the first one warms the tree cache
                times.append(elapsed)
        edits = []
        for number in range(batches):
            edit_batch(repo, layout.path(7 * number % layout.pages), number)
            edits.append(time_index_update(repo))
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
        rows.append(Row(f"{key}.link_index_build_s", build_s, "s", "building the link index the first time"))
        rows.append(
            Row(
                f"{key}.link_index_rename_ms",
                statistics.median(updates),
                "ms",
                f"bringing the link index to the head after a rename batch ({rewritten} pages changed)",
            )
        )
        rows.append(
            Row(
                f"{key}.link_index_edit_ms",
                statistics.median(edits),
                "ms",
                f"bringing the link index to the head after a one-page edit, median of {batches}",
            )
        )
        check_s, changed = selector_check(repo, 3 if ctx.quick else 7)
        rows.append(
            Row(
                f"{key}.selector_check_ms",
                check_s * 1000,
                "ms",
                f"check (preflight + review) of one each edit setting front matter on {changed} pages picked "
                "by a glob, median",
            )
        )
        hub = names[(batches + 1) % 2]
        rounds = 3 if ctx.quick else 7
        for label, path in (("hub", hub), ("page", layout.path(5000 % layout.pages))):
            cold, links = cold_backlinks(data, path, rounds)
            unindexed, parsed, repeated, found = time_backlinks(repo, path, rounds)
            assert links == found, (links, found)
            notes = {
                "cold": f"{found} links, a new process, the link index on disk, median of {rounds}",
                "unindexed": "no link index: the pages that mention the name parsed, fresh caches",
                "parsed": "no link index, links of unchanged pages cached (by blob id): a new head",
                "repeated": "the same head again: the answer is cached",
            }
            figures = (("cold", cold), ("unindexed", unindexed), ("parsed", parsed), ("repeated", repeated))
            for kind, ms in figures:
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
