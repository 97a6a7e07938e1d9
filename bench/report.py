"""The shared shape of benchmark results: rows of figures, sections producing them, and their output."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from worker.git.packs import PACKS

# where the benchmarks make their scratch folders (see ``bench.__main__`` for why not the system's /tmp)
WORKDIR = Path(__file__).resolve().parent.parent / ".bench-work"


_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000


def spread(folder: Path) -> None:
    """Have the file system place each folder made in ``folder`` as it places a top-level one (ext4's
    ``chattr +T``: in a block group of its own, with free inodes). A section's wikis then do not share a
    block group with the files an earlier section (or another program) just deleted: on ext4 without a
    journal, as on these machines, creating a file searches past every inode of its group deleted in the
    last seconds, so the engine's ``cpu_ms`` would count the previous section's ``rmtree``. A no-op where
    the flag is not supported."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            flags = bytearray(4)
            fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags)
            value = int.from_bytes(flags, "little") | _FS_TOPDIR_FL
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, value.to_bytes(4, "little"))
        finally:
            os.close(fd)


def make_scratch(prefix: str, root: Path = WORKDIR) -> Path:
    """A new empty scratch folder under ``root`` (made if missing), placed apart from earlier ones and
    placing the folders made in it apart from each other (``spread``)."""
    root.mkdir(parents=True, exist_ok=True)
    spread(root)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    spread(scratch)
    return scratch


def remove_scratch(path: Path) -> None:
    """Delete the scratch folder ``path`` once this process's background pack deleter is done with the
    packs a roll-up retired in it (``rmtree`` racing it skips whole folders)."""
    PACKS.wait_retired(30)
    shutil.rmtree(path, ignore_errors=True)


Value = float | int | str | None


class Row(NamedTuple):
    """One printed figure: a unique dotted name, its value, its unit, and an optional remark."""

    name: str
    value: Value
    unit: str
    note: str = ""


@dataclass
class Context:
    """What every section is given: the run's options, a console for extra text, and a scratch folder."""

    quick: bool
    console: Console
    workdir: Path
    notes: list[str] = field(default_factory=list)


SectionFn = Callable[[Context], list[Row]]


class Section(NamedTuple):
    """A named group of figures; ``run`` measures and returns its rows."""

    name: str
    title: str
    run: SectionFn


def format_value(value: Value) -> str:
    """A value as the table shows it: thousands separators, three significant decimals at most."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(title: str, rows: Sequence[Row]) -> Table:
    """A rich table of ``rows``."""
    out = Table(title=title, title_justify="left", show_lines=False)
    out.add_column("figure", style="cyan", no_wrap=True)
    out.add_column("value", justify="right", style="bold", no_wrap=True)
    out.add_column("unit", no_wrap=True)
    out.add_column("note", style="dim")
    for row in rows:
        out.add_row(row.name, format_value(row.value), row.unit, row.note)
    return out


def write_json(path: Path, rows: Sequence[Row]) -> None:
    """Write every row into the flat ``{name: value}`` mapping at ``path``: figures of this run replace
    their earlier values, figures of sections not run (``--only``) are kept."""
    figures: dict[str, Value] = {}
    seen: set[str] = set()
    for row in rows:
        if row.name in seen:
            raise ValueError(f"duplicate figure name {row.name!r}")
        seen.add(row.name)
        figures[row.name] = row.value
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    merged = {**{k: v for k, v in kept.items() if k not in figures}, **figures}
    path.write_text(json.dumps(merged, indent=2, sort_keys=False) + "\n")
