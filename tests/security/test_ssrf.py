"""Finding 8: webhook addresses that reach a private IPv4 address through an IPv6 translation are refused."""

from __future__ import annotations

import pytest

from worker.errors import WebhookRefused
from worker.webhooks.guard import address_refused, check_webhook_url

REFUSED = [
    "2002:7f00:1::",  # 6to4 around 127.0.0.1
    "2002:0a00:0001::1",  # 6to4 around 10.0.0.1
    "2002:a9fe:a9fe::",  # 6to4 around 169.254.169.254 (cloud metadata)
    "64:ff9b::7f00:1",  # NAT64 well-known prefix around 127.0.0.1
    "64:ff9b:1::a00:1",  # NAT64 local-use prefix around 10.0.0.1
    "::127.0.0.1",  # IPv4-compatible
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:192.168.1.1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo whose client is 127.0.0.1
    "::1",
    "fe80::1",
    "fc00::1",
]
ALLOWED = ["8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:0808:0808::1"]


@pytest.mark.parametrize("address", REFUSED)
def test_translated_private_addresses_are_refused(address: str) -> None:
    """Each form leads to a loopback, private or link-local address: refused."""
    assert address_refused(address)


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    """Public addresses, also through 6to4 or IPv4-mapped forms, pass."""
    assert not address_refused(address)


async def test_a_6to4_literal_url_is_refused_at_submission() -> None:
    """``http://[2002:7f00:1::]/`` is WEBHOOK_REFUSED when private addresses are not allowed."""
    with pytest.raises(WebhookRefused):
        await check_webhook_url("http://[2002:7f00:1::]/hook", allow_private=False)
