"""Synthetic wikis: page layouts, page text, and bare repositories built in one ``git fast-import``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from worker.engine import blob_id
from worker.git import INITIAL_FILES

PAGES_PER_FOLDER = 100
EPOCH = 1_700_000_000
_FILLER = (
    "Pages are short notes written by agents: a title, a summary paragraph, a few bullet points and links "
    "to neighbouring pages, so that a diff between two revisions stays small and readable.\n"
)


@dataclass(frozen=True)
class Layout:
    """Where page ``i`` of a wiki of ``pages`` pages lives: nested folders of 100, or one flat folder."""

    kind: str
    pages: int

    @property
    def name(self) -> str:
        """A short label such as ``nested_10000``."""
        return f"{self.kind}_{self.pages}"

    @property
    def folders(self) -> int:
        """How many page folders the layout has."""
        return 1 if self.kind == "flat" else max(1, -(-self.pages // PAGES_PER_FOLDER))

    def path(self, page: int, folder: int | None = None) -> str:
        """The path of page ``page``, in its own folder or in ``folder`` when given (new pages)."""
        if self.kind == "flat":
            return f"wiki/p{page}.md"
        where = page // PAGES_PER_FOLDER if folder is None else folder
        return f"wiki/t{where:04d}/p{page}.md"


def page_text(page: int, revision: int = 0) -> bytes:
    """A few hundred bytes of markdown, distinct for every page and revision."""
    return (
        f"# Page {page}\n\nRevision {revision} of page {page}. {_FILLER}\n"
        f"- see [[p{page + 1}]] and [[p{max(page - 1, 0)}]]\n- revision {revision}\n"
    ).encode()


def initial_files(layout: Layout) -> Iterator[tuple[str, bytes]]:
    """Every file of the initial commit: the root files of a new wiki, then the pages."""
    yield from INITIAL_FILES.items()
    for page in range(layout.pages):
        yield layout.path(page), page_text(page)


def _fast_import_stream(
    layout: Layout, versions: dict[str, str], files: Iterable[tuple[str, bytes]] | None = None
) -> Iterator[bytes]:
    """The ``git fast-import`` commands for one commit of every file, recording each file's version."""
    message = f"Create wiki with {layout.pages} pages".encode()
    ident = b"wikiq <wikiq@localhost> %d +0000" % EPOCH
    yield b"commit refs/heads/main\nauthor %s\ncommitter %s\ndata %d\n%s\n" % (
        ident,
        ident,
        len(message),
        message,
    )
    for path, data in initial_files(layout) if files is None else files:
        versions[path] = blob_id(data)
        yield b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data)
    yield b"done\n"


def build_bare(
    data_dir: Path, wiki: str, layout: Layout, files: Iterable[tuple[str, bytes]] | None = None
) -> dict[str, str]:
    """Create ``<data>/wikis/<wiki>.git`` holding ``layout`` (or ``files``) on ``main``; returns
    ``{path: version}``."""
    path = data_dir / "wikis" / f"{wiki}.git"
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    versions: dict[str, str] = {}
    args = ["git", "--git-dir", str(path), "fast-import", "--quiet", "--done", "--date-format=raw"]
    with subprocess.Popen(args, stdin=subprocess.PIPE) as proc:
        assert proc.stdin is not None
        chunk: list[bytes] = []
        for command in _fast_import_stream(layout, versions, files):
            chunk.append(command)
            if len(chunk) >= 4096:
                proc.stdin.write(b"".join(chunk))
                chunk.clear()
        proc.stdin.write(b"".join(chunk))
        proc.stdin.close()
        if proc.wait() != 0:
            raise RuntimeError(f"git fast-import failed for {path}")
    os.sync()
    return versions


def clone_worktree(bare: Path, dest: Path, timeout: float) -> bool:
    """Clone ``bare`` into a working tree at ``dest``; False when it takes longer than ``timeout`` s."""
    try:
        subprocess.run(["git", "clone", "-q", str(bare), str(dest)], check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    subprocess.run(["git", "-C", str(dest), "config", "user.name", "bench"], check=True)
    subprocess.run(["git", "-C", str(dest), "config", "user.email", "bench@localhost"], check=True)
    return True
