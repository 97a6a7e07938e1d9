"""Structured logs end to end: one JSON line per job transition carrying the job's id, and no secrets."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.receiver import running_receiver
from tests.e2e.service import TEST_SECRET, Service

TOKEN = "wkq_" + uuid.uuid4().hex + "-LOGTEST-TOKEN"
CONTENT = "Zanzibar-" + uuid.uuid4().hex + " a distinctive page line"
MESSAGE = "Message-" + uuid.uuid4().hex


def _lines(root: Path) -> list[dict[str, Any]]:
    """Every line the API and workers logged, parsed (asserting each one is a JSON object)."""
    out = []
    for log in sorted(root.glob("*.log")):
        for raw in log.read_text().splitlines():
            if raw.strip():
                line = json.loads(raw)
                assert isinstance(line, dict) and {"event", "level", "timestamp"} <= line.keys(), raw
                out.append(line)
    return out


def _events(root: Path, job_id: str, expected: set[str], timeout: float = 15) -> dict[str, dict[str, Any]]:
    """The job's log lines by event once all ``expected`` events are logged."""
    deadline = time.monotonic() + timeout
    while True:
        found = {line["event"]: line for line in _lines(root) if line.get("job_id") == job_id}
        if expected <= found.keys():
            return found
        assert time.monotonic() < deadline, (job_id, sorted(found))
        time.sleep(0.05)  # polling log files that other processes append to


def test_job_lives_are_json_lines_without_content_or_secrets(tmp_path: Path) -> None:
    """Accepted, started, finished, cancelled and webhook lines per job; no token or content anywhere."""
    tokens = tmp_path / "tokens.toml"
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens.write_text(
        f'[[principals]]\nname = "ada"\nemail = "ada@example.org"\ntoken_sha256 = "{digest}"\n'
        'rights = { "*" = "admin" }\n'
    )
    service = Service(tmp_path, WIKIQ_LOG_LEVEL="info", WIKIQ_TOKENS_FILE=str(tokens))
    service.client.headers["authorization"] = f"Bearer {TOKEN}"
    service.start(workers=1)
    try:
        service.create_wiki("logs")
        with running_receiver() as receiver:
            hook = receiver.url("/hook?sig=" + TOKEN)
            ok = service.submit(
                "logs",
                {
                    "message": MESSAGE,
                    "edits": [{"op": "create", "path": "wiki/secret.md", "content": CONTENT + "\n"}],
                    "webhook": {"url": hook},
                },
            ).json()["job_id"]
            succeeded = service.wait(ok)
            receiver.wait_for(lambda: len(receiver.deliveries) == 1)
        stale = {"op": "overwrite", "path": "index.md", "content": CONTENT, "expected_version": "0" * 40}
        failed = service.apply(
            "logs",
            {"message": MESSAGE, "edits": [{"op": "create", "path": "wiki/x.md", "content": CONTENT}, stale]},
        )
        assert failed["error"]["code"] == "VERSION_MISMATCH"
        service.kill_worker(service.workers[0])
        queued = service.submit(
            "logs", {"message": MESSAGE, "edits": [{"op": "create", "path": "wiki/y.md", "content": CONTENT}]}
        ).json()["job_id"]
        assert service.client.delete(f"/v1/jobs/{queued}").json()["status"] == "cancelled"

        life = _events(tmp_path, ok, {"job.accepted", "job.started", "job.succeeded", "webhook.attempt"})
        for line in life.values():
            assert line["wiki"] == "logs"
        assert {line["partition"] for k, line in life.items() if k != "webhook.attempt"} == {
            life["job.accepted"]["partition"]
        }
        assert life["job.succeeded"]["commit"] == succeeded["result"]["commit"]
        # edit_count means the batch's edits in every line; the applied entries are counted apart
        assert life["job.succeeded"]["edit_count"] == life["job.accepted"]["edit_count"]
        assert life["job.succeeded"]["applied_count"] == len(succeeded["result"]["applied"])
        assert isinstance(life["job.succeeded"]["duration_ms"], int)
        assert isinstance(life["job.started"]["queued_ms"], int)
        assert life["webhook.attempt"]["outcome"] == "delivered" and life["webhook.attempt"]["status"] == 200
        bad = _events(tmp_path, failed["job_id"], {"job.accepted", "job.started", "job.failed"})
        assert bad["job.failed"]["error"] == "VERSION_MISMATCH" and bad["job.failed"]["index"] == 1
        assert isinstance(bad["job.failed"]["duration_ms"], int)
        gone = _events(tmp_path, queued, {"job.accepted", "job.cancelled"})
        assert "job.started" not in gone
    finally:
        service.stop()
    logged = [p for p in tmp_path.rglob("*.log")]
    assert len(logged) >= 3  # api, workers, the Redis server's log
    for path in logged:
        text = path.read_text(errors="replace")
        for secret in (TOKEN, CONTENT, MESSAGE, TEST_SECRET, TEST_SECRET.removeprefix("whsec_")):
            assert secret not in text, f"{secret[:20]}... found in {path.name}"
    _lines(tmp_path)  # and after shutdown too, every line is JSON
