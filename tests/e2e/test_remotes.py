"""Wikis in a git remote (CONTRACT section 6), end to end: real git servers on loopback (git daemon,
git http-backend behind Basic auth, file://, sshd), the API and workers as processes, workers with
separate data directories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.remotes import batch, create, deployment, start_worker
from tests.e2e.service import Service
from tests.gitutil import git_text
from tests.integration.remote.conftest import HTTP_PASSWORD_ENV, TRANSPORTS, Site, start_site
from tests.integration.remote.repos import branch_head, commit, git, push_as_someone_else, refuse_pushes
from worker.git.commits import job_proof
from worker.git.remote import Remote
from worker.jobs.proofs import derive

COMMIT_SECRET = "a commit secret of the tests"


@pytest.fixture(params=TRANSPORTS)
def site(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """A served site for each transport in turn (ssh is skipped without sshd)."""
    started = start_site(request.param, tmp_path, monkeypatch)
    request.addfinalizer(started.stop)
    return started


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """A git daemon site."""
    started = start_site("git", tmp_path, monkeypatch)
    yield started
    started.stop()


def _trailers(repo: Path) -> list[str]:
    """Job ids in the Wikiq-Job trailers of the remote's main, oldest first."""
    log = git_text(repo, "log", "--reverse", "--format=%(trailers:key=Wikiq-Job,valueonly)", "main")
    return [line.strip() for line in log.splitlines() if line.strip()]


def _fsck(repo: Path) -> None:
    done = subprocess.run(["git", "--git-dir", str(repo), "fsck", "--strict"], capture_output=True, text=True)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr


def test_attach_publish_and_read_over_every_transport(site: Site, tmp_path: Path) -> None:
    """Attach an empty remote: the initial commit is pushed; a batch's commit is on the remote branch
    when its job succeeds, with its trailer; the API (its own data dir) reads the published head."""
    repo, remote = site.new_repo()
    service = deployment(tmp_path / "svc", remote)
    try:
        made = service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"})
        assert made.status_code == 201, made.text
        assert made.json()["head"] == branch_head(repo) and made.json()["remote"] == "docs"
        job = service.apply("docs", batch("First page", create("wiki/first.md", "# First\n")))
        assert job["status"] == "succeeded", job
        assert branch_head(repo) == job["result"]["commit"]
        assert _trailers(repo) == [job["job_id"]]
        page = service.page("docs", "wiki/first.md")
        assert page["content"] == "# First\n" and page["commit"] == job["result"]["commit"]
        listed = service.client.get("/v1/wikis").json()["wikis"]
        assert listed == [
            {
                "id": "docs",
                "head": job["result"]["commit"],
                "remote": "docs",
                "published_at": listed[0]["published_at"],
            }
        ]
        assert listed[0]["published_at"].endswith("Z")
        _fsck(repo)
    finally:
        service.stop()


