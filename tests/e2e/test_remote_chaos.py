"""Exactly once with remote-backed wikis while workers are SIGKILLed at each step of publishing.

Two workers, each with its own data directory (nothing shared but Redis and the remote), kill themselves
at the crash points of ``worker.faults`` (after the group's local commits, a few milliseconds into the
push, after the push was accepted but before anything was recorded) and are started again; the test adds
kills of its own until at least eight happened. Every accepted job must end succeeded with exactly one
commit carrying its trailer on the remote branch, in the order the jobs of its wiki were submitted.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.remotes import batch, create, deployment, start_worker
from tests.gitutil import git_text
from tests.integration.remote.conftest import start_site

FAULTS = "publish.after_commit:0.06,publish.during_push:0.06,publish.after_push:0.06"
WIKIS = 3
BATCHES = 210


def test_sigkill_at_each_publishing_step_applies_every_batch_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """210 batches over 3 remote-backed wikis, 2 workers with separate data dirs, at least 8 SIGKILLs."""
    site = start_site("git", tmp_path, monkeypatch)
    repos, remotes = {}, []
    for i in range(WIKIS):
        repo, remote = site.new_repo(f"w{i}.git")
        remote = remote.model_copy(update={"name": f"r{i}"})
        repos[f"w{i}"] = repo
        remotes.append(remote)
    service = deployment(tmp_path / "svc", *remotes, workers=0, WIKIQ_REMOTE_COALESCE_MAX="4")
    try:
        for i in range(WIKIS):
            made = service.client.post("/v1/wikis", json={"id": f"w{i}", "remote": f"r{i}"})
            assert made.status_code == 201, made.text
        jobs: dict[str, tuple[str, int]] = {}
        for n in range(BATCHES):
            wiki = f"w{n % WIKIS}"
            answer = service.submit(wiki, batch(f"batch {n}", create(f"wiki/b{n}.md", f"{n}\n")))
            assert answer.status_code == 202, answer.text
            jobs[answer.json()["job_id"]] = (wiki, n)
        workers = {n: start_worker(service, n, WIKIQ_FAULTS=FAULTS) for n in range(2)}
        rng = random.Random(11)
        kills = 0
        deadline = time.monotonic() + 600

        def pending() -> bool:
            """Some job of some wiki still queued or running: the workers must go on (and be restarted)
            until none is, or a worker that kills itself after the last restart strands the rest."""
            for i in range(WIKIS):
                listed = service.client.get(f"/v1/wikis/w{i}/jobs", params={"limit": BATCHES}).json()
                if any(job["status"] in ("queued", "running") for job in listed["jobs"]):
                    return True
            return False

        while True:
            assert time.monotonic() < deadline, "the jobs did not finish"
            for number, process in workers.items():
                if process.poll() is not None:  # it killed itself at a crash point
                    kills += 1
                    service.workers.remove(process)
                    workers[number] = start_worker(service, number, WIKIQ_FAULTS=FAULTS)
            if kills >= 8 and not pending():
                break
            if kills < 8 and rng.random() < 0.2:  # and kills of our own, at a random moment
                victim = rng.choice(list(workers))
                service.kill_worker(workers[victim])
                kills += 1
                workers[victim] = start_worker(service, victim, WIKIQ_FAULTS=FAULTS)
            time.sleep(rng.uniform(0.05, 0.3))  # watching processes; kills come at random moments
        finished = {job_id: service.wait(job_id, timeout=300) for job_id in jobs}
        assert kills >= 8
        for wiki, repo in repos.items():
            log = git_text(
                repo, "log", "--reverse", "--format=%H %(trailers:key=Wikiq-Job,valueonly,separator=)", "main"
            )
            trailers = Counter()
            commit_of = {}
            landed = []  # job ids in the order their commits are on the branch
            for line in log.splitlines():
                commit, _, job_id = line.partition(" ")
                if job_id.strip():
                    trailers[job_id.strip()] += 1
                    commit_of[job_id.strip()] = commit
                    landed.append(job_id.strip())
            submitted = [job_id for job_id, (job_wiki, _) in jobs.items() if job_wiki == wiki]
            assert landed == submitted, f"{wiki}: the remote holds its batches out of submission order"
            for job_id, (job_wiki, n) in jobs.items():
                if job_wiki != wiki:
                    continue
                job = finished[job_id]
                assert job["status"] == "succeeded", job
                assert trailers[job_id] == 1, f"job {job_id} has {trailers[job_id]} commits on the remote"
                assert commit_of[job_id] == job["result"]["commit"]
                assert git_text(repo, "show", f"main:wiki/b{n}.md") == f"{n}\n"
            done = subprocess.run(
                ["git", "--git-dir", str(repo), "fsck", "--strict"], capture_output=True, text=True
            )
            assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    finally:
        service.stop()
        site.stop()
