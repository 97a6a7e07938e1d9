"""Which webhook URLs wikiq may call: http(s), no credentials, and (unless allowed) no address that
resolves to loopback, private, link-local, CGNAT, multicast or reserved ranges."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from worker.errors import WebhookRefused

_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def address_refused(address: str) -> bool:
    """True when ``address`` is not a public unicast address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT)
        or not ip.is_global
    )


def parse_webhook_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of an acceptable webhook URL; ``WebhookRefused`` for a bad shape."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise WebhookRefused("webhook.url is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookRefused("webhook.url must be http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise WebhookRefused("webhook.url must not carry credentials; sign with the webhook secret instead")
    if not parts.hostname:
        raise WebhookRefused("webhook.url has no host")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (through this machine's resolver)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from None
    return sorted({str(info[4][0]) for info in infos})


async def check_webhook_url(url: str, allow_private: bool) -> list[str]:
    """Refuse (``WEBHOOK_REFUSED``) a URL wikiq must not call; returns the addresses it resolves to."""
    host, port = parse_webhook_url(url)
    if allow_private:
        return []
    addresses = await resolve(host, port)
    if not addresses or any(address_refused(a) for a in addresses):
        raise WebhookRefused(
            "webhook.url resolves to a loopback, private, link-local or reserved address; "
            "use a public address (or set WIKIQ_WEBHOOK_ALLOW_PRIVATE=true on a trusted network)"
        )
    return addresses
