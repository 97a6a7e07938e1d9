"""Where a forge shows two branches compared, so that opening a pull request from a proposal's branch is one
click: ``compare_url`` (pure: no I/O).

Known forges, by the remote URL's host (case-insensitive):

- GitHub (``github.com``, and hosts with ``github`` in their name: GitHub Enterprise):
  ``https://<host>/<owner>/<repo>/compare/<base>...<head>?expand=1`` (``expand``: the pull request form
  opens at once);
- GitLab (``gitlab.com`` and hosts with ``gitlab`` in their name; groups may nest):
  ``https://<host>/<group>/<project>/-/compare/<base>...<head>``;
- Gitea and Forgejo (``codeberg.org``, ``gitea.com``, hosts with ``gitea``, ``forgejo`` or ``codeberg``
  in their name): ``https://<host>/<owner>/<repo>/compare/<base>...<head>``.

An https:// or http:// remote keeps its scheme and port (the forge's web pages are served there); an ssh
one (``ssh://git@host[:port]/owner/repo.git`` or scp-like ``git@host:owner/repo.git``) is shown over https
on the host's default port. User information is dropped, and ``.git`` at the end of the path. Any other
host, scheme (``git://``, ``file://``) or path shape has no compare page: None.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

_SCP_LIKE = re.compile(r"^(?:[^@/:]+@)?(?P<host>[^@/:\[\]]+):(?P<path>.+)\Z")


def compare_url(remote_url: str, base: str, head: str) -> str | None:
    """The forge's page comparing branch ``base`` with branch ``head`` of the repository at ``remote_url``
    (see the module), or None when the host is not a known forge."""
    found = _web_location(remote_url)
    if found is None:
        return None
    origin, host, path = found
    parts = [part for part in path.split("/") if part]
    if not parts:
        return None
    refs = f"{quote(base, safe='/')}...{quote(head, safe='/')}"
    project = "/".join(quote(part, safe="") for part in parts)
    if _is_github(host):
        return f"{origin}/{project}/compare/{refs}?expand=1" if len(parts) == 2 else None
    if _is_gitlab(host):
        return f"{origin}/{project}/-/compare/{refs}" if len(parts) >= 2 else None
    if _is_gitea(host):
        return f"{origin}/{project}/compare/{refs}" if len(parts) == 2 else None
    return None


def _web_location(url: str) -> tuple[str, str, str] | None:
    """``(origin, host, path)`` of the web pages of the repository at git URL ``url``: the origin
    (``https://host[:port]``), the lower-cased host, and the path without ``.git``; None for a URL no
    forge serves pages for."""
    if "://" not in url:
        match = _SCP_LIKE.match(url)
        if match is None:
            return None
        host = match["host"].lower()
        return f"https://{host}", host, _project_path(match["path"])
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if not host or parts.scheme not in ("https", "http", "ssh"):
        return None
    if parts.scheme == "ssh":
        return f"https://{host}", host, _project_path(parts.path)
    shown = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{shown}", host, _project_path(parts.path)


def _project_path(path: str) -> str:
    """``path`` without slashes around it and without a ``.git`` ending."""
    path = path.strip("/")
    return path[: -len(".git")] if path.endswith(".git") else path


def _is_github(host: str) -> bool:
    return "github" in host  # github.com, and GitHub Enterprise hosts


def _is_gitlab(host: str) -> bool:
    return "gitlab" in host


def _is_gitea(host: str) -> bool:
    return any(name in host for name in ("gitea", "forgejo", "codeberg"))  # codeberg.org, gitea.com, ...
