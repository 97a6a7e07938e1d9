"""Finding 7 (medium): one unsendable webhook URL broke the sender for its whole burst, and some were a 500.

Before the fix, a host label over 63 characters or an empty one (``http://a..b/``) made the IDNA encoder
raise at submission (a 500 where addresses are checked) or, where private addresses are allowed, was
accepted and then broke the sender; a ``✓`` in a path broke the request line's encoding. The good webhooks
of the same burst were POSTed but not recorded (POSTed again by the safety net), the bad ones stayed
``pending``. Now a URL is kept as it is sent (IDNA host, percent-encoded path), a URL that cannot be is
``422 INVALID_WEBHOOK``, and every attempt's failure is its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.e2e.receiver import running_receiver
from tests.e2e.service import TEST_SECRET, Service
from worker.webhooks.deliver import send, signer_for
from worker.webhooks.http import SendError, WebhookSender

UNSENDABLE = [
    "http://" + "a" * 64 + ".example/hook",
    "http://a..b/hook",
    "http://☃.example/hook",  # a code point IDNA 2008 does not allow
    "http://example.org/" + "✓" * 600,  # under 2048 as given, over once percent-encoded
]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Addresses checked (private ones refused), no worker: nothing runs."""
    service = Service(tmp_path_factory.mktemp("guarded-urls"), WIKIQ_WEBHOOK_ALLOW_PRIVATE="false").start(
        workers=0, senders=0
    )
    service.create_wiki("w")
    yield service
    service.stop()


@pytest.fixture(scope="module")
def open_hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Private addresses allowed (a loopback receiver), a worker and a sender, a quick schedule."""
    service = Service(
        tmp_path_factory.mktemp("open-hooks"),
        WIKIQ_WEBHOOK_RETRY_SCHEDULE="0,0.3",
        WIKIQ_WEBHOOK_TIMEOUT="10",  # generous: a busy machine must not turn an attempt into a timeout
    ).start(workers=1)
    service.create_wiki("w")
    yield service
    service.stop()


def _batch(url: str, n: int = 0) -> dict[str, object]:
    path = f"wiki/h-{time.monotonic_ns()}-{n}.md"
    return {
        "message": "m",
        "edits": [{"op": "create", "path": path, "content": "x\n"}],
        "webhook": {"url": url},
    }


@pytest.mark.parametrize("url", UNSENDABLE)
def test_an_unsendable_url_is_invalid_webhook_and_queues_nothing(
    guarded: Service, open_hooks: Service, url: str
) -> None:
    """422 INVALID_WEBHOOK whether addresses are checked or not (was a 500, or accepted); no job."""
    for service in (guarded, open_hooks):
        answer = service.submit("w", _batch(url))
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "INVALID_WEBHOOK", answer.text
    assert guarded.client.get("/v1/wikis/w/jobs").json()["jobs"] == []


def _settled(service: Service, job_ids: list[str], timeout: float = 30) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = [service.wait(job_id) for job_id in job_ids]
        if all(job["webhook"]["state"] != "pending" for job in jobs):  # type: ignore[index]
            return jobs
        assert time.monotonic() < deadline, [job["webhook"] for job in jobs]
        time.sleep(0.05)  # polling the webhooks' state, which nothing announces


def test_a_burst_with_a_non_ascii_path_is_sent_and_recorded_once(open_hooks: Service) -> None:
    """Good webhooks around one whose path holds ``✓`` (and a space), in one burst: every one is POSTed
    once and recorded delivered with one attempt; the path arrives percent-encoded as UTF-8. (Before, the
    ``✓`` stayed pending forever and the others were POSTed twice.)"""
    with running_receiver() as receiver:
        urls = [receiver.url(f"/good-{n}") for n in range(8)]
        urls.insert(4, receiver.url("/check-✓ x?q=é"))
        answers = [open_hooks.submit("w", _batch(url, n)) for n, url in enumerate(urls)]
        assert all(a.status_code == 202 for a in answers), [a.text for a in answers]
        jobs = _settled(open_hooks, [a.json()["job_id"] for a in answers])
        ids = [{k.lower(): v for k, v in d.headers.items()}["webhook-id"] for d in receiver.deliveries]
        paths = {d.path for d in receiver.deliveries}
    assert "/check-%E2%9C%93%20x?q=%C3%A9" in paths
    assert sorted(ids) == sorted(f"msg_{job['job_id']}" for job in jobs), "a webhook was POSTed twice"
    for job in jobs:
        webhook = job["webhook"]
        assert webhook["state"] == "delivered" and len(webhook["attempts"]) == 1, webhook  # type: ignore[index]
    assert jobs[4]["webhook"]["url"] == receiver.url("/check-%E2%9C%93%20x?q=%C3%A9")  # type: ignore[index]


async def test_a_send_never_raises_for_its_url() -> None:
    """``send`` of a URL that can never be sent (a record kept before URLs were encoded) is a failed
    attempt that stops, with the reason; the sender refuses a non-ASCII request line with ``SendError``."""
    signer = signer_for(TEST_SECRET)
    assert signer is not None
    sender = WebhookSender(allow_private=True, timeout=2)
    for url in ("http://" + "a" * 64 + ".example/", "http://a..b/"):
        outcome = await send(sender, url, "msg_x", "{}", signer, now=lambda: datetime.now(UTC))
        assert not outcome.delivered and outcome.stop, outcome
        assert outcome.attempt.error is not None and outcome.attempt.error.startswith("InvalidWebhook")
    with pytest.raises(SendError):
        await sender.post("http://127.0.0.1:9/✓", b"{}", {})
    await sender.aclose()
