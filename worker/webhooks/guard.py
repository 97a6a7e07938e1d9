"""Which webhook URLs wikiq may call: http(s), no credentials, and (unless allowed) no address that
resolves to loopback, private, link-local, CGNAT, multicast or reserved ranges.

A URL is kept as it will be sent (``sendable_url``): its host IDNA-encoded (``bücher.example`` is
``xn--bcher-kva.example``), every label 1 to 63 bytes and the name at most 253, its path, query and
fragment percent-encoded as UTF-8 where they hold what a request line may not (spaces, controls,
non-ASCII, a ``%`` that starts no escape), all of it at most ``MAX_URL`` characters; a URL that cannot be
made so is ``INVALID_WEBHOOK``. So an accepted URL can always be written on the wire.

IPv6 forms that carry an IPv4 address inside them (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, 6to4 ``2002:AABB:CCDD::/48``, Teredo ``2001::/32`` and NAT64 ``64:ff9b::/96`` and
``64:ff9b:1::/48``) are judged by the IPv4 address they reach too: ``http://[2002:7f00:1::]/`` is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from urllib.parse import quote, urlsplit, urlunsplit

import idna

from worker.errors import InvalidWebhook, WebhookRefused

MAX_URL = 2048  # characters of a webhook URL as sent (the schema's bound on what is submitted)
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")  # an ASCII DNS label (``_`` as DNS allows)
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# kept as they are in a path (RFC 3986 pchar and "/"), a query or fragment (also "?"); the rest is escaped
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"
_QUERY_SAFE = _PATH_SAFE + "?"

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
    """``(host, port)`` of an acceptable webhook URL; ``WebhookRefused`` for a bad shape (the host as
    given: ``sendable_url`` encodes it)."""
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


def encoded_host(host: str) -> str:
    """``host`` as DNS and a ``Host`` header take it: an IP address as it is, a name IDNA-encoded (UTS 46
    mapping, lowercase) with labels of 1 to 63 bytes and at most 253 bytes in all (a trailing dot kept);
    ``InvalidWebhook`` when it cannot be."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    name, dot = (host[:-1], ".") if host.endswith(".") else (host, "")
    if not name.isascii():
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise InvalidWebhook(f"webhook.url's host cannot be encoded for DNS (IDNA): {exc}") from None
    name = name.lower()
    labels = name.split(".")
    if len(name) > 253 or any(not _LABEL.fullmatch(label) for label in labels):
        raise InvalidWebhook(
            "webhook.url's host is no DNS name: each dot-separated label must be 1 to 63 letters, digits, "
            "hyphens or underscores (not starting or ending with a hyphen), 253 characters in all"
        )
    return name + dot


def _escaped(text: str, safe: str) -> str:
    return quote(_STRAY_PERCENT.sub("%25", text), safe=safe, encoding="utf-8", errors="strict")


def sendable_url(url: str) -> str:
    """``url`` as it is sent and kept (see the module): ``WebhookRefused`` for a bad shape,
    ``InvalidWebhook`` for a host or length that cannot be sent."""
    host, _ = parse_webhook_url(url)
    parts = urlsplit(url)
    encoded = encoded_host(host)
    shown = f"[{encoded}]" if ":" in encoded else encoded
    netloc = shown if parts.port is None else f"{shown}:{parts.port}"
    try:
        path = _escaped(parts.path, _PATH_SAFE)
        query = _escaped(parts.query, _QUERY_SAFE)
        fragment = _escaped(parts.fragment, _QUERY_SAFE)
    except UnicodeError:  # a lone surrogate, which no JSON body decodes to but a caller in process might
        raise InvalidWebhook("webhook.url holds characters UTF-8 cannot encode") from None
    sent = urlunsplit((parts.scheme, netloc, path, query, fragment))
    if len(sent) > MAX_URL:
        raise InvalidWebhook(f"webhook.url is {len(sent)} characters once encoded, over {MAX_URL}")
    return sent


async def lookup(host: str, port: int) -> list[str]:
    """The TCP addresses of ``host``, in the resolver's order: itself when it is an IP address (no resolver
    thread), else what this machine's resolver answers (``OSError`` when it cannot)."""
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host))]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, sorted; ``WebhookRefused`` when it does not resolve,
    ``InvalidWebhook`` when it cannot even be asked (a name the resolver cannot encode)."""
    try:
        return sorted(await lookup(host, port))
    except socket.gaierror:
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from None
    except UnicodeError:
        raise InvalidWebhook(f"webhook host {host[:100]!r} cannot be encoded for DNS") from None


async def check_webhook_url(url: str, allow_private: bool) -> str:
    """The URL to keep and send (``sendable_url``), once it is one wikiq may call: ``WEBHOOK_REFUSED`` for a
    bad shape or an address it must not reach, ``INVALID_WEBHOOK`` for one that cannot be sent."""
    sent = sendable_url(url)
    if allow_private:
        return sent
    host, port = parse_webhook_url(sent)
    addresses = await resolve(host, port)
    if not addresses or any(address_refused(a) for a in addresses):
        raise WebhookRefused(
            "webhook.url resolves to a loopback, private, link-local or reserved address; "
            "use a public address (or set WIKIQ_WEBHOOK_ALLOW_PRIVATE=true on a trusted network)"
        )
    return sent
