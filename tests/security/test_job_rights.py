"""Finding 4 (medium) and 6 (low): who may cancel, redeliver, and see a job's webhook URL whole."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.receiver import Receiver, running_receiver
from tests.e2e.service import Service
from tests.security.conftest import as_


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback."""
    with running_receiver() as found:
        yield found


def _queue(service: Service, who: str, path: str) -> str:
    edits = [{"op": "create", "path": path, "content": "x"}]
    with as_(service, who) as client:
        answer = client.post("/v1/wikis/sec/batches", json={"message": "m", "edits": edits})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["job_id"])


def test_a_prefix_limited_writer_cannot_cancel_an_admins_job(stalled: Service) -> None:
    """Carol may write under wiki/team-a/ only: the admin's queued job is 403 to her and stays queued."""
    edits = [{"op": "overwrite", "path": "index.md", "content": "# Index\n", "expected_version": "0" * 40}]
    with as_(stalled, "admin") as admin, as_(stalled, "carol") as carol:
        queued = admin.post("/v1/wikis/sec/batches", json={"message": "admin", "edits": edits}).json()[
            "job_id"
        ]
        refused = carol.delete(f"/v1/jobs/{queued}")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
        assert admin.get(f"/v1/jobs/{queued}").json()["status"] == "queued"
        assert admin.delete(f"/v1/jobs/{queued}").json()["status"] == "cancelled"


def test_a_writer_cannot_cancel_another_writers_job_but_its_own(stalled: Service) -> None:
    """Dave's queued job: Carol and the twins are 403, Dave himself cancels it."""
    queued = _queue(stalled, "dave", "wiki/dave.md")
    for who in ("carol", "twin-a", "reader"):
        with as_(stalled, who) as other:
            assert other.delete(f"/v1/jobs/{queued}").status_code == 403
    with as_(stalled, "dave") as dave:
        assert dave.delete(f"/v1/jobs/{queued}").json()["status"] == "cancelled"


def test_redelivery_is_the_submitters_and_rate_limited(secured: Service, receiver: Receiver) -> None:
    """Only the submitter (or an admin) redelivers a job's webhook, at most once per interval."""
    hook = "/rights?token=capability-123"
    url = receiver.url(hook)
    edits = [{"op": "create", "path": "wiki/team-a/hooked.md", "content": "x"}]
    with as_(secured, "carol") as carol, as_(secured, "dave") as dave, as_(secured, "admin") as admin:
        answer = carol.post(
            "/v1/wikis/sec/batches", json={"message": "m", "edits": edits, "webhook": {"url": url}}
        )
        job_id = answer.json()["job_id"]
        assert carol.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()["status"] == "succeeded"
        receiver.wait_for(lambda: len(receiver.at(hook)) >= 1)
        refused = dave.post(f"/v1/jobs/{job_id}/webhook/redeliver")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
        assert carol.post(f"/v1/jobs/{job_id}/webhook/redeliver").status_code == 202
        again = carol.post(f"/v1/jobs/{job_id}/webhook/redeliver")
        assert again.status_code == 429 and again.json()["error"]["code"] == "RATE_LIMITED"
        assert int(again.headers["retry-after"]) >= 1
        assert (
            admin.post(f"/v1/jobs/{job_id}/webhook/redeliver").status_code == 429
        )  # per job, not per caller
        receiver.wait_for(lambda: len(receiver.at(hook)) >= 2)
    assert len(receiver.at(hook)) == 2


def test_a_plan_is_its_submitters_only(secured: Service) -> None:
    """Another writer of the same wiki who learns a dry run's plan token cannot commit it (PLAN_NOT_FOUND,
    the answer an unknown plan gets); nor does it see the token when it reads that dry run."""
    batch = {
        "message": "m",
        "dry_run": True,
        "edits": [{"op": "create", "path": "wiki/plan-of-dave.md", "content": "d"}],
    }
    with as_(secured, "dave") as dave, as_(secured, "twin-a") as twin:
        job_id = dave.post("/v1/wikis/sec/batches", json=batch).json()["job_id"]
        mine = dave.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()
        assert mine["status"] == "succeeded" and mine["result"]["plan"]
        assert "plan" not in twin.get(f"/v1/jobs/{job_id}").json()["result"]
        stolen = twin.post("/v1/wikis/sec/batches", json={"plan": mine["result"]["plan"]})
        assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "PLAN_NOT_FOUND"
        assert dave.get("/v1/wikis/sec/pages/wiki/plan-of-dave.md").status_code == 404
