"""Which webhook URLs wikiq may call: http(s), no credentials, and (unless allowed) no address that
resolves to loopback, private, link-local, CGNAT, multicast or reserved ranges.

IPv6 forms that carry an IPv4 address inside them (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, 6to4 ``2002:AABB:CCDD::/48``, Teredo ``2001::/32`` and NAT64 ``64:ff9b::/96`` and
``64:ff9b:1::/48``) are judged by the IPv4 address they reach too: ``http://[2002:7f00:1::]/`` is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from urllib.parse import urlsplit

from worker.errors import WebhookRefused

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_V4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to by a standard translation (none for a plain one)."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)  # (server, client)
    if any(ip in net for net in _NAT64) or (ip in _V4_COMPATIBLE and int(ip) > 1):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def address_refused(address: str) -> bool:
    """True when ``address`` is not a public unicast address, or leads to one that is not."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if any(_refused(v4) for v4 in inner):
            return True
        if ip.ipv4_mapped is not None:
            return False  # judged by its IPv4 address above
    return _refused(ip)


def _refused(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
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


async def lookup(host: str, port: int) -> list[str]:
    """The TCP addresses of ``host``, in the resolver's order: itself when it is an IP address (no resolver
    thread), else what this machine's resolver answers (``OSError`` when it cannot)."""
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host))]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, sorted; ``WebhookRefused`` when it does not resolve."""
    try:
        return sorted(await lookup(host, port))
    except socket.gaierror:
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from None


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
