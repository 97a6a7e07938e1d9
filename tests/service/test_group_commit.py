"""Group commit (``worker.jobs.pipeline`` on a ``LocalTarget``): batches of a local wiki queued behind the
running one land with it, each as its own commit, in acceptance order, in one pack, one syncfs, one move of
``main``; and exactly once when the worker dies between landing them and recording them.

Batches are queued while the in-process worker is paused, so they are all waiting when it resumes.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from tests.gitutil import blob_id
from tests.service.harness import Deployment, create
from worker import keys
from worker.git import GitStore
from worker.jobs.arq_compat import job_keys
from worker.jobs.ids import partition_of
from worker.jobs.pipeline import Member, run
from worker.jobs.proofs import CommitKey
from worker.jobs.store import JobStore
from worker.jobs.targets import LocalTarget
from worker.keys import outbox

SETTINGS = {"partitions": 1}  # one queue: every job of the module is behind the one running


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _packs_holding(repo: Path, commits: list[str]) -> set[str]:
    """The pack files that hold ``commits`` (``git verify-pack``)."""
    found = set()
    for idx in (repo / "objects" / "pack").glob("*.idx"):
        listed = _git(repo, "verify-pack", "-v", str(idx))
        if any(commit in listed for commit in commits):
            found.add(idx.name)
    return found


async def _queue_while_paused(dep: Deployment, wiki: str, batches: list[dict[str, Any]]) -> list[str]:
    """Submit ``batches`` with the worker paused; their job ids, once the worker is back."""
    async with dep.worker.paused():
        ids = [await dep.submit_ok(wiki, batch) for batch in batches]
    return ids


async def test_queued_batches_land_as_consecutive_commits_in_one_pack(dep: Deployment) -> None:
    """Five batches waiting behind each other: five commits, one per batch with its own trailer and the
    previous one as parent, in acceptance order, all written in one pack; every job succeeds."""
    wiki = await dep.new_wiki("group")
    before = await dep.head(wiki)
    batches = [{"message": f"batch {n}", "edits": [create(f"wiki/g{n}.md", f"{n}\n")]} for n in range(5)]
    ids = await _queue_while_paused(dep, wiki, batches)
    jobs = [await dep.wait(job_id) for job_id in ids]
    assert [job["status"] for job in jobs] == ["succeeded"] * 5, jobs
    commits = [job["result"]["commit"] for job in jobs]
    log = await dep.commits(wiki, 6)
    assert [c["commit"] for c in log] == [*reversed(commits), before]
    assert [c["job_id"] for c in log[:5]] == list(reversed(ids))
    repo = dep.repo(wiki)
    for child, parent in zip(commits, [before, *commits[:-1]], strict=True):
        assert _git(repo, "rev-parse", f"{child}^").strip() == parent
    assert len(_packs_holding(repo, commits)) == 1
    _git(repo, "fsck", "--strict")


async def test_a_refused_batch_fails_alone_and_the_next_sees_the_ones_before(dep: Deployment) -> None:
    """In one group: a batch refused by its versions fails alone; the batch after it applies on the head the
    batches before it left (its expected version is the one the first batch produced)."""
    wiki = await dep.new_wiki("group")
    v1, v2 = blob_id(b"one\n"), blob_id(b"two\n")
    batches = [
        {"message": "create", "edits": [create("wiki/p.md", "one\n")]},
        {"message": "stale", "edits": [{"op": "delete", "path": "wiki/p.md", "expected_version": "0" * 40}]},
        {
            "message": "chain",
            "edits": [{"op": "overwrite", "path": "wiki/p.md", "content": "two\n", "expected_version": v1}],
        },
    ]
    ids = await _queue_while_paused(dep, wiki, batches)
    first, stale, chain = [await dep.wait(job_id) for job_id in ids]
    assert (first["status"], stale["status"], chain["status"]) == ("succeeded", "failed", "succeeded")
    assert stale["error"]["code"] == "VERSION_MISMATCH"
    assert (await dep.page(wiki, "wiki/p.md"))["version"] == v2
    assert [c["job_id"] for c in await dep.commits(wiki, 2)] == [ids[2], ids[0]]


async def test_followers_leave_arq_queue_and_have_their_webhook_queued(dep: Deployment) -> None:
    """The jobs taken along leave arq's queue (no entry left to run again) and each one's webhook is
    handed to the partition's outbox (one entry, round 0), as for a job arq ran itself."""
    wiki = await dep.new_wiki("group")
    url = "http://receiver.test/hook"
    batches = [
        {"message": f"hooked {n}", "edits": [create(f"wiki/h{n}.md")], "webhook": {"url": url}}
        for n in range(3)
    ]
    ids = await _queue_while_paused(dep, wiki, batches)
    for job_id in ids:
        assert (await dep.wait(job_id))["status"] == "succeeded"
    partition = partition_of(wiki, dep.settings.partitions)
    assert await dep.redis.zrange(keys.queue(partition), 0, -1) == []
    for job_id in ids:
        entry, _, in_progress, retry = job_keys(job_id)
        assert not await dep.redis.exists(entry, in_progress, retry)
    handed = [
        (fields[b"job"].decode(), fields[b"round"]) for _, fields in await dep.redis.xrange(outbox(partition))
    ]
    assert [entry for entry in handed if entry[0] in ids] == [(job_id, b"0") for job_id in ids]


