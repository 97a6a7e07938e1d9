"""The engine section's commit loop alone, for instruction counts: ``python -m bench.commitloop``.

Builds one nested wiki (``bench.wikis``), makes every batch up front (``Workload``, as the engine section
does), then commits them the way ``bench.engine.engine_commit`` times them: a fresh head snapshot,
``preflight``, ``commit_plan``. Nothing else runs between the two ``os.getppid()`` calls that bracket the
timed commits, so under callgrind the loop's instructions are those of one dump:

    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file=/tmp/cg.%p \\
        .venv/bin/python -m bench.commitloop --pages 10000 --commits 200

(the second of the three dumps, ``/tmp/cg.<pid>.2``, is the loop; ``callgrind_annotate`` reads it, and its
``summary:`` line over ``--commits`` is the instructions per commit). Run with ``PYTHONHASHSEED=0`` for
counts that repeat. Without valgrind it prints the loop's user and system CPU per commit (``os.times``: in
ticks of 10 ms, so give a few hundred commits).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
from pathlib import Path

from bench.engine import AUTHOR, WARMUP
from bench.report import make_scratch, remove_scratch
from bench.wikis import Layout, build_bare
from bench.workload import Workload
from worker.engine import Applied, preflight
from worker.git import GitStore, WikiRepo
from worker.schema.edits import Batch

Batches = list[tuple[Batch, list[Applied]]]


def make_batches(workload: Workload, count: int) -> Batches:
    """``count`` consecutive batches and the ``applied`` list each must give, made before any commit."""
    out: Batches = []
    for _ in range(count):
        batch = workload.batch()
        expected = workload.expected(batch)
        workload.record(expected)
        out.append((batch, expected))
    return out


def commit_all(repo: WikiRepo, batches: Batches, first: int) -> list[list[Applied]]:
    """Commit ``batches`` in order as ``bench.engine.engine_commit`` does; the ``applied`` list of each."""
    applied = []
    for job, (batch, _) in enumerate(batches, start=first):
        head = repo.snapshot()
        plan = preflight(head, batch.edits)
        repo.commit_plan(plan, head.commit, batch.message, AUTHOR, job_id=f"bench-{job}")
        applied.append(plan.applied)
    return applied


def run(data: Path, pages: int, commits: int, warmup: int, profile: int = 0) -> tuple[float, float]:
    """Build a wiki of ``pages`` under ``data``, commit ``warmup`` then ``commits`` batches; the user and
    system CPU seconds of the ``commits`` (bracketed by ``os.getppid()`` for callgrind). ``profile``: print
    that many lines of a cProfile of the ``commits`` (by own time)."""
    layout = Layout("nested", pages)
    versions = build_bare(data, "loop", layout)
    batches = make_batches(Workload(layout, dict(versions)), warmup + commits)
    store = GitStore(data)
    profiler = cProfile.Profile() if profile else None
    try:
        repo = store.open("loop")
        commit_all(repo, batches[:warmup], 0)
        os.getppid()
        start = os.times()
        if profiler is not None:
            profiler.enable()
        applied = commit_all(repo, batches[warmup:], warmup)
        if profiler is not None:
            profiler.disable()
        done = os.times()
        os.getppid()
    finally:
        store.close()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(profile)
    for (batch, expected), got in zip(batches[warmup:], applied, strict=True):
        if got != expected:
            raise AssertionError(f"{batch.message}: applied {got}, expected {expected}")
    return done.user - start.user, done.system - start.system


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench.commitloop``."""
    parser = argparse.ArgumentParser(prog="python -m bench.commitloop", description=__doc__)
    parser.add_argument("--pages", type=int, default=10_000, help="pages of the nested wiki (10000)")
    parser.add_argument("--commits", type=int, default=200, help="commits measured (200)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"commits before those ({WARMUP})")
    parser.add_argument("--profile", type=int, default=0, help="print this many lines of a cProfile")
    args = parser.parse_args(argv)
    data = make_scratch("wikiq-commitloop-")  # see ``bench.__main__`` for where
    try:
        user, system = run(data, args.pages, args.commits, args.warmup, args.profile)
    finally:
        remove_scratch(data)
    per = 1000 / max(1, args.commits)
    cpu = f"{user * per:.3f} user, {system * per:.3f} system"
    print(f"{args.pages} pages, {args.commits} commits; CPU ms a commit: {cpu}")


if __name__ == "__main__":
    main()
