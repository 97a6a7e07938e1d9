"""The engine section: commits/s of 10-edit batches through preflight + WikiRepo.commit_plan, vs GitPython
and libgit2.

Each wiki is built in one ``git fast-import`` as a bare repository in the store's layout, then batches of
6 overwrites, 2 creates, 1 delete and 1 rename are committed one after the other the way the worker does it:
a fresh head snapshot, ``preflight``, ``commit_plan`` (durable: one ``syncfs`` per commit). On the nested
layouts the same batches are also committed through libgit2 (``bench.libgit2``) on a copy of the freshly
built repository, in blocks alternating with the engine's (ABBA), and the two CPU times per commit
compared. The baseline commits the same kind of batches through a GitPython working tree and index,
without any fsync.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import io
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git

from bench import libgit2
from bench.report import Context, Row, spread
from bench.wikis import Layout, build_bare, clone_worktree
from bench.workload import Workload
from worker.engine import preflight
from worker.git import GitStore, Identity, WikiRepo
from worker.git import refs as gitrefs

AUTHOR = Identity("bench", "bench@localhost")
WARMUP = 5
TARGET_COMMITS_PER_S = 150.0
TARGET_SLOWDOWN = 1.5
SAME_FOLDERS = 100  # the re-posed goal: batches touching pages of the same 100 folders at every size
SAME_FOLDERS_WARMUP = 60  # untimed commits first, so that those folders' trees are parsed at both sizes
TARGET_SAME_FOLDERS = 1.25  # 100 000 pages within 1.25x of 10 000, on the same batch shape and folders
TARGET_LARGE_PER_S = 250.0  # ... and at least this many commits/s at 100 000 pages
WORKTREE_TIMEOUT_S = 120.0
PROFILE_TOP = 12
SMALL, LARGE, WIDE = 100, 100_000, 10_000
PEER_BLOCKS = 8  # alternating blocks, engine then libgit2 then libgit2 then engine (ABBA), 4 of each
TARGET_OVER_LIBGIT2 = {SMALL: 1.5, WIDE: 2.5, LARGE: 2.5}  # libgit2 CPU per commit over the engine's
TARGET_CPU_MS = {WIDE: 1.5}  # the engine's CPU per commit


@dataclass(frozen=True)
class Sizes:
    """How much to measure: layouts, engine commits per layout (and per size of the same-folders
    comparison), baseline commits per layout name, and which layout to profile."""

    layouts: tuple[Layout, ...]
    engine_commits: int
    baseline_commits: dict[str, int]
    profile_commits: int
    profile_layout: str


_LAYOUTS = (Layout("nested", SMALL), Layout("nested", 10_000), Layout("nested", LARGE), Layout("flat", WIDE))
FULL = Sizes(
    layouts=_LAYOUTS,
    engine_commits=200,
    baseline_commits={"nested_100": 50, "nested_10000": 10, "nested_100000": 4},
    profile_commits=100,
    profile_layout="nested_100000",
)
QUICK = Sizes(
    layouts=_LAYOUTS,
    engine_commits=40,
    baseline_commits={"nested_100": 10, "nested_10000": 3},
    profile_commits=30,
    profile_layout="nested_100000",
)


@dataclass
class EngineRun:
    """Each timed commit's wall seconds; CPU seconds, syncfs and object-read calls, loose objects written;
    ``system``: the CPU seconds of the commits' loop spent in the kernel (part of ``cpu``)."""

    wall: list[float]
    cpu: float
    syncfs: list[float]
    reads: list[float]
    objects: int
    system: float = 0.0

    @property
    def commits_per_s(self) -> float:
        """Sequential throughput: commits over the wall time they took."""
        return len(self.wall) / sum(self.wall)

    def __add__(self, other: EngineRun) -> EngineRun:
        """Both runs' commits as one run."""
        return EngineRun(
            self.wall + other.wall,
            self.cpu + other.cpu,
            self.syncfs + other.syncfs,
            self.reads + other.reads,
            self.objects + other.objects,
            self.system + other.system,
        )