def test_attach_refusals_leave_nothing(daemon: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown remote: 422 REMOTE_NOT_FOUND; a remote that does not answer: 502 REMOTE_UNAVAILABLE and no
    wiki; an id already taken: 409. Nothing is created by a refusal."""
    _, remote = daemon.new_repo()
    gone = Remote(name="gone", url="git://127.0.0.1:9/nothing.git")
    service = deployment(tmp_path / "svc", remote, gone, workers=0)
    try:
        unknown = service.client.post("/v1/wikis", json={"id": "a", "remote": "nope"})
        assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "REMOTE_NOT_FOUND"
        down = service.client.post("/v1/wikis", json={"id": "b", "remote": "gone"})
        assert down.status_code == 502 and down.json()["error"]["code"] == "REMOTE_UNAVAILABLE"
        assert "Traceback" not in down.text
        assert service.client.get("/v1/wikis").json()["wikis"] == []
        assert not any((service.data / "wikis").glob("b.git")) and not any(
            (service.data / "wikis").glob(".attach*")
        )
        assert service.client.post("/v1/wikis", json={"id": "c", "remote": "docs"}).status_code == 201
        again = service.client.post("/v1/wikis", json={"id": "c", "remote": "docs"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "WIKI_EXISTS"
        local = service.client.post("/v1/wikis", json={"id": "c"})
        assert local.status_code == 409
    finally:
        service.stop()


def test_a_non_empty_remote_is_taken_as_it_is_and_its_problems_reported(daemon: Site, tmp_path: Path) -> None:
    """A branch with pages is attached unchanged; a file outside the zones is reported, not refused."""
    repo, remote = daemon.new_repo()
    existing = commit(repo, None, "people wrote this", {"wiki/kept.md": "kept\n", "notes/outside.md": "o\n"})
    subprocess.run(["git", "--git-dir", str(repo), "update-ref", "refs/heads/main", existing], check=True)
    service = deployment(tmp_path / "svc", remote)
    try:
        made = service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"})
        assert made.status_code == 201 and made.json()["head"] == existing
        assert any("notes/outside.md" in p for p in made.json()["problems"])
        assert service.page("docs", "wiki/kept.md")["content"] == "kept\n"
        job = service.apply("docs", batch("more", create("wiki/new.md")))
        assert job["status"] == "succeeded"
        assert git_text(repo, "rev-parse", "main^").strip() == existing
        ui = service.client.get("/ui")
        assert ui.status_code == 200 and "notes/outside.md" in ui.text and ">docs</span>" in ui.text
        doctor = subprocess.run(
            [sys.executable, "-m", "api.cli", "doctor"],
            env=service.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "WARN  wiki docs" in doctor.stdout and "notes/outside.md" in doctor.stdout, doctor.stdout
        assert "remote docs answers" in doctor.stdout
    finally:
        service.stop()


def test_someone_pushes_between_batches(daemon: Site, tmp_path: Path) -> None:
    """A person pushes a change of a page: a batch with the old version fails VERSION_MISMATCH, one of
    another page lands on top of the person's commit; nothing of theirs is lost."""
    repo, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote)
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        first = service.apply("docs", batch("a", create("wiki/other.md", "ours\n")))
        version = first["result"]["applied"][0]["version"]
        theirs = push_as_someone_else(repo, tmp_path, "their edit")
        stale = {
            "op": "overwrite",
            "path": "wiki/other.md",
            "content": "ours again\n",
            "expected_version": version,
        }
        refused = service.apply("docs", batch("stale", stale))
        assert refused["status"] == "failed" and refused["error"]["code"] == "VERSION_MISMATCH"
        landed = service.apply("docs", batch("elsewhere", create("wiki/mine.md")))
        assert landed["status"] == "succeeded"
        assert git_text(repo, "rev-parse", "main^").strip() == theirs
        assert git_text(repo, "show", "main:wiki/other.md") == "their edit\n"
        assert service.page("docs", "wiki/other.md")["content"] == "their edit\n"
    finally:
        service.stop()


def test_a_hook_that_refuses_then_accepts_and_one_that_always_refuses(daemon: Site, tmp_path: Path) -> None:
    """Refused twice then accepted: the job succeeds. Always refused: REMOTE_REJECTED with the hook's
    words, and the branch has not moved."""
    repo, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote, WIKIQ_REMOTE_PUSH_ATTEMPTS="3")
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        refuse_pushes(repo, times=2, message="not now")
        ok = service.apply("docs", batch("eventually", create("wiki/a.md")))
        assert ok["status"] == "succeeded" and branch_head(repo) == ok["result"]["commit"]
        refuse_pushes(repo, message="protected branch")
        before = branch_head(repo)
        refused = service.apply("docs", batch("never", create("wiki/b.md")))
        assert refused["status"] == "failed" and refused["error"]["code"] == "REMOTE_REJECTED"
        assert "protected branch" in refused["error"]["message"]
        assert branch_head(repo) == before
    finally:
        service.stop()


def test_a_remote_that_goes_away_delays_the_job_until_it_is_back(daemon: Site, tmp_path: Path) -> None:
    """The daemon stops: the submission is still accepted (it needs no fetch, though the API's cache lags the
    head a worker published) and the job stays running; it starts again: the job succeeds, published once."""
    repo, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote)
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        assert service.apply("docs", batch("before", create("wiki/before.md")))["status"] == "succeeded"
        daemon.stop()
        job_id = service.submit("docs", batch("while away", create("wiki/away.md"))).json()["job_id"]
        waiting = service.client.get(f"/v1/jobs/{job_id}", params={"wait": 3}).json()
        assert waiting["status"] == "running", waiting
        assert daemon.server is not None
        daemon.server.start()
        done = service.wait(job_id, timeout=90)
        assert done["status"] == "succeeded", done
        assert _trailers(repo).count(job_id) == 1 and branch_head(repo) == done["result"]["commit"]
    finally:
        service.stop()


