"""Two writers racing on one wiki through the git store, each in its own process with its own ``GitStore``.

Each round both processes read the same head and build their plan on it, then a ``multiprocessing.Barrier``
releases them together into ``commit_plan``. Exactly one compare-and-swap of ``main`` wins; the loser gets
``RefMoved``, re-reads the head, re-runs preflight and commits again, as the worker does.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import threading
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from tests.gitutil import git_text as _git
from worker.engine import blob_id, preflight
from worker.errors import BatchRejected, RefMoved, WikiExists
from worker.git import GitStore, Identity
from worker.schema.edits import Create, Edit, Replace

ROUNDS = 20
TIMEOUT = 120


def _edits(mode: str, name: str, round_: int, repo_head_version: str | None) -> list[Edit]:
    if mode == "distinct":
        return [Create(op="create", path=f"wiki/{name}/{round_}.md", content=f"{name} round {round_}\n")]
    # "shared": both rewrite the same line of the same page, each naming the version it read.
    return [
        Replace(
            op="replace",
            path="wiki/shared.md",
            old=f"round {round_}: open\n",
            new=f"round {round_}: {name}\n",
            expected_version=repo_head_version,
        )
    ]


def _racer(
    data_dir: str, wiki: str, name: str, mode: str, rounds: int, barrier: Barrier, results: Queue[Any]
) -> None:
    """One writer: per round, read the head, plan, wait for the other, commit; retry on RefMoved."""
    store = GitStore(Path(data_dir))
    report: list[dict[str, Any]] = []
    try:
        repo = store.open(wiki)
        author = Identity(name, f"{name}@example.org")
        for round_ in range(rounds):
            barrier.wait(TIMEOUT)
            base = repo.head()
            snapshot = repo.snapshot(base)
            edits = _edits(mode, name, round_, snapshot.version("wiki/shared.md"))
            plan = preflight(snapshot, edits)
            barrier.wait(TIMEOUT)  # both plans are built on the same head: go
            entry: dict[str, Any] = {"round": round_, "first_base": base, "attempts": 0}
            while True:
                entry["attempts"] += 1
                assert entry["attempts"] < 100_000
                try:
                    entry["commit"] = repo.commit_plan(
                        plan, base, f"{name} round {round_}", author, job_id=f"{name}-{round_}"
                    )
                    entry["base"] = base
                    break
                except RefMoved:
                    base = repo.head()
                    try:
                        plan = preflight(repo.snapshot(base), edits)
                    except BatchRejected as err:
                        entry["refused"] = err.code
                        break
            report.append(entry)
    except BaseException as err:
        barrier.abort()
        report.append({"error": f"{err!r}\n{traceback.format_exc()}"})
    finally:
        store.close()
        results.put((name, report))


def _race(data_dir: Path, wiki: str, mode: str, rounds: int) -> dict[str, list[dict[str, Any]]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: Queue[Any] = ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(str(data_dir), wiki, name, mode, rounds, barrier, results))
        for name in ("alice", "bob")
    ]
    for proc in procs:
        proc.start()
    reports = dict(results.get(timeout=TIMEOUT) for _ in procs)
    for proc in procs:
        proc.join(TIMEOUT)
        assert proc.exitcode == 0
    for name, report in reports.items():
        errors = [entry["error"] for entry in report if "error" in entry]
        assert not errors, (name, errors)
        assert len(report) == rounds
    return reports


def test_racing_writers_one_wins_each_swap_and_nothing_is_lost(data_dir: Path) -> None:
    """Per round exactly one first swap wins; the loser re-checks and commits on top; history stays linear."""
    store = GitStore(data_dir)
    root = store.create("race")
    reports = _race(data_dir, "race", "distinct", ROUNDS)

    repo_path = store.path("race")
    for round_ in range(ROUNDS):
        alice, bob = reports["alice"][round_], reports["bob"][round_]
        assert alice["first_base"] == bob["first_base"]
        winners = [e for e in (alice, bob) if e["attempts"] == 1]
        losers = [e for e in (alice, bob) if e["attempts"] > 1]
        assert len(winners) == 1 and len(losers) == 1, (alice, bob)
        assert winners[0]["base"] == winners[0]["first_base"]
        # The loser's final commit sits on the winner's (nothing in between: the other writer waits).
        assert losers[0]["base"] == winners[0]["commit"]

    # Linear history: root plus two commits a round, each with exactly one parent.
    lines = _git(repo_path, "rev-list", "--parents", "main").splitlines()
    assert len(lines) == 1 + 2 * ROUNDS
    assert lines[-1] == root
    assert all(len(line.split()) == 2 for line in lines[:-1])
    assert _git(repo_path, "rev-list", "--merges", "main") == ""

    # Every writer's every file is on main, and each job's commit is found by its trailer.
    listed = _git(repo_path, "ls-tree", "-r", "--name-only", "main").split()
    repo = store.open("race")
    for name, report in reports.items():
        for entry in report:
            path = f"wiki/{name}/{entry['round']}.md"
            assert path in listed
            assert _git(repo_path, "show", f"main:{path}") == f"{name} round {entry['round']}\n"
            assert repo.find_job_commit(f"{name}-{entry['round']}", root) == entry["commit"]
    store.close()
    subprocess.run(["git", "--git-dir", str(repo_path), "fsck", "--strict"], check=True, capture_output=True)
    assert not (repo_path / "refs" / "heads" / "main.lock").exists()


def test_racing_writers_on_one_page_lose_no_update(data_dir: Path) -> None:
    """When both rewrite the same page from the same version, the loser's re-check is VERSION_MISMATCH."""
    rounds = 5
    page = "".join(f"round {r}: open\n" for r in range(rounds)).encode()
    store = GitStore(data_dir)
    root = store.create("race", files={"wiki/shared.md": page})
    reports = _race(data_dir, "race", "shared", rounds)

    repo_path = store.path("race")
    expected = page.decode()
    for round_ in range(rounds):
        alice, bob = reports["alice"][round_], reports["bob"][round_]
        assert alice["first_base"] == bob["first_base"]
        committed = [(n, e) for n, e in (("alice", alice), ("bob", bob)) if "commit" in e]
        refused = [e for e in (alice, bob) if "refused" in e]
        assert len(committed) == 1 and len(refused) == 1, (alice, bob)
        assert refused[0]["refused"] == "VERSION_MISMATCH"
        expected = expected.replace(f"round {round_}: open\n", f"round {round_}: {committed[0][0]}\n")

    content = _git(repo_path, "show", "main:wiki/shared.md")
    assert content == expected
    assert blob_id(content.encode()) == _git(repo_path, "rev-parse", "main:wiki/shared.md").strip()
    lines = _git(repo_path, "rev-list", "--parents", "main").splitlines()
    assert len(lines) == 1 + rounds and lines[-1] == root
    store.close()
    subprocess.run(["git", "--git-dir", str(repo_path), "fsck", "--strict"], check=True, capture_output=True)


def _create_at_barrier(store: GitStore, wiki: str, barrier: threading.Barrier, outcomes: list[str]) -> None:
    barrier.wait(TIMEOUT)
    try:
        outcomes.append(store.create(wiki))
    except WikiExists:
        outcomes.append("exists")


def test_concurrent_creates_of_one_wiki_make_exactly_one(data_dir: Path) -> None:
    """Two stores creating the same wiki at the same moment: one succeeds, the other gets WikiExists."""
    for attempt in range(10):
        wiki = f"same-{attempt}"
        barrier = threading.Barrier(2)
        outcomes: list[str] = []
        threads = [
            threading.Thread(target=_create_at_barrier, args=(GitStore(data_dir), wiki, barrier, outcomes))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert sorted(o == "exists" for o in outcomes) == [False, True], outcomes
        winner = next(o for o in outcomes if o != "exists")
        assert _git(data_dir / "wikis" / f"{wiki}.git", "rev-parse", "main").strip() == winner
    # No temporary directories are left behind, only the wikis.
    assert sorted(p.name for p in (data_dir / "wikis").iterdir()) == [f"same-{i}.git" for i in range(10)]
