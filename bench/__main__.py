"""``python -m bench``: run the benchmark sections, print their figures, write them to bench/latest.json.

A section is a function ``(Context) -> list[Row]``; add one by appending a ``Section`` to ``SECTIONS``.

The sections work in a scratch folder under ``--workdir`` (default ``.bench-work/`` in the project, beside
the service's own ``data/``), not in the system's temporary folder, where test runs and other programs
create and delete files all the time: on ext4 the kernel's price of creating a file depends on the state of
the folder's block group, and that price is counted as the engine's CPU (each commit creates three files).
``host.file_create_*`` show the price in both places at the start of a run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console

from bench import engine, queue, reads, refactor, remote, search, soak
from bench.engine import file_create_ms
from bench.report import (
    WORKDIR,
    Context,
    Row,
    Section,
    make_scratch,
    remove_scratch,
    spread,
    table,
    write_json,
)

SECTIONS: list[Section] = [
    Section("engine", "Batch engine: preflight + git store commits", engine.section),
    Section("queue", "Queue: HTTP submit → commit latency and sustained throughput", queue.section),
    Section("search", "Search of the head (git grep)", search.section),
    Section("reads", "Reads of a 100 000-page wiki: prefix, slices, indexed search", reads.section),
    Section("remote", "Git remote: coalesced publishing through a slow forge", remote.section),
    Section("refactor", "Refactors: rename with rewrite_links, backlinks (10 000 pages)", refactor.section),
    Section("soak", "Soak: many wikis over a long run through the service", soak.section),
]
WIDTH = 150
LATEST = Path(__file__).resolve().parent / "latest.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``--quick``, ``--only NAME`` (repeatable), ``--json PATH``, ``--workdir DIR``."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer iterations (smoke run)")
    parser.add_argument(
        "--only",
        action="append",
        choices=[s.name for s in SECTIONS],
        help="run only this section (repeatable)",
    )
    parser.add_argument("--json", type=Path, default=LATEST, help=f"where to write the figures ({LATEST})")
    parser.add_argument(
        "--workdir", type=Path, default=WORKDIR, help=f"where the scratch folder is made ({WORKDIR})"
    )
    return parser.parse_args(argv)


def host_rows(workdir: Path) -> list[Row]:
    """What the machine was doing when the run started (cores and load: results are noisy under load) and
    what creating a file costs in ``workdir`` and in the system's temporary folder."""
    load1, _, _ = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="wikiq-bench-") as system:
        in_tmp = file_create_ms(Path(system))
    return [
        Row("host.cpus", os.cpu_count() or 0, "cores"),
        Row("host.load_1m", load1, "", "1-minute load average at start"),
        Row("host.file_create_ms", file_create_ms(workdir), "ms CPU", f"one empty file in {workdir.parent}"),
        Row("host.file_create_tmp_ms", in_tmp, "ms CPU", f"the same in {tempfile.gettempdir()} (not used)"),
    ]


def run(sections: list[Section], quick: bool, console: Console, root: Path = WORKDIR) -> list[Row]:
    """Run ``sections`` in order in a scratch folder under ``root``, printing each one's table (and
    notes) as it completes."""
    workdir = make_scratch("wikiq-bench-", root)
    rows = host_rows(workdir)
    console.print(table("Host", rows))
    try:
        for section in sections:
            ctx = Context(quick=quick, console=console, workdir=workdir / section.name)
            ctx.workdir.mkdir()
            spread(ctx.workdir)  # each layout's or deployment's folder in a block group of its own
            start = time.perf_counter()
            found = section.run(ctx)
            found.append(Row(f"{section.name}.runtime_s", time.perf_counter() - start, "s", "whole section"))
            console.print(table(section.title, found))
            for note in ctx.notes:
                console.print(note, markup=False, highlight=False, soft_wrap=True)
            rows += found
    finally:
        remove_scratch(workdir)
    return rows


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench``."""
    args = parse_args(argv)
    chosen = [s for s in SECTIONS if not args.only or s.name in args.only]
    console = Console(width=max(Console().width, WIDTH))
    rows = run(chosen, args.quick, console, args.workdir)
    write_json(args.json, rows)
    console.print(f"wrote {len(rows)} figures to {args.json}")


if __name__ == "__main__":
    main()