def test_a_remote_that_stays_away_fails_the_job_remote_unavailable(daemon: Site, tmp_path: Path) -> None:
    """With WIKIQ_REMOTE_WAIT_SECONDS=2 and the remote gone for good: REMOTE_UNAVAILABLE, no stack trace."""
    _, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote, WIKIQ_REMOTE_WAIT_SECONDS="2")
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        daemon.stop()
        job = service.apply("docs", batch("lost", create("wiki/lost.md")))
        assert job["status"] == "failed" and job["error"]["code"] == "REMOTE_UNAVAILABLE"
        assert "docs" in job["error"]["message"] and "Traceback" not in job["error"]["message"]
    finally:
        service.stop()


def test_a_job_whose_commit_another_run_published_while_we_pushed_reports_that_commit(
    daemon: Site, tmp_path: Path
) -> None:
    """The remote branch moved under our push to a commit carrying the job's own trailer (what an
    overlapping run of the same group publishes, e.g. a worker that stalled past its lease and resumed):
    the round run again after the lost compare-and-swap looks for the job's commit and reports it, instead
    of checking the batch again on it (PATH_EXISTS for a job whose commit is published) or committing it
    twice."""
    repo, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote, workers=0, WIKIQ_COMMIT_SECRET=COMMIT_SECRET)
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        worker = start_worker(service, 0)
        assert service.apply("docs", batch("first", create("wiki/a.md")))["status"] == "succeeded"
        service.kill_worker(worker)  # its cache keeps the branch head it pushed: the next round builds on it
        job_id = service.submit("docs", batch("mine", create("wiki/b.md", "b\n"))).json()["job_id"]
        tip = branch_head(repo)
        theirs = _proven_commit(repo, tip, job_id, {"wiki/a.md": "x\n", "wiki/b.md": "b\n"})
        git(repo, "update-ref", "refs/heads/main", theirs, str(tip))  # the other run's accepted push
        start_worker(service, 0)
        job = service.wait(job_id, timeout=60)
        assert job["status"] == "succeeded", job.get("error")
        assert job["result"]["commit"] == theirs
        assert _trailers(repo).count(job_id) == 1
    finally:
        service.stop()


def _proven_commit(repo: Path, parent: str | None, job_id: str, files: dict[str, str]) -> str:
    """A commit of ``files`` on ``parent`` with the trailers wikiq writes for job ``job_id``, its proof
    computed with the deployment's commit secret (what another run of the job would have pushed)."""
    tree = git(repo, "rev-parse", commit(repo, parent, "tree only", files) + "^{tree}")
    proof = job_proof(derive(COMMIT_SECRET.encode()), job_id, tree)
    message = f"mine\n\nWikiq-Job: {job_id}\nWikiq-Proof: {proof}"
    return git(repo, "commit-tree", "-m", message, "-p", str(parent), tree)


def test_a_pushed_commit_with_a_hand_written_trailer_does_not_finish_the_job(
    daemon: Site, tmp_path: Path
) -> None:
    """Someone pushes a commit whose message names a queued job (``Wikiq-Job: <id>``, with or without a
    made-up proof): wikiq ignores it, runs the job on top of it, and the job succeeds with its own
    commit, its page there."""
    repo, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote, workers=0)
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        worker = start_worker(service, 0)
        assert service.apply("docs", batch("first", create("wiki/a.md")))["status"] == "succeeded"
        service.kill_worker(worker)  # its cache keeps the branch head it pushed: the next round builds on it
        jobs = [
            service.submit("docs", batch(f"mine {n}", create(f"wiki/b{n}.md", "b\n"))).json()["job_id"]
            for n in range(2)
        ]
        tip = branch_head(repo)
        forged = commit(repo, tip, f"not wikiq's\n\nWikiq-Job: {jobs[0]}", {"wiki/a.md": "x\n"})
        fake = "0" * 64
        forged = commit(
            repo, forged, f"nor this\n\nWikiq-Job: {jobs[1]}\nWikiq-Proof: {fake}", {"wiki/a.md": "y\n"}
        )
        git(repo, "update-ref", "refs/heads/main", forged, str(tip))  # the person's push
        start_worker(service, 0)
        for n, job_id in enumerate(jobs):
            job = service.wait(job_id, timeout=60)
            assert job["status"] == "succeeded", job.get("error")
            mine = job["result"]["commit"]
            assert git_text(repo, "show", f"{mine}:wiki/b{n}.md") == "b\n"
            assert git_text(repo, "merge-base", "--is-ancestor", forged, mine) == ""
            assert service.page("docs", f"wiki/b{n}.md")["content"] == "b\n"
            assert _trailers(repo).count(job_id) == 2  # the person's, ignored, and wikiq's own
    finally:
        service.stop()


