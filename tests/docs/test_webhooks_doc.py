"""The Python receivers of docs/webhooks.md accept what wikiq's signer sends and refuse anything else."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import WebhookVerificationError

from worker.webhooks.deliver import signer_for

PAGE = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
SECRET = "whsec_" + base64.b64encode(b"a receiver's test secret, 32 b.").decode()
OTHER = "whsec_" + base64.b64encode(b"not the service's secret at all").decode()
BODY = '{"type":"batch.succeeded","timestamp":"t","data":{"job_id":"01J","result":{"commit":"c"}}}'


def block(name: str) -> str:
    """The code block of the page marked ``<!-- docs-test: name -->``."""
    found = re.search(rf"<!-- docs-test: {name} -->\n```python\n(.*?)```", PAGE.read_text("utf-8"), re.S)
    assert found, name
    return found.group(1)


def signed(secret: str = SECRET, at: datetime | None = None, body: str = BODY) -> dict[str, str]:
    """The headers wikiq sends with ``body`` (as worker.webhooks.deliver.send builds them)."""
    at = at or datetime.now(UTC)
    signer = signer_for(secret)
    assert signer is not None
    return {
        "webhook-id": "msg_01J",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signer.sign("msg_01J", at, body),
    }


@pytest.fixture
def verify() -> Any:
    namespace: dict[str, Any] = {}
    exec(block("verify-python"), namespace)
    return namespace["verify"]


def test_the_standard_library_receiver_accepts_a_delivery(verify: Any) -> None:
    assert verify(SECRET, signed(), BODY.encode()) is True


def test_the_standard_library_receiver_refuses_forgeries(verify: Any) -> None:
    assert verify(SECRET, signed(), BODY.replace("01J", "01K").encode()) is False
    assert verify(SECRET, signed(secret=OTHER), BODY.encode()) is False
    stale = signed(at=datetime.now(UTC) - timedelta(minutes=10))
    assert verify(SECRET, stale, BODY.encode()) is False
    assert verify(SECRET, {**signed(), "webhook-id": "msg_other"}, BODY.encode()) is False


def test_the_standard_webhooks_receiver_handles_a_retry_once(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"WIKIQ_WEBHOOK_SECRET": SECRET}
    exec(block("receive-standardwebhooks"), namespace)
    receive = namespace["receive"]
    assert receive(BODY.encode(), signed()) == 200
    assert receive(BODY.encode(), signed()) == 200  # the retry: answered, not handled again
    assert capsys.readouterr().out.count("batch.succeeded") == 1
    with pytest.raises(WebhookVerificationError):
        receive(BODY.encode(), signed(secret=OTHER))
