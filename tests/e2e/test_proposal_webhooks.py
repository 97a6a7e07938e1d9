"""A proposal's webhook, through the worker and sender processes to a receiver on loopback: its check
announces ``proposal.proposed``, an approval ``proposal.approved`` and the landing ``proposal.landed``, a
rejection ``proposal.rejected``; each event is signed and has a ``webhook-id`` of its own. Single-user mode:
the one user proposes (``"propose": true``) and may approve its own proposals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.e2e.receiver import Receiver, running_receiver
from tests.e2e.service import TEST_SECRET, Service


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = Service(tmp_path_factory.mktemp("proposal-hooks")).start(workers=1)
    running.create_wiki("hooks")
    yield running
    running.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


def _events(receiver: Receiver, path: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``count`` events on ``path`` (waiting for them), each verified: (webhook-id, body)."""
    receiver.wait_for(lambda: len(receiver.at(path)) >= count)
    verifier = Webhook(TEST_SECRET)
    found = []
    for delivery in receiver.at(path)[:count]:
        body = verifier.verify(delivery.body, delivery.headers)
        found.append((delivery.headers["webhook-id"], body))
    return found


def _propose(service: Service, url: str, path: str) -> dict[str, Any]:
    batch = {
        "message": f"propose {path}",
        "edits": [{"op": "create", "path": path, "content": "x\n"}],
        "propose": True,
        "webhook": {"url": url},
    }
    answer = service.submit("hooks", batch)
    assert answer.status_code == 202, answer.text
    body: dict[str, Any] = answer.json()
    assert service.wait(body["job_id"])["status"] == "succeeded"
    return body


def test_an_approved_proposal_announces_proposed_approved_landed(
    service: Service, receiver: Receiver
) -> None:
    submitted = _propose(service, receiver.url("/approved"), "wiki/approved.md")
    proposal = submitted["proposal"]
    approved = service.client.post(f"{proposal['url']}/approve")
    assert approved.status_code == 200, approved.text
    landing = service.wait(approved.json()["job_id"])
    events = _events(receiver, "/approved", 3)
    kinds = sorted(body["type"] for _, body in events)
    assert kinds == ["proposal.approved", "proposal.landed", "proposal.proposed"], events
    assert len({event_id for event_id, _ in events}) == 3  # three events, not one retried
    by_kind = {body["type"]: body for _, body in events}
    assert by_kind["proposal.proposed"]["data"]["job_id"] == submitted["job_id"]
    assert by_kind["proposal.landed"]["data"]["result"]["commit"] == landing["result"]["commit"]
    assert all(body["data"]["proposal"] == proposal["proposal_id"] for _, body in events)


def test_a_rejected_proposal_announces_rejected(service: Service, receiver: Receiver) -> None:
    proposal = _propose(service, receiver.url("/rejected"), "wiki/rejected.md")["proposal"]
    assert service.client.post(f"{proposal['url']}/reject", json={"comment": "no"}).status_code == 200
    events = _events(receiver, "/rejected", 2)
    assert sorted(body["type"] for _, body in events) == ["proposal.proposed", "proposal.rejected"]
    assert all(body["data"]["proposal"] == proposal["proposal_id"] for _, body in events)
    assert "wiki/rejected.md" not in service.git("hooks", "ls-tree", "-r", "--name-only", "main").split()