def test_queued_batches_are_published_by_one_push(daemon: Site, tmp_path: Path) -> None:
    """Twenty batches queued while no worker runs: each its own commit, in order, published with a few
    pushes (counted by a hook), each job reporting its commit."""
    repo, remote = daemon.new_repo()
    hook = repo / "hooks" / "post-receive"
    hook.write_text(f"#!/bin/sh\necho push >> {repo / 'pushes'}\n")
    hook.chmod(0o755)
    service = deployment(tmp_path / "svc", remote, workers=0)
    try:
        assert service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"}).status_code == 201
        ids = [
            service.submit("docs", batch(f"b{i}", create(f"wiki/b{i}.md"))).json()["job_id"]
            for i in range(20)
        ]
        start_worker(service, 0)
        jobs = [service.wait(job_id, timeout=60) for job_id in ids]
        assert all(job["status"] == "succeeded" for job in jobs)
        assert _trailers(repo) == ids
        commits = git_text(repo, "log", "--format=%H", "main").split()
        assert [job["result"]["commit"] for job in jobs] == list(reversed(commits[:20]))
        pushes = (repo / "pushes").read_text().count("push")
        assert 1 <= pushes <= 3, pushes
    finally:
        service.stop()


def test_a_bad_remotes_file_stops_start_up_and_a_later_bad_edit_keeps_the_last_good(
    daemon: Site, tmp_path: Path
) -> None:
    """Start-up with a remotes file that does not parse: exit 2 with one line naming it. A running API
    whose file goes bad keeps the last good remotes (and logs it)."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[[remotes]]\nname = \n")
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "api", "--port", "1"],
        env={**Service(tmp_path / "x").env, "WIKIQ_REMOTES_FILE": str(bad)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "WIKIQ_REMOTES_FILE" in done.stderr
    _, remote = daemon.new_repo()
    service = deployment(tmp_path / "svc", remote, workers=0)
    try:
        (tmp_path / "svc" / "remotes.toml").write_text("[[remotes]]\nname = \n")
        made = service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"})
        assert made.status_code == 201, made.text
        assert "remotes.toml" in service.logs()
    finally:
        service.stop()


def test_credentials_never_reach_logs_answers_or_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted HTTP password: refused once (wrong user), then used for attach and a batch; it appears in
    no log line of any process, no API answer and no job record."""
    site = start_site("http", tmp_path, monkeypatch)
    try:
        _, remote = site.new_repo()
        planted = "PLANTED-SECRET-" + "q" * 20
        assert isinstance(site.server, object)
        site.server.password = planted  # type: ignore[union-attr]
        monkeypatch.setenv(HTTP_PASSWORD_ENV, planted)
        wrong = remote.model_copy(update={"name": "wrong", "username": "nobody"})
        service = deployment(tmp_path / "svc", remote, wrong)
        answers: list[str] = []
        try:
            refused = service.client.post("/v1/wikis", json={"id": "w", "remote": "wrong"})
            assert refused.status_code == 502
            answers.append(refused.text)
            made = service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"})
            assert made.status_code == 201, made.text
            answers.append(made.text)
            job = service.apply("docs", batch("secret-free", create("wiki/s.md")))
            assert job["status"] == "succeeded"
            for url in ("/v1/wikis", f"/v1/jobs/{job['job_id']}", "/v1/wikis/docs/jobs", "/ui", "/metrics"):
                answers.append(service.client.get(url).text)
            with httpx.Client() as raw:
                answers.append(raw.get(f"{service.url}/v1/wikis/docs/commits").text)
        finally:
            service.stop()
        for text in [*answers, service.logs()]:
            assert planted not in text
    finally:
        site.stop()
