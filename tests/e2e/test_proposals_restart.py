"""Proposals survive a worker killed and Redis restarted (its append-only file), with real processes: an
open proposal stays open with its diff and lands when approved afterwards; one whose check was queued when
everything stopped is checked once the worker is back."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.service import Service
from tests.principals import tokens_toml

TOKENS = {"root": "tok-root", "pat": "tok-pat", "rita": "tok-rita"}
ENTRIES = {
    "root": ("Root", '{ "*" = "admin" }'),
    "pat": ("Pat", '{ "*" = "propose" }'),
    "rita": ("Rita", '{ "*" = "write" }'),
}


def _tokens(path: Path) -> Path:
    path.write_text(tokens_toml(TOKENS, ENTRIES))
    return path


def _as(service: Service, who: str) -> httpx.Client:
    return httpx.Client(base_url=service.url, timeout=70, headers={"authorization": f"Bearer {TOKENS[who]}"})


def _propose(client: httpx.Client, path: str) -> dict[str, str]:
    answer = client.post(
        "/v1/wikis/keep/batches",
        json={"message": f"add {path}", "edits": [{"op": "create", "path": path, "content": f"# {path}\n"}]},
    )
    assert answer.status_code == 202, answer.text
    return {"job": answer.json()["job_id"], "url": answer.json()["proposal"]["url"]}


def test_proposals_survive_a_worker_kill_and_a_redis_restart(tmp_path: Path) -> None:
    service = Service(tmp_path, WIKIQ_TOKENS_FILE=str(_tokens(tmp_path / "tokens.toml"))).start(workers=1)
    service.client.headers["authorization"] = "Bearer tok-root"
    pat, rita = _as(service, "pat"), _as(service, "rita")
    try:
        service.create_wiki("keep")
        head = service.git("keep", "rev-parse", "main").strip()
        checked = _propose(pat, "wiki/checked.md")
        assert service.wait(checked["job"])["status"] == "succeeded"
        for worker in list(service.workers):
            service.kill_worker(worker)
        waiting = _propose(pat, "wiki/waiting.md")  # its check is queued, no worker runs it
        service.redis.stop()
        service.redis.start()
        service.start_worker()
        assert service.wait(waiting["job"])["status"] == "succeeded"
        for proposal in (checked, waiting):
            body = rita.get(proposal["url"]).json()
            assert body["state"] == "open", body
            assert body["revisions"][-1]["result"]["diff"], body
        assert service.git("keep", "rev-parse", "main").strip() == head  # nothing landed yet
        approved = rita.post(f"{checked['url']}/approve")
        assert approved.status_code == 200, approved.text
        assert service.wait(approved.json()["job_id"])["status"] == "succeeded"
        landed = rita.get(checked["url"]).json()
        assert landed["state"] == "landed"
        assert service.git("keep", "rev-parse", f"{landed['commit']}^").strip() == head
        files = service.git("keep", "ls-tree", "-r", "--name-only", "main").split()
        assert "wiki/checked.md" in files and "wiki/waiting.md" not in files
    finally:
        pat.close()
        rita.close()
        service.stop()
