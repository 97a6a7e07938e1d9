"""A remote-backed wiki's group whose wait for its remote is cut short by arq's job timeout: the group's
jobs go back to the queue at their place and land exactly once, in order (real processes, real Redis, a
real git daemon whose hook refuses pushes until the test lets them through)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.e2e.remotes import batch, create, deployment, start_worker
from tests.gitutil import git_text
from tests.integration.remote.conftest import Site, start_site
from tests.integration.remote.repos import branch_head, refuse_pushes
from worker.jobs.arq_compat import job_keys

GROUP = 3  # the head and the followers it claims


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """A git daemon site."""
    started = start_site("git", tmp_path, monkeypatch)
    yield started
    started.stop()


def _wait_until(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    """Poll ``done`` until it holds (failing after ``timeout`` seconds): waiting on a process's state."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling another process's state, not ordering our own work


def test_a_group_whose_remote_wait_times_out_runs_again_and_lands_once_in_order(
    daemon: Site, tmp_path: Path
) -> None:
    """Three batches queued while no worker runs, then one worker: its group (the head and two followers)
    is refused by the remote's hook and waits between pushes, backing off, until arq's job timeout (2 s,
    no remote wait added) cuts the wait short. The head's arq entry stays queued and runs again; once the
    hook lets pushes through, every job succeeds with exactly one commit on the remote, in submission
    order."""
    repo, remote = daemon.new_repo()
    service = deployment(
        tmp_path / "svc",
        remote,
        workers=0,
        WIKIQ_JOB_TIMEOUT_SECONDS="2",
        WIKIQ_REMOTE_WAIT_SECONDS="0",
        WIKIQ_REMOTE_PUSH_ATTEMPTS="50",
    )
    client = redis.Redis.from_url(service.redis.url)
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        worker = start_worker(service, 0)
        assert service.apply("docs", batch("first", create("wiki/first.md")))["status"] == "succeeded"
        service.kill_worker(worker)
        refuse_pushes(repo, message="not yet")
        ids = [
            service.submit("docs", batch(f"b{n}", create(f"wiki/b{n}.md", f"{n}\n"))).json()["job_id"]
            for n in range(GROUP)
        ]
        head_entry, _, _, head_tries = job_keys(ids[0])
        start_worker(service, 0)

        def first_run_over() -> bool:  # arq dropped the entry, or started the head's second run
            return not client.exists(head_entry) or int(client.get(head_tries) or 0) >= 2

        _wait_until("the head's first run to end", first_run_over, timeout=90)
        assert client.exists(head_entry), "arq dropped the head's entry: its record stays running for ever"
        (repo / "hooks" / "pre-receive").unlink()
        jobs = [service.wait(job_id, timeout=90) for job_id in ids]
        assert [job["status"] for job in jobs] == ["succeeded"] * GROUP, jobs
        log = git_text(repo, "log", "--reverse", "--format=%(trailers:key=Wikiq-Job,valueonly)", "main")
        assert [line.strip() for line in log.splitlines() if line.strip()][1:] == ids  # once each, in order
        commits = git_text(repo, "log", "--reverse", "--format=%H", "main").split()[-GROUP:]
        assert [job["result"]["commit"] for job in jobs] == commits
        assert branch_head(repo) == commits[-1]
    finally:
        client.close()
        service.stop()
