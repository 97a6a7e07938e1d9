"""Fencing with real processes: a worker paused while it holds ``main.lock``, resumed after another took its
partition over, records nothing and moves nothing; every job lands once, in order, and reports its own
commit on ``main``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.remotes import deployment, start_worker
from tests.e2e.service import Service
from tests.gitutil import git_text
from tests.integration.remote.conftest import start_site

BATCHES = 6
QUEUED_FIRST = 3  # the paused worker's group: the first job and the followers it took along


def _wait_until(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    """Poll ``done`` until it holds (failing after ``timeout`` seconds): waiting on a process's state."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling another process's state, not ordering our own work


def _stopped(process: subprocess.Popen[bytes]) -> bool:
    """True while ``process`` is stopped by a signal (state ``T`` in ``/proc``)."""
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _log_lines(service: Service) -> list[dict[str, Any]]:
    """Every JSON log line every process wrote so far."""
    lines = []
    for line in service.logs().splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def _git(service: Service, wiki: str, *args: str) -> str:
    repo = service.data / "wikis" / f"{wiki}.git"
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _batch(n: int) -> dict[str, Any]:
    return {
        "message": f"batch {n}",
        "edits": [
            {"op": "create", "path": f"wiki/p{n}.md", "content": f"page {n}\n"},
            {"op": "append", "path": "log.md", "content": f"- line {n}\n"},
        ],
    }


@pytest.mark.parametrize("resume", ["while_the_new_owner_holds_the_lock", "after_the_new_owner_finished"])
def test_a_worker_paused_holding_main_lock_records_nothing_after_a_takeover(
    tmp_path: Path, resume: str
) -> None:
    """Worker A takes a group of three jobs and is stopped holding ``main.lock`` (``git.locked``); B takes
    the partition over (a newer lease epoch), breaks A's lock and (first case) is stopped holding its own;
    then A is resumed. Neither A's rename nor A's finish may take effect: at the end every job succeeded
    once, each reporting the one commit on ``main`` whose trailer names it, in submission order, and only
    one ``job.succeeded`` was logged per job."""
    service = Service(tmp_path, WIKIQ_PARTITIONS="1", WIKIQ_LOG_LEVEL="info").start(workers=0, senders=0)
    try:
        wiki = "fenced"
        service.create_wiki(wiki)
        jobs = [service.submit(wiki, _batch(n)).json()["job_id"] for n in range(QUEUED_FIRST)]
        a = service.start_worker(WIKIQ_PAUSE_AT="git.locked")
        _wait_until("A to stop holding main.lock", lambda: _stopped(a))
        lock = service.data / "wikis" / f"{wiki}.git" / "refs" / "heads" / "main.lock"
        assert lock.exists()
        jobs += [service.submit(wiki, _batch(n)).json()["job_id"] for n in range(QUEUED_FIRST, BATCHES)]
        if resume == "while_the_new_owner_holds_the_lock":
            b = service.start_worker(WIKIQ_PAUSE_AT="git.locked")
            _wait_until("B to take over and stop holding its own main.lock", lambda: _stopped(b))
        else:
            b = service.start_worker()
            for job_id in jobs:
                assert service.wait(job_id, timeout=60)["status"] == "succeeded"
        os.kill(a.pid, signal.SIGCONT)

        def a_resumed_and_ended() -> bool:
            """A's run of its group ended: fenced (as it must), or, unfenced, with a follower recorded or
            its rename failing."""
            said = [line.get("event", "") for line in _log_lines(service)]
            ends = (f"job {jobs[0]}: fenced", f"job {jobs[0]}: unexpected error")
            if any(event.startswith(ends) for event in said):
                return True
            return (
                any(
                    service.client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
                    for job_id in jobs[1:QUEUED_FIRST]
                )
                and resume == "while_the_new_owner_holds_the_lock"
            )

        _wait_until("A's resumed run to end", a_resumed_and_ended)
        os.kill(b.pid, signal.SIGCONT)
        finished = [service.wait(job_id, timeout=90) for job_id in jobs]

        assert [job["status"] for job in finished] == ["succeeded"] * BATCHES, finished
        on_main = _git(service, wiki, "rev-list", "--first-parent", "--reverse", "main").split()
        reported = [job["result"]["commit"] for job in finished]
        assert set(reported) <= set(on_main), "a job reports a commit that is not on main"
        trailers = [
            _git(service, wiki, "log", "-1", "--format=%(trailers:key=Wikiq-Job,valueonly)", commit).strip()
            for commit in on_main
        ]
        ours = [(commit, job) for commit, job in zip(on_main, trailers, strict=True) if job]
        assert [job for _, job in ours] == jobs, "each job once on main, in submission order"
        assert [commit for commit, _ in ours] == reported
        log_md = _git(service, wiki, "show", "main:log.md")
        assert [line for line in log_md.splitlines() if line.startswith("- line")] == [
            f"- line {n}" for n in range(BATCHES)
        ]

        def succeeded() -> list[str]:
            return [line["job_id"] for line in _log_lines(service) if line.get("event") == "job.succeeded"]

        # a job is logged as succeeded just after it is recorded so: its line may still be on its way
        _wait_until("a job.succeeded line per job", lambda: set(succeeded()) >= set(jobs))
        assert sorted(succeeded()) == sorted(jobs), "one job.succeeded per job, by the run that recorded it"
        assert not lock.exists()
        fsck = subprocess.run(
            ["git", "--git-dir", str(service.data / "wikis" / f"{wiki}.git"), "fsck", "--no-dangling"],
            capture_output=True,
            text=True,
        )
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    finally:
        for process in service.workers:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
        service.stop()


