"""``python -m bench``: run the benchmark sections, print their figures, write them to bench/latest.json.

A section is a function ``(Context) -> list[Row]``; add one by appending a ``Section`` to ``SECTIONS``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console

from bench import engine, queue, reads, refactor, remote, search, soak
from bench.report import Context, Row, Section, table, write_json

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
    """The command line: ``--quick``, ``--only NAME`` (repeatable), ``--json PATH``."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer iterations (smoke run)")
    parser.add_argument(
        "--only",
        action="append",
        choices=[s.name for s in SECTIONS],
        help="run only this section (repeatable)",
    )
    parser.add_argument("--json", type=Path, default=LATEST, help=f"where to write the figures ({LATEST})")
    return parser.parse_args(argv)


def host_rows() -> list[Row]:
    """What the machine was doing when the run started: cores and load (results are noisy under load)."""
    load1, _, _ = os.getloadavg()
    return [
        Row("host.cpus", os.cpu_count() or 0, "cores"),
        Row("host.load_1m", load1, "", "1-minute load average at start"),
    ]


def run(sections: list[Section], quick: bool, console: Console) -> list[Row]:
    """Run ``sections`` in order, printing each one's table (and notes) as it completes."""
    rows = host_rows()
    console.print(table("Host", rows))
    workdir = Path(tempfile.mkdtemp(prefix="wikiq-bench-"))
    try:
        for section in sections:
            ctx = Context(quick=quick, console=console, workdir=workdir / section.name)
            ctx.workdir.mkdir()
            start = time.perf_counter()
            found = section.run(ctx)
            found.append(Row(f"{section.name}.runtime_s", time.perf_counter() - start, "s", "whole section"))
            console.print(table(section.title, found))
            for note in ctx.notes:
                console.print(note, markup=False, highlight=False, soft_wrap=True)
            rows += found
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench``."""
    args = parse_args(argv)
    chosen = [s for s in SECTIONS if not args.only or s.name in args.only]
    console = Console(width=max(Console().width, WIDTH))
    rows = run(chosen, args.quick, console)
    write_json(args.json, rows)
    console.print(f"wrote {len(rows)} figures to {args.json}")


if __name__ == "__main__":
    main()
