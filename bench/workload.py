"""The client side of the benchmark: a model of the wiki's pages that builds valid 10-edit batches."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.wikis import Layout, page_text
from worker.engine import Applied, blob_id
from worker.schema.edits import Batch, Create, Delete, Overwrite, Rename

OVERWRITES = 6
CREATES = 2


def page_number(path: str) -> int:
    """The page number in a path such as ``wiki/t0001/p123.md``."""
    return int(path.rsplit("/p", 1)[1].removesuffix(".md"))


@dataclass
class Workload:
    """Live pages and their versions as a client that read the head would know them.

    ``folders``: edit only pages of the first that many folders (None: all), so that wikis of different
    sizes get batches touching the same number of folders of the same size.
    """

    layout: Layout
    versions: dict[str, str]
    seed: int = 1
    live: list[str] = field(default_factory=list)
    next_page: int = 0
    revision: int = 0
    folders: int | None = None

    def __post_init__(self) -> None:
        """Index the live pages (root files are never edited by the benchmark)."""
        self.rng = random.Random(self.seed)
        self.live = [p for p in self.versions if p.startswith("wiki/") and self._mine(p)]
        self.slot = {p: i for i, p in enumerate(self.live)}
        pages = (page_number(p) + 1 for p in self.versions if p.startswith("wiki/"))
        self.next_page = max(self.layout.pages, max(pages, default=0))  # past every page ever made

    def _mine(self, path: str) -> bool:
        """True when ``path`` is in one of the folders this workload edits."""
        if self.folders is None or self.layout.kind == "flat":
            return True
        return int(path.split("/")[1].removeprefix("t")) < self.folders

    def _new_path(self) -> str:
        """A path no page has had yet, in a random existing folder (of those this workload edits)."""
        page = self.next_page
        self.next_page += 1
        folders = self.layout.folders if self.folders is None else min(self.folders, self.layout.folders)
        return self.layout.path(page, self.rng.randrange(folders))

    def batch(self) -> Batch:
        """6 overwrites, 2 creates, 1 delete and 1 rename, each naming the current version it replaces."""
        self.revision += 1
        chosen = self.rng.sample(self.live, OVERWRITES + 2)
        edits: list[dict[str, object]] = [
            {
                "op": "overwrite",
                "path": p,
                "content": page_text(page_number(p), self.revision).decode(),
                "expected_version": self.versions[p],
            }
            for p in chosen[:OVERWRITES]
        ]
        for _ in range(CREATES):
            path = self._new_path()
            edits.append({"op": "create", "path": path, "content": page_text(page_number(path)).decode()})
        deleted, renamed = chosen[OVERWRITES:]
        edits.append({"op": "delete", "path": deleted, "expected_version": self.versions[deleted]})
        edits.append(
            {
                "op": "rename",
                "path": renamed,
                "new_path": self._new_path(),
                "expected_version": self.versions[renamed],
            }
        )
        return Batch.model_validate({"message": f"bench batch {self.revision}", "edits": edits})

    def expected(self, batch: Batch) -> list[Applied]:
        """The ``applied`` list the engine must report for ``batch`` (a check, and the baseline's record)."""
        out: list[Applied] = []
        for index, edit in enumerate(batch.edits):
            if isinstance(edit, Create | Overwrite):
                out.append(Applied(index, edit.op, edit.path, blob_id(edit.content.encode())))
            elif isinstance(edit, Delete):
                out.append(Applied(index, "delete", edit.path, None))
            elif isinstance(edit, Rename):
                out.append(Applied(index, "rename", edit.path, self.versions[edit.path], edit.new_path))
        return out

    def record(self, applied: list[Applied]) -> None:
        """Follow the head after a commit: the versions and paths the ``applied`` list reports."""
        for entry in applied:
            if entry.op in ("delete", "rename"):
                self._drop(entry.path)
            target = entry.new_path if entry.op == "rename" else entry.path
            if entry.version is not None and target is not None:
                if target not in self.slot:
                    self.slot[target] = len(self.live)
                    self.live.append(target)
                self.versions[target] = entry.version

    def _drop(self, path: str) -> None:
        """Forget ``path`` in O(1): the last live page takes its slot."""
        self.versions.pop(path, None)
        index = self.slot.pop(path)
        last = self.live.pop()
        if last != path:
            self.live[index] = last
            self.slot[last] = index
