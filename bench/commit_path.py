"""The engine's commit path alone, for instruction counts: ``python -m bench.commit_path SIZE N``.

Builds a nested wiki of ``SIZE`` pages, commits 60 untimed batches of the same-folders workload (as
``bench.engine.measure_same_folders`` does), then ``N`` more, and prints the user and system CPU of those
``N``. ``syncfs`` is stubbed out, so only the CPU of preflight, the pack and the ref swap counts. Under
callgrind the difference between two runs is the instructions of ``N`` commits, repeatable whatever else
the machine does (wall and CPU time on a shared machine are not)::

    valgrind --tool=callgrind --callgrind-out-file=cg.0 .venv/bin/python -m bench.commit_path 10000 0
    valgrind --tool=callgrind --callgrind-out-file=cg.200 .venv/bin/python -m bench.commit_path 10000 200
    # (total of cg.200 - total of cg.0) / 200 = instructions a commit
"""

from __future__ import annotations

import resource
import shutil
import sys
import tempfile
from pathlib import Path

from bench.engine import SAME_FOLDERS, SAME_FOLDERS_WARMUP, engine_commit
from bench.wikis import Layout, build_bare
from bench.workload import Workload
from worker.git import GitStore
from worker.git import refs as gitrefs


def main(size: int, commits: int) -> None:
    gitrefs.sync_filesystem = lambda *args, **kwargs: None  # the CPU of the commit path, not the disk's
    layout = Layout("nested", size)
    wiki = layout.name.replace("_", "-")
    data = Path(tempfile.mkdtemp(prefix="wikiq-commit-path-"))
    try:
        workload = Workload(layout, build_bare(data, wiki, layout), seed=7, folders=SAME_FOLDERS)
        store = GitStore(data)
        repo = store.open(wiki)
        for job in range(SAME_FOLDERS_WARMUP):
            engine_commit(repo, workload, job)
        before = resource.getrusage(resource.RUSAGE_SELF)
        for job in range(SAME_FOLDERS_WARMUP, SAME_FOLDERS_WARMUP + commits):
            engine_commit(repo, workload, job)
        after = resource.getrusage(resource.RUSAGE_SELF)
        store.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    if commits:
        user = (after.ru_utime - before.ru_utime) * 1000 / commits
        system = (after.ru_stime - before.ru_stime) * 1000 / commits
        print(f"{commits} commits on {size} pages: user {user:.3f} ms, system {system:.3f} ms a commit")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
