"""Nothing lost: worker crashes, Redis restarts, racing writers and failover, with real processes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.e2e.service import Service
from worker.jobs.ids import partition_of


def _git(service: Service, wiki: str, *args: str) -> str:
    repo = service.data / "wikis" / f"{wiki}.git"
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _commits_by_job(service: Service, wiki: str) -> dict[str, list[tuple[str, set[str]]]]:
    """Every commit on main by job id, with the paths it touched."""
    out: dict[str, list[tuple[str, set[str]]]] = defaultdict(list)
    log = _git(
        service,
        wiki,
        "log",
        "--first-parent",
        "--format=%x00%H%n%(trailers:key=Wikiq-Job,valueonly)",
        "--name-only",
        "main",
    )
    for block in log.split("\x00")[1:]:
        lines = [line for line in block.splitlines() if line.strip()]
        commit, rest = lines[0], lines[1:]
        if rest and not rest[0].startswith(("wiki/", "index.md", "log.md", "schema.md")):
            out[rest[0].strip()].append((commit, set(rest[1:])))
    return out


def _batch(n: int) -> dict[str, Any]:
    return {
        "message": f"batch {n}",
        "edits": [
            {"op": "create", "path": f"wiki/b{n}/one.md", "content": f"one {n}\n"},
            {"op": "create", "path": f"wiki/b{n}/two.md", "content": f"two {n}\n"},
            {"op": "rename", "path": f"wiki/b{n}/two.md", "new_path": f"wiki/b{n}/three.md"},
        ],
    }


def test_kill_9_chaos_applies_every_batch_exactly_once(tmp_path: Path) -> None:
    """300 batches over 5 wikis, worker SIGKILLed 10+ times: each job is one whole commit or failed."""
    service = Service(tmp_path).start(workers=1)
    try:
        wikis = [f"chaos{i}" for i in range(5)]
        for wiki in wikis:
            service.create_wiki(wiki)
        jobs: dict[str, tuple[str, int]] = {}
        for n in range(300):
            wiki = wikis[n % 5]
            answer = service.submit(wiki, _batch(n))
            assert answer.status_code == 202, answer.text
            jobs[answer.json()["job_id"]] = (wiki, n)
        rng = random.Random(7)
        kills = 0
        while kills < 10 or service.client.get(f"/v1/jobs/{list(jobs)[-1]}").json()["status"] == "queued":
            time.sleep(rng.uniform(0.05, 0.6))  # chaos: kill at a random moment, not a synchronisation
            service.kill_worker(service.workers[0])
            kills += 1
            service.start_worker()
            if kills >= 40:
                break
        assert kills >= 10
        finished = {job_id: service.wait(job_id, timeout=120) for job_id in jobs}
        for wiki in wikis:
            commits = _commits_by_job(service, wiki)
            for job_id, (job_wiki, n) in jobs.items():
                if job_wiki != wiki:
                    continue
                job = finished[job_id]
                assert job["status"] in ("succeeded", "failed"), job
                if job["status"] == "failed":
                    assert job["error"]["code"] and job["error"]["message"]
                    assert job_id not in commits
                    continue
                assert len(commits[job_id]) == 1, f"job {job_id} has {len(commits[job_id])} commits"
                commit, paths = commits[job_id][0]
                assert commit == job["result"]["commit"]
                assert paths == {f"wiki/b{n}/one.md", f"wiki/b{n}/three.md"}, paths
        succeeded = sum(1 for job in finished.values() if job["status"] == "succeeded")
        assert succeeded == 300, f"only {succeeded} of 300 succeeded"
        for wiki in wikis:
            assert _git(service, wiki, "fsck", "--strict", "--no-dangling") == ""
    finally:
        service.stop()


def test_redis_clean_restart_loses_no_accepted_job(tmp_path: Path) -> None:
    """Jobs accepted before Redis is stopped cleanly and started again are all applied afterwards."""
    service = Service(tmp_path).start(workers=1)
    try:
        service.create_wiki("restart")
        for worker in list(service.workers):
            service.kill_worker(worker)
        accepted = []
        for n in range(40):
            answer = service.submit("restart", _batch(n))
            assert answer.status_code == 202
            accepted.append(answer.json()["job_id"])
        service.redis.stop()
        service.redis.start()
        service.start_worker()
        for job_id in accepted:
            assert service.wait(job_id, timeout=60)["status"] == "succeeded"
        commits = _commits_by_job(service, "restart")
        assert all(len(commits[job_id]) == 1 for job_id in accepted)
    finally:
        service.stop()


def test_redis_restarts_while_jobs_run(tmp_path: Path) -> None:
    """Redis restarted three times while a worker works through a backlog: every job applied once, in order.

    A restart cuts jobs short in the middle (their finish cannot reach Redis, and the clean shutdown keeps
    arq's in-progress marker): they must run again at once, not after arq's in-progress timeout (130 s),
    and long-polls waiting across a restart must still see them finish.
    """
    service = Service(tmp_path).start(workers=0)
    try:
        service.create_wiki("midway")
        accepted = []
        for n in range(300):
            answer = service.submit("midway", _batch(n))
            assert answer.status_code == 202
            accepted.append(answer.json()["job_id"])
        service.start_worker()
        progress = 0
        for _ in range(3):
            progress += 40
            assert service.wait(accepted[progress], timeout=30)["status"] == "succeeded"
            service.redis.stop()  # the worker is applying the backlog: some job is in flight
            service.redis.start()
        statuses = [service.wait(job_id, timeout=60)["status"] for job_id in accepted]
        assert statuses == ["succeeded"] * len(accepted)
        commits = _commits_by_job(service, "midway")
        assert list(reversed(commits)) == accepted  # one commit per job, in acceptance order
        assert all(len(found) == 1 for found in commits.values())
    finally:
        service.stop()


ATTEMPTS = 15  # read-modify-writes per racing agent


def test_racing_agents_lose_no_update(tmp_path: Path) -> None:
    """20 clients read-modify-write 5 pages, 15 attempts each: successes chain, every other attempt is
    VERSION_MISMATCH."""
    service = Service(tmp_path).start(workers=1)
    try:
        service.create_wiki("race")
        pages = [f"wiki/p{i}.md" for i in range(5)]
        job = service.apply(
            "race", {"message": "seed", "edits": [{"op": "create", "path": p, "content": ""} for p in pages]}
        )
        assert job["status"] == "succeeded"
        outcomes: list[tuple[str, str, str, str]] = []  # (job_id, page, status, line)
        lock = threading.Lock()

        def agent(number: int) -> None:
            rng = random.Random(number)
            with httpx.Client(base_url=service.url, timeout=70) as client:
                for n in range(ATTEMPTS):
                    page = rng.choice(pages)
                    current = client.get(f"/v1/wikis/race/pages/{page}").json()
                    line = f"agent{number}-{n}\n"
                    batch = {
                        "message": line.strip(),
                        "edits": [
                            {
                                "op": "overwrite",
                                "path": page,
                                "content": current["content"] + line,
                                "expected_version": current["version"],
                            }
                        ],
                    }
                    answer = client.post("/v1/wikis/race/batches", json=batch)
                    assert answer.status_code == 202, answer.text
                    job_id = answer.json()["job_id"]
                    while (done := client.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json())[
                        "status"
                    ] in (
                        "queued",
                        "running",
                    ):
                        pass
                    if done["status"] == "failed":
                        assert done["error"]["code"] == "VERSION_MISMATCH", done
                        assert done["error"]["index"] == 0
                    with lock:
                        outcomes.append((job_id, page, done["status"], line))

        crashed: list[BaseException] = []

        def guarded(number: int) -> None:
            try:
                agent(number)
            except BaseException as exc:  # an agent's failure must fail the test, not vanish in its thread
                with lock:
                    crashed.append(exc)

        threads = [threading.Thread(target=guarded, args=(i,)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not crashed, crashed[:3]
        won = {job_id: (page, line) for job_id, page, status, line in outcomes if status == "succeeded"}
        lost = [o for o in outcomes if o[2] == "failed"]
        assert won and lost, "the race produced no contention; the test proves nothing"
        # replay the successful batches in commit order: it must give the final content of every page
        order = _git(
            service, "race", "log", "--reverse", "--format=%(trailers:key=Wikiq-Job,valueonly)", "main"
        )
        replay = dict.fromkeys(pages, "")
        for job_id in (line.strip() for line in order.splitlines() if line.strip()):
            if job_id in won:
                page, line = won[job_id]
                replay[page] += line
        for page in pages:
            assert service.page("race", page)["content"] == replay[page]
        assert sum(len(text.splitlines()) for text in replay.values()) == len(won)
    finally:
        service.stop()


def test_failover_serves_a_killed_workers_partitions(tmp_path: Path) -> None:
    """With two workers, SIGKILL one: the other serves its partitions within the lease time."""
    service = Service(tmp_path).start(workers=2)
    try:
        client = redis.Redis.from_url(service.redis.url)
        deadline = time.monotonic() + 20
        while True:  # both workers settle on a fair share: waiting on a state in Redis, polled
            owners = [client.get(f"wikiq:lease:{p}") for p in range(4)]
            if all(owners) and len(set(owners)) == 2:
                break
            assert time.monotonic() < deadline, owners
            time.sleep(0.1)
        victim = service.workers[0]
        victim_id = f":{victim.pid}:".encode()
        orphaned = [p for p, owner in enumerate(owners) if owner and victim_id in owner]
        assert orphaned
        wiki = next(f"fo{i}" for i in range(1000) if partition_of(f"fo{i}", 4) == orphaned[0])
        service.create_wiki(wiki)
        service.kill_worker(victim)
        answer = service.submit(wiki, _batch(1))
        job = service.wait(answer.json()["job_id"], timeout=60)  # a ceiling that only catches a hang
        assert job["status"] == "succeeded"
        survivor = client.get(f"wikiq:lease:{orphaned[0]}")
        assert survivor is not None and victim_id not in survivor
        client.close()
    finally:
        service.stop()


def test_a_stopping_worker_keeps_its_lease_until_its_job_ends(tmp_path: Path) -> None:
    """SIGTERM a worker whose job is waiting for ``main.lock``: for twice the lease time the partition stays
    the stopping worker's (no other process may start the job again meanwhile); once the job can commit, it
    is recorded, the worker exits cleanly and the lease is handed back."""
    service = Service(tmp_path).start(workers=1)
    client = redis.Redis.from_url(service.redis.url)
    try:
        wiki = "stopping"
        head = service.create_wiki(wiki)
        lock = service.data / "wikis" / f"{wiki}.git" / "refs" / "heads" / "main.lock"
        lock.write_text(head + "\n")  # another writer holds main: the job's commit waits for it
        job_id = service.submit(wiki, _batch(1)).json()["job_id"]
        deadline = time.monotonic() + 20
        while service.client.get(f"/v1/jobs/{job_id}").json()["status"] != "running":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)  # waiting on a state in Redis, polled
        worker = service.workers[0]
        key = f"wikiq:lease:{partition_of(wiki, 4)}"
        owner = client.get(key)
        assert owner is not None and f":{worker.pid}:".encode() in owner
        worker.send_signal(signal.SIGTERM)
        watched_until = time.monotonic() + 2 * float(service.env["WIKIQ_LEASE_SECONDS"])
        while time.monotonic() < watched_until:
            os.utime(lock)  # the other writer is alive: its lock never looks stale
            assert client.get(key) == owner, "the lease lapsed while its job was still running"
            assert worker.poll() is None
            time.sleep(0.05)  # the observation window's step
        lock.unlink()
        assert worker.wait(30) == 0
        service.workers.remove(worker)
        job = service.wait(job_id)
        assert job["status"] == "succeeded" and job["result"]["commit"]
        assert client.get(key) is None
    finally:
        client.close()
        service.stop()
