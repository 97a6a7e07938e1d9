"""Which ``Host`` and ``Origin`` the API answers, for every route (against DNS rebinding and cross-site
posts).

A page on another site can make a browser send requests here, by a name of its own that it later points
at this machine (DNS rebinding) or by a form posted across sites. So:

- a request whose ``Host`` is not one of the service's names is refused with ``421 MISDIRECTED_HOST``. The
  service's names are what the bind address implies (loopback: ``localhost`` and every loopback address;
  a wildcard such as ``0.0.0.0``: ``localhost`` and any IP address, which no rebinding page can use as
  its own name; another address or name: itself) plus ``WIKIQ_ALLOWED_HOSTS``. The port is not compared:
  port forwards and proxies change it, and a rebinding page can only bring its own name. ``/healthz``
  and ``/readyz`` answer any ``Host``: probes call them by whatever name they know, and they tell nothing;
- a state-changing request (any method but GET, HEAD and OPTIONS), and every request to ``/mcp``, that
  carries an ``Origin`` other than the request's own (scheme aside: a TLS proxy in front changes it) is
  refused with ``403 FORBIDDEN``. Requests without ``Origin`` (the CLI, the Python client, curl, agents)
  are not browsers' cross-site requests and pass.
"""

from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ANY_HOST_PATHS = frozenset({"/healthz", "/readyz"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def split_host(value: str) -> tuple[str, str]:
    """``(name, port)`` of a ``Host`` header value: the name lowercased, without brackets or a trailing
    dot; the port as given ("" when none)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name, rest.removeprefix(":")
    name, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or ":" in name:  # no port, or a bare IPv6 address
        return value.rstrip("."), ""
    return name.rstrip("."), port


class AllowedHosts:
    """The names this service answers for: what ``bind`` implies, plus ``extra`` (see the module)."""

    def __init__(self, bind: str, extra: tuple[str, ...] = ()) -> None:
        bind = bind.strip().lower().removeprefix("[").removesuffix("]")
        self.any = "*" in extra
        self.names = {name for name in extra if not name.startswith(".")}
        self.domains = tuple(name for name in extra if name.startswith("."))
        bound = _ip(bind)
        self.any_ip = bind in _WILDCARDS
        self.loopback = self.any_ip or bind == "localhost" or (bound is not None and bound.is_loopback)
        if self.loopback:
            self.names.add("localhost")
        elif bound is not None:
            self.names.add(str(bound))
        else:
            self.names.add(bind)

    def allows(self, name: str) -> bool:
        """True when ``name`` (a ``Host`` header's name, as ``split_host`` gives it) is one of ours."""
        if self.any or name in self.names:
            return True
        if any(name == domain[1:] or name.endswith(domain) for domain in self.domains):
            return True
        ip = _ip(name)
        if ip is None:
            return False
        return self.any_ip or (self.loopback and ip.is_loopback) or str(ip) in self.names


def _same_origin(origin: str, host: str) -> bool:
    """True when the ``Origin`` header names the same host and port as the ``Host`` header (either
    scheme, default ports implied)."""
    if origin == "null":
        return False  # an opaque origin (a sandboxed frame, a data: URL) is never ours
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    ours, our_port = split_host(host)
    defaults = {"", "80", "443"}
    theirs = str(port) if port is not None else ""
    if our_port in defaults and theirs in defaults:
        return parts.hostname.rstrip(".") == ours
    return (parts.hostname.rstrip("."), theirs) == (ours, our_port)


def _refusal(status: int, code: str, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": {"code": code, "message": message, "index": None}}).encode()


class HostGuard:
    """ASGI middleware refusing a foreign ``Host`` (421) and a foreign ``Origin`` (403), see the module."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                status, body = refusal
                headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, bytes] | None:
        """The status and body refusing this request, or None when it may go on."""
        host = origin = None
        for key, value in scope.get("headers", ()):
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        path: str = scope.get("path", "")
        if host is not None and path not in _ANY_HOST_PATHS and not self.allowed.allows(split_host(host)[0]):
            return _refusal(
                421,
                "MISDIRECTED_HOST",
                f"this server does not answer for the host {host[:100]!r}: call it by its own address, "
                "or have the operator add the name to WIKIQ_ALLOWED_HOSTS",
            )
        checked = (
            scope.get("method", "GET") not in _SAFE_METHODS or path == "/mcp" or path.startswith("/mcp/")
        )
        if checked and origin is not None and not _same_origin(origin.strip().lower(), host or ""):
            return _refusal(
                403,
                "FORBIDDEN",
                f"a request from the page at {origin[:100]!r} may not change anything here: "
                "only this server's own pages may",
            )
        return None