async def test_a_group_landed_but_not_recorded_is_reported_once(dep: Deployment) -> None:
    """A worker that dies after landing a group and before recording it: the jobs run again (as arq runs
    them), each finds its own commit by trailer, and no batch is committed twice."""
    wiki = await dep.new_wiki("group")
    before = await dep.head(wiki)
    batches = [{"message": f"crash {n}", "edits": [create(f"wiki/c{n}.md")]} for n in range(3)]
    async with dep.worker.paused():
        ids = [await dep.submit_ok(wiki, batch) for batch in batches]
        jobs = JobStore(dep.redis, dep.settings.job_retention_seconds)
        head, stored = await jobs.update_stored(ids[0], _running)
        assert head is not None
        store = GitStore(dep.data)
        repo = store.open(wiki)
        key = await CommitKey().get(dep.settings, dep.redis)  # the deployment's
        first = Member(head, stored)
        landed = await run(jobs, LocalTarget(repo), first, dep.settings.limits, key, None, asyncio.Event())
        assert [d.job_id for d in landed] == ids
        store.close()
        assert all(d.result is not None for d in landed)
        # ... and the worker dies here: nothing recorded, the jobs stay running in arq's queue
    results = [await dep.wait(job_id) for job_id in ids]
    assert [r["status"] for r in results] == ["succeeded"] * 3, results
    assert [r["result"]["commit"] for r in results] == [d.result.commit for d in landed if d.result]
    log = await dep.commits(wiki, 5)
    assert [c["job_id"] for c in log[:3]] == list(reversed(ids))
    assert log[3]["commit"] == before


async def test_a_job_interrupted_past_max_job_tries_is_reported_failed(dep: Deployment) -> None:
    """A job whose runs kept dying (its record counts max_job_tries runs) is not run once more: its next
    start records it failed, INTERNAL, saying how often it was interrupted, and nothing lands."""
    wiki = await dep.new_wiki("gave-up")
    before = await dep.head(wiki)
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "doomed", "edits": [create("wiki/d.md")]})
        jobs = JobStore(dep.redis, dep.settings.job_retention_seconds)

        def interrupted(record: Any) -> Any:
            for _ in range(dep.settings.max_job_tries):
                _running(record)
            return record

        assert (await jobs.update(job_id, interrupted)) is not None
    job = await dep.wait(job_id)
    assert job["status"] == "failed" and job["error"]["code"] == "INTERNAL", job
    assert f"interrupted {dep.settings.max_job_tries} times" in job["error"]["message"]
    assert await dep.head(wiki) == before


def _running(record: Any) -> Any:
    record.status = "running"
    record.begin_run()
    return record