@dataclass
class PeerRun:
    """The engine and libgit2 on the same batches in alternating blocks: each block's CPU ms per commit,
    and the total commits of each."""

    version: str
    engine_ms: list[float]
    libgit2_ms: list[float]
    commits: int

    @property
    def over(self) -> float:
        """libgit2's CPU per commit over the engine's: the medians of their blocks (a block the machine's
        load inflated weighs no more than any other)."""
        return statistics.median(self.libgit2_ms) / statistics.median(self.engine_ms)


@dataclass
class BaselineRun:
    """The GitPython baseline on one layout: clone and per-commit seconds, or why it was skipped."""

    cloned: float | None = None
    wall: tuple[float, ...] = ()
    skipped: str = ""

    @property
    def commits_per_s(self) -> float:
        """Sequential throughput: commits over the wall time they took."""
        return len(self.wall) / sum(self.wall)


@contextlib.contextmanager
def timed_calls(owner: object, name: str) -> Iterator[list[float]]:
    """Record the seconds of each call of ``owner.name`` while active (the same call, only timed)."""
    original = getattr(owner, name)
    spent: list[float] = []

    @functools.wraps(original)
    def timed(*args: object, **kwargs: object) -> object:
        """The original call, timed."""
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    setattr(owner, name, timed)
    try:
        yield spent
    finally:
        setattr(owner, name, original)


def loose_objects(repo: Path) -> int:
    """How many loose objects ``repo`` holds (``git count-objects``)."""
    out = subprocess.run(["git", "--git-dir", str(repo), "count-objects"], check=True, capture_output=True)
    return int(out.stdout.split()[0])


def engine_commit(repo: WikiRepo, workload: Workload, job: int) -> tuple[float, float]:
    """One batch as the worker runs it (fresh snapshot, preflight, commit_plan); its wall and CPU seconds."""
    batch = workload.batch()
    start, cpu = time.perf_counter(), time.process_time()
    head = repo.snapshot()
    plan = preflight(head, batch.edits)
    repo.commit_plan(plan, head.commit, batch.message, AUTHOR, job_id=f"bench-{job}")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if plan.applied != workload.expected(batch):
        raise AssertionError(f"engine applied {plan.applied} for {batch.edits}")
    workload.record(plan.applied)
    return wall, cpu


def run_engine(
    repo: WikiRepo, workload: Workload, commits: int, warmup: int = WARMUP, first: int = 0
) -> EngineRun:
    """``commits`` sequential engine commits after a short untimed warm-up (jobs numbered from ``first``)."""
    for job in range(first, first + warmup):
        engine_commit(repo, workload, job)
    before = loose_objects(repo.path)
    wall: list[float] = []
    cpu = 0.0
    start = first + warmup
    kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    with timed_calls(gitrefs, "sync_filesystem") as syncfs, timed_calls(WikiRepo, "_read") as reads:
        for job in range(start, start + commits):
            seconds, cpu_seconds = engine_commit(repo, workload, job)
            wall.append(seconds)
            cpu += cpu_seconds
    kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime - kernel
    return EngineRun(wall, cpu, syncfs, reads, loose_objects(repo.path) - before, kernel)


def file_create_ms(folder: Path, count: int = 200) -> float:
    """CPU milliseconds this process spends creating one empty file in ``folder`` (the machine's price of
    each of the three files a commit creates: its pack, its index and ``main.lock``). On ext4 it depends on
    the folder: a block group with no free inode sends every creation on a search of the others."""
    names = [folder / f"tmp_bench_{os.getpid()}_{n}" for n in range(count)]
    start = time.process_time()
    for name in names:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444))
    spent = time.process_time() - start
    for name in names:
        name.unlink()
    return spent * 1000 / count


