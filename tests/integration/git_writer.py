"""A writer for the git crash tests: commits to one wiki in a loop and prints each commit once it returned.

``python -m tests.integration.git_writer DATA WIKI MODE COUNT SEED``. ``MODE`` is ``main`` (``commit_plan``:
objects, then compare-and-swap of ``main``) or ``objects`` (``write_commit``, then ``move_main``: the path of
remote-backed wikis). Each commit creates a page and rewrites ``wiki/shared.md``; every fifth also writes a
40 KB page, so that roll-ups cross tiers. A line ``<commit>`` is printed (and flushed) only after the call
that made it durable returned: what a worker would report. ``WIKIQ_FAULTS`` (see ``worker.faults``) makes
it SIGKILL itself at a named step; ``SEED`` seeds that choice.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from worker.engine import preflight
from worker.errors import RefMoved
from worker.git import GitStore, Identity
from worker.git.packs import PACKS
from worker.schema.edits import Create, Edit, Overwrite

WRITER = Identity("crash writer", "writer@example.org")


def edits(repo_head_version: str | None, n: int) -> list[Edit]:
    """Batch ``n``: a new page, the shared page rewritten, and now and then a big page."""
    batch: list[Edit] = [Create(op="create", path=f"wiki/c{n:04d}.md", content=f"page {n}\n")]
    shared = f"# shared\n\nwritten by commit {n}\n"
    if repo_head_version is None:
        batch.append(Create(op="create", path="wiki/shared.md", content=shared))
    else:
        batch.append(
            Overwrite(
                op="overwrite", path="wiki/shared.md", content=shared, expected_version=repo_head_version
            )
        )
    if n % 5 == 4:
        big = "".join(f"line {i} of big page {n}\n" for i in range(2000))
        batch.append(Create(op="create", path=f"wiki/big/b{n:04d}.md", content=big))
    return batch


def main(argv: list[str]) -> None:
    """Commit ``COUNT`` batches, printing each commit id after it is durable."""
    data, wiki, mode, count, seed = Path(argv[0]), argv[1], argv[2], int(argv[3]), int(argv[4])
    random.seed(seed)
    store = GitStore(data)
    repo = store.open(wiki)
    start = len(repo.log(10_000))
    run = os.getpid()  # in the message: a commit cut short is never remade byte for byte by the next run
    for n in range(start, start + count):
        head = repo.head()
        snapshot = repo.snapshot(head)
        plan = preflight(snapshot, edits(snapshot.version("wiki/shared.md"), n))
        if mode == "main":
            commit = repo.commit_plan(plan, head, f"commit {n} run {run}", WRITER, job_id=f"job-{n}")
        else:
            commit = repo.write_commit(plan, head, f"commit {n} run {run}", WRITER, job_id=f"job-{n}")
            try:
                repo.move_main(head, commit)
            except RefMoved:
                continue
        print(commit, flush=True)
    PACKS.wait_retired(30)  # let the background deleter finish before exiting
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