def test_a_worker_paused_mid_publish_keeps_the_remote_in_submission_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote-backed wiki: worker A claims a group of three and is stopped with its commits written and
    nothing pushed (``publish.after_commit``), leaving the two followers ``running``. Worker B (its own
    data directory) takes the partition over while three more batches wait; it must apply the followers
    A left before anything accepted after them. A, resumed once B is done, pushes nothing and records
    nothing: on the remote every batch is one commit, in submission order, the one its job reports."""
    site = start_site("file", tmp_path, monkeypatch)
    repo, remote = site.new_repo("ordered.git")
    service = deployment(
        tmp_path / "svc",
        remote,
        workers=0,
        WIKIQ_PARTITIONS="1",
        WIKIQ_LOG_LEVEL="info",
        WIKIQ_LEASE_SECONDS="2",
    )
    try:
        wiki = "ordered"
        made = service.client.post("/v1/wikis", json={"id": wiki, "remote": remote.name})
        assert made.status_code == 201, made.text
        jobs = [service.submit(wiki, _batch(n)).json()["job_id"] for n in range(QUEUED_FIRST)]
        a = start_worker(service, 0, WIKIQ_PAUSE_AT="publish.after_commit")
        _wait_until("A to stop with its group written, nothing pushed", lambda: _stopped(a))
        held = [service.client.get(f"/v1/jobs/{job_id}").json()["status"] for job_id in jobs]
        assert held == ["running"] * QUEUED_FIRST, "A's group: the head and the followers it took along"
        jobs += [service.submit(wiki, _batch(n)).json()["job_id"] for n in range(QUEUED_FIRST, BATCHES)]
        start_worker(service, 1)
        finished = [service.wait(job_id, timeout=90) for job_id in jobs]
        assert [job["status"] for job in finished] == ["succeeded"] * BATCHES, finished

        os.kill(a.pid, signal.SIGCONT)
        said = f"job {jobs[0]}: fenced"
        _wait_until(
            "A's resumed run to be fenced",
            lambda: any(line.get("event", "").startswith(said) for line in _log_lines(service)),
        )
        remote_log = git_text(
            repo, "log", "--reverse", "--format=%H %(trailers:key=Wikiq-Job,valueonly)", "main"
        )
        ours = [line.split() for line in remote_log.splitlines() if len(line.split()) == 2]
        assert [job for _, job in ours] == jobs, "each batch once on the remote, in submission order"
        assert [commit for commit, _ in ours] == [job["result"]["commit"] for job in finished]
        log_md = git_text(repo, "show", "main:log.md")
        assert [line for line in log_md.splitlines() if line.startswith("- line")] == [
            f"- line {n}" for n in range(BATCHES)
        ]
        after = [service.client.get(f"/v1/jobs/{job_id}").json() for job_id in jobs]
        assert after == finished, "A's resumed run recorded nothing"
    finally:
        for process in service.workers:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
        service.stop()