def run_with_peer(
    repo: WikiRepo, workload: Workload, peer: libgit2.Libgit2Peer, peer_workload: Workload, commits: int
) -> tuple[EngineRun, PeerRun]:
    """``commits`` engine commits and the same batches through libgit2, in ``PEER_BLOCKS`` alternating
    blocks (ABBA: a drift in the machine's load weighs on both alike) after a warm-up of each."""
    for job in range(WARMUP):
        engine_commit(repo, workload, job)
        peer.commit(peer_workload)
    os.sync()
    block = max(1, commits // (PEER_BLOCKS // 2))
    first = WARMUP
    run: EngineRun | None = None
    engine_ms: list[float] = []
    libgit2_ms: list[float] = []
    for turn in range(PEER_BLOCKS):
        if turn % 4 in (0, 3):
            part = run_engine(repo, workload, block, warmup=0, first=first)
            first += block
            run = part if run is None else run + part
            engine_ms.append(part.cpu * 1000 / block)
        else:
            libgit2_ms.append(sum(peer.commit(peer_workload) for _ in range(block)) * 1000 / block)
            # libgit2 does not flush: its loose objects would be written back inside the engine's next
            # syncfs (which flushes the whole file system) and billed to the engine
            os.sync()
    assert run is not None
    if peer.head_tree() != repo.tree_of(repo.head() or ""):
        raise AssertionError("libgit2 and the engine made different trees from the same batches")
    return run, PeerRun(peer.version, engine_ms, libgit2_ms, len(run.wall))


def check_head(repo: WikiRepo, workload: Workload, commits: int) -> None:
    """The head holds what the workload expects for a sample of pages, ``commits`` commits after the first."""
    head = repo.snapshot()
    for path in workload.live[:: max(1, len(workload.live) // 50)]:
        if head.version(path) != workload.versions[path]:
            raise AssertionError(f"{path}: head has {head.version(path)}, expected {workload.versions[path]}")
    log = repo.log(commits + 2)
    if len(log) != commits + 1 or log[-1].parents:
        raise AssertionError(f"expected {commits} commits on top of the initial one, found {len(log) - 1}")


def profile_engine(repo: WikiRepo, workload: Workload, commits: int) -> str:
    """cProfile over ``commits`` engine commits: the top functions by cumulative time, as text."""
    profiler = cProfile.Profile()
    profiler.enable()
    for job in range(commits):
        engine_commit(repo, workload, 1_000_000 + job)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(PROFILE_TOP)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip())


def write_batch(root: Path, workload: Workload) -> tuple[str, list[str], list[str]]:
    """Apply the next batch to the files under ``root``; (message, paths to add, paths to remove)."""
    batch = workload.batch()
    added: list[str] = []
    removed: list[str] = []
    for edit in batch.edits:
        if edit.op in ("overwrite", "create"):
            (root / edit.path).parent.mkdir(parents=True, exist_ok=True)
            (root / edit.path).write_text(edit.content)
            added.append(edit.path)
        elif edit.op == "delete":
            (root / edit.path).unlink()
            removed.append(edit.path)
        elif edit.op == "rename":
            (root / edit.new_path).parent.mkdir(parents=True, exist_ok=True)
            os.rename(root / edit.path, root / edit.new_path)
            removed.append(edit.path)
            added.append(edit.new_path)
    workload.record(workload.expected(batch))
    return batch.message, added, removed


def baseline_commit(repo: git.Repo, workload: Workload) -> float:
    """One batch committed naively: files in a working tree, GitPython ``index`` add/remove and commit."""
    start = time.perf_counter()
    message, added, removed = write_batch(Path(repo.working_tree_dir or "."), workload)
    index = repo.index
    index.remove(removed)
    index.add(added)
    index.commit(message)
    return time.perf_counter() - start


def run_baseline(bare: Path, dest: Path, workload: Workload, commits: int) -> BaselineRun:
    """Clone a working tree of ``bare`` at ``dest`` and commit ``commits`` batches in it."""
    start = time.perf_counter()
    if not clone_worktree(bare, dest, WORKTREE_TIMEOUT_S):
        return BaselineRun(skipped=f"building the working tree took over {WORKTREE_TIMEOUT_S:.0f} s")
    cloned = time.perf_counter() - start
    repo = git.Repo(dest)
    try:
        first = int(repo.git.rev_list("--count", "HEAD"))
        wall = tuple(baseline_commit(repo, workload) for _ in range(commits))
        if int(repo.git.rev_list("--count", "HEAD")) != first + commits:
            raise AssertionError("the baseline lost commits")
    finally:
        repo.close()
        shutil.rmtree(dest, ignore_errors=True)
        os.sync()
    return BaselineRun(cloned, wall)


def _verdict(ok: bool) -> str:
    """The note of a figure that has a target."""
    return "meets target" if ok else "BELOW TARGET"


def engine_rows(layout: Layout, built: float, run: EngineRun) -> list[Row]:
    """The figures of one layout's engine run."""
    key = f"engine.{layout.name}"
    ms = sorted(x * 1000 for x in run.wall)
    n = len(ms)
    rate = run.commits_per_s
    cpu = run.cpu * 1000 / n
    cpu_note = "CPU of this process (git children excluded)"
    target = TARGET_CPU_MS.get(layout.pages) if layout.kind == "nested" else None
    if target is not None:
        cpu_note += f"; target ≤ {target}: {_verdict(cpu <= target)}"
    return [
        Row(f"{key}.build_s", built, "s", f"git fast-import of {layout.pages:,} pages + 3 root files"),
        Row(
            f"{key}.commits_per_s",
            rate,
            "commits/s",
            f"{n} commits; target ≥ {TARGET_COMMITS_PER_S:.0f}: {_verdict(rate >= TARGET_COMMITS_PER_S)}",
        ),
        Row(f"{key}.p50_ms", statistics.median(ms), "ms", "latency per commit"),
        Row(f"{key}.p99_ms", ms[round(0.99 * (n - 1))], "ms", "latency per commit"),
        Row(f"{key}.cpu_ms", cpu, "ms/commit", cpu_note),
        Row(f"{key}.cpu_system_ms", run.system * 1000 / n, "ms/commit", "of cpu_ms, in the kernel"),
        Row(f"{key}.syncfs_ms", sum(run.syncfs) * 1000 / n, "ms/commit", "inside syncfs (durability)"),
        Row(f"{key}.objects_per_commit", run.objects / n, "objects", "loose objects written per commit"),
        Row(
            f"{key}.reads_per_commit",
            len(run.reads) / n,
            "reads",
            "git cat-file reads (head commit, cold trees)",
        ),
        Row(f"{key}.reads_ms", sum(run.reads) * 1000 / n, "ms/commit", "inside those reads"),
    ]


def _blocks(ms: list[float]) -> str:
    """Min and median of per-block figures."""
    return f"blocks min {min(ms):.3f} / median {statistics.median(ms):.3f}"


def peer_rows(layout: Layout, peer: PeerRun | None, skipped: str) -> list[Row]:
    """The libgit2 peer's figures on one layout, and its CPU per commit over the engine's."""
    key = f"engine.{layout.name}"
    if peer is None:
        return [Row(f"{key}.over_libgit2", None, "x", f"skipped: {skipped}")]
    target = TARGET_OVER_LIBGIT2.get(layout.pages)
    verdict = "" if target is None else f"; target ≥ {target}: {_verdict(peer.over >= target)}"
    return [
        Row(
            f"{key}.libgit2_cpu_ms",
            statistics.fmean(peer.libgit2_ms),
            "ms/commit",
            f"{peer.version}: TreeBuilder on the changed paths, create_commit, loose objects, no checks, "
            f"no fsync; {peer.commits} commits; {_blocks(peer.libgit2_ms)} "
            f"(engine: {_blocks(peer.engine_ms)})",
        ),
        Row(
            f"{key}.over_libgit2",
            peer.over,
            "x",
            f"libgit2 CPU per commit over the engine's (medians of {len(peer.engine_ms)} + "
            f"{len(peer.libgit2_ms)} alternating blocks of the same batches){verdict}",
        ),
    ]


def baseline_rows(layout: Layout, engine: EngineRun, baseline: BaselineRun) -> list[Row]:
    """The figures of one layout's GitPython baseline, and the engine's speed-up over it."""
    key = f"engine.{layout.name}"
    if not baseline.wall:
        return [Row(f"{key}.baseline_commits_per_s", None, "commits/s", f"skipped: {baseline.skipped}")]
    return [
        Row(f"{key}.baseline_clone_s", baseline.cloned, "s", "git clone + checkout of the working tree"),
        Row(
            f"{key}.baseline_commits_per_s",
            baseline.commits_per_s,
            "commits/s",
            f"GitPython worktree + index, {len(baseline.wall)} commits, no fsync",
        ),
        Row(
            f"{key}.engine_over_baseline",
            engine.commits_per_s / baseline.commits_per_s,
            "x",
            "engine+store commits/s over baseline commits/s",
        ),
    ]


def peer_skipped(layout: Layout) -> str:
    """Why the libgit2 peer does not run on ``layout`` ("" when it does)."""
    if layout.kind != "nested":
        return "run at the nested sizes only"
    if not libgit2.available():
        return "pygit2 is not installed (pip install '.[bench]')"
    return ""


def measure_engine(
    ctx: Context, sizes: Sizes, layout: Layout, data: Path
) -> tuple[float, EngineRun, Workload, PeerRun | None]:
    """Build one wiki under ``data`` and time the engine on it, beside libgit2 on a copy of it when it can
    (and profile the engine when asked); (build s, run, workload, libgit2 peer)."""
    wiki = layout.name.replace("_", "-")
    data.mkdir(parents=True, exist_ok=True)
    spread(data)  # the engine's repository and libgit2's copy each in a block group of its own
    start = time.perf_counter()
    versions = build_bare(data, wiki, layout)
    built = time.perf_counter() - start
    workload = Workload(layout, dict(versions))
    store = GitStore(data)
    peer: libgit2.Libgit2Peer | None = None
    peer_run: PeerRun | None = None
    try:
        repo = store.open(wiki)
        if not peer_skipped(layout):
            copy = data / "libgit2" / f"{wiki}.git"
            shutil.copytree(store.path(wiki), copy)
            peer = libgit2.Libgit2Peer(copy)
            run, peer_run = run_with_peer(
                repo, workload, peer, Workload(layout, dict(versions)), sizes.engine_commits
            )
        else:
            run = run_engine(repo, workload, sizes.engine_commits)
        check_head(repo, workload, WARMUP + len(run.wall))
        if layout.name == sizes.profile_layout:
            text = profile_engine(repo, workload, sizes.profile_commits)
            ctx.notes.append(f"cProfile of {sizes.profile_commits} engine commits on {layout.name}:\n{text}")
    finally:
        if peer is not None:
            peer.close()
        store.close()
    os.sync()
    return built, run, workload, peer_run


def measure_same_folders(ctx: Context, sizes: Sizes) -> list[Row]:
    """The re-posed goal: the same batch shape on pages of the same ``SAME_FOLDERS`` folders of 100, on a
    wiki of 10 000 and one of 100 000 pages, in one process.

    Both wikis are built and warmed up first (``SAME_FOLDERS_WARMUP`` untimed commits each, so that those
    folders' trees are parsed at both sizes); then the timed commits alternate in four blocks, 10 000,
    100 000, 100 000, 10 000 (ABBA): a machine whose load drifts during the comparison weighs on both sizes
    alike instead of on whichever ran second."""
    data = ctx.workdir / "same-folders"
    layouts = {size: Layout("nested", size) for size in (WIDE, LARGE)}
    wikis = {size: layout.name.replace("_", "-") for size, layout in layouts.items()}
    workloads = {
        size: Workload(layout, build_bare(data, wikis[size], layout), seed=7, folders=SAME_FOLDERS)
        for size, layout in layouts.items()
    }
    store = GitStore(data)
    runs: dict[int, EngineRun] = {}
    try:
        repos = {size: store.open(wiki) for size, wiki in wikis.items()}
        for size, repo in repos.items():
            run_engine(repo, workloads[size], 0, warmup=SAME_FOLDERS_WARMUP)
        block = sizes.engine_commits // 2
        first = SAME_FOLDERS_WARMUP
        for size in (WIDE, LARGE, LARGE, WIDE):
            run = run_engine(repos[size], workloads[size], block, warmup=0, first=first)
            runs[size] = runs[size] + run if size in runs else run
            first += block
    finally:
        store.close()
        shutil.rmtree(data, ignore_errors=True)
    ctx.console.log("engine: same folders done")
    rows: list[Row] = []
    for size, run in runs.items():
        key = f"engine.{layouts[size].name}.same_folders"
        ms = sorted(x * 1000 for x in run.wall)
        rows += [
            Row(
                f"{key}_commits_per_s",
                run.commits_per_s,
                "commits/s",
                f"{len(ms)} batches on pages of the same {SAME_FOLDERS} folders (warm-up "
                f"{SAME_FOLDERS_WARMUP}; 10k and 100k alternate, ABBA)",
            ),
            Row(f"{key}_p50_ms", statistics.median(ms), "ms", "per commit"),
            Row(
                f"{key}_cpu_ms",
                run.cpu * 1000 / len(ms),
                "ms/commit",
                "CPU of this process (steadier than wall time on a busy machine)",
            ),
        ]
    return rows


def measure_layout(ctx: Context, sizes: Sizes, layout: Layout) -> list[Row]:
    """The engine, then the GitPython baseline (on a clone of the engine's result), on one layout."""
    data = ctx.workdir / layout.name
    built, engine, workload, peer = measure_engine(ctx, sizes, layout, data)
    bare = GitStore(data).path(layout.name.replace("_", "-"))
    create = Row(
        f"engine.{layout.name}.file_create_ms",
        file_create_ms(bare / "objects" / "pack"),
        "ms CPU",
        "one empty file created in this repository's objects/pack: the machine's price of each of a "
        "commit's three new files",
    )
    commits = sizes.baseline_commits.get(layout.name, 0)
    if commits:
        baseline = run_baseline(bare, data / "worktree", workload, commits)
    else:
        baseline = BaselineRun(skipped="--quick" if ctx.quick else "run at the nested sizes only")
    shutil.rmtree(data, ignore_errors=True)
    ctx.console.log(f"engine: {layout.name} done")
    return [
        *engine_rows(layout, built, engine),
        create,
        *peer_rows(layout, peer, peer_skipped(layout)),
        *baseline_rows(layout, engine, baseline),
    ]


def summary_rows(rows: list[Row]) -> list[Row]:
    """Ratios across layouts: the 100k/100 scaling and the cost of one wide folder."""
    rate = {r.name: r.value for r in rows if isinstance(r.value, float)}
    small = rate.get(f"engine.nested_{SMALL}.commits_per_s")
    large = rate.get(f"engine.nested_{LARGE}.commits_per_s")
    flat = rate.get(f"engine.flat_{WIDE}.commits_per_s")
    nested = rate.get(f"engine.nested_{WIDE}.commits_per_s")
    out: list[Row] = []
    if isinstance(small, float) and isinstance(large, float):
        note = f"target ≥ {1 / TARGET_SLOWDOWN:.2f} (within {TARGET_SLOWDOWN}x)"
        out.append(
            Row(
                f"engine.ratio_{LARGE}_over_{SMALL}",
                large / small,
                "x",
                f"commits/s at {LARGE:,} over {SMALL}; {note}: {_verdict(large * TARGET_SLOWDOWN >= small)}",
            )
        )
    same_small = rate.get(f"engine.nested_{WIDE}.same_folders_commits_per_s")
    same_large = rate.get(f"engine.nested_{LARGE}.same_folders_commits_per_s")
    if isinstance(same_small, float) and isinstance(same_large, float):
        ok = same_large * TARGET_SAME_FOLDERS >= same_small and same_large >= TARGET_LARGE_PER_S
        out.append(
            Row(
                "engine.same_folders_100k_over_10k",
                same_large / same_small,
                "x",
                f"commits/s at {LARGE:,} over {WIDE:,} pages, same batch shape and folders; target "
                f"≥ {1 / TARGET_SAME_FOLDERS:.2f} and ≥ {TARGET_LARGE_PER_S:.0f}/s at {LARGE:,}: "
                f"{_verdict(ok)}",
            )
        )
    if isinstance(flat, float) and isinstance(nested, float):
        out.append(
            Row(
                f"engine.ratio_flat_over_nested_{WIDE}",
                flat / nested,
                "x",
                f"commits/s with {WIDE:,} pages in one folder over 100 folders of 100",
            )
        )
    return out


def section(ctx: Context) -> list[Row]:
    """The engine section: every layout, then the ratios between them."""
    sizes = QUICK if ctx.quick else FULL
    rows: list[Row] = []
    for layout in sizes.layouts:
        rows += measure_layout(ctx, sizes, layout)
    rows += measure_same_folders(ctx, sizes)
    return rows + summary_rows(rows)
