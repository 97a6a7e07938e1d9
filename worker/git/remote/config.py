"""The operator's remotes file (``WIKIQ_REMOTES_FILE``, TOML): which git remotes wikis may live in.

```toml
[[remotes]]
name = "team-docs"                                # what API callers name (a wiki-id-like name)
url = "https://git.example.org/team/docs.git"     # https://, http://, ssh://, scp-like, git://, file://
branch = "main"                                   # default "main"
token_env = "TEAM_DOCS_TOKEN"                     # at most one credential style, see below
```

Credential styles (at most one per remote; none is fine for a remote that needs no credentials):

- ``token_env`` or ``token_file``: an access token sent as the HTTP Basic password, with the username
  ``username`` when given, else ``x-access-token`` (what GitHub expects for app tokens and accepts for
  personal ones; GitLab and Gitea accept any non-empty username with a token, GitLab OAuth tokens need
  ``username = "oauth2"``, Bitbucket access tokens ``x-token-auth``).
- ``username`` + ``password_env`` or ``password_file``: HTTP Basic with a password.
- ``ssh_key_file`` + ``known_hosts_file`` (both): an ssh identity and the only host keys trusted.

Rules enforced here, so a bad file is refused as a whole with one ``ValueError`` naming the file and the
problem: unknown fields are refused; the URL is one of the schemes above (``<transport>::`` helpers such as
``ext::`` are refused: they run commands); a URL never carries a password or, for http(s)/git/file, any
userinfo at all (credentials come from the environment or files, read when used, see
``worker.git.remote.credentials``); HTTP credentials need an https:// URL, or http:// to a loopback host;
ssh options need an ssh URL. Relative file paths are taken from the remotes file's folder. No message
ever quotes a value from the file, so a secret pasted in the wrong place is not echoed.

The model holds names of environment variables and paths, never a secret: a ``Remote`` may be logged,
serialised or shown.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

REMOTE_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"  # pydantic's (Rust) regex: "$" is the very end
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
SCHEMES = frozenset({"https", "http", "ssh", "git", "file"})
TOKEN_USERNAME = "x-access-token"
# scp-like "[user@]host:path" (git's rule: a colon before any slash, and no "scheme://")
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^@/:\[\]]+|\[[0-9A-Fa-f:.]+\]):(?P<path>.+)\Z")
_HOST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}\Z")
_BAD_URL_CHARS = re.compile(r"[\x00-\x20\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")

Scheme = Literal["https", "http", "ssh", "git", "file"]
CredentialStyle = Literal["token", "password", "ssh"]


class Remote(BaseModel):
    """One declared git remote: where it is, which branch, and where its credentials are read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=REMOTE_NAME)
    url: str
    branch: str = "main"
    username: str | None = None
    token_env: str | None = None
    token_file: Path | None = None
    password_env: str | None = None
    password_file: Path | None = None
    ssh_key_file: Path | None = None
    known_hosts_file: Path | None = None

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        _parse_url(url)
        return url

    @field_validator("branch")
    @classmethod
    def _check_branch(cls, branch: str) -> str:
        if not is_branch_name(branch):
            raise ValueError("not a valid git branch name")
        return branch

    @field_validator("username")
    @classmethod
    def _check_username(cls, username: str | None) -> str | None:
        if username is not None and (
            not username or len(username) > 256 or ":" in username or _BAD_URL_CHARS.search(username)
        ):
            raise ValueError("must be 1-256 characters without ':', spaces or control characters")
        return username

    @field_validator("token_env", "password_env")
    @classmethod
    def _check_env_name(cls, name: str | None) -> str | None:
        if name is not None and not ENV_NAME.match(name):
            raise ValueError("must be the name of an environment variable (letters, digits, _)")
        return name

    @field_validator("token_file", "password_file", "ssh_key_file", "known_hosts_file", mode="before")
    @classmethod
    def _check_path(cls, value: object) -> object:
        if isinstance(value, str) and (not value.strip() or _CONTROL.search(value)):
            raise ValueError("must be a non-empty file path without control characters")
        return value

    @field_validator("token_file", "password_file", "ssh_key_file", "known_hosts_file")
    @classmethod
    def _resolve_path(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base")
        if value is not None and base is not None and not value.is_absolute():
            return Path(base) / value
        return value

    @model_validator(mode="after")
    def _check_credentials(self) -> Remote:
        styles = [
            style
            for style, fields in (
                ("token", (self.token_env, self.token_file)),
                ("password", (self.password_env, self.password_file)),
                ("ssh", (self.ssh_key_file, self.known_hosts_file)),
            )
            if any(f is not None for f in fields)
        ]
        if len(styles) > 1:
            raise ValueError(
                "give one credential style: token_env or token_file; username with password_env or "
                "password_file; or ssh_key_file with known_hosts_file"
            )
        style = styles[0] if styles else None
        if style == "token" and self.token_env is not None and self.token_file is not None:
            raise ValueError("give token_env or token_file, not both")
        if style == "password":
            if self.password_env is not None and self.password_file is not None:
                raise ValueError("give password_env or password_file, not both")
            if self.username is None:
                raise ValueError("password_env/password_file need a username")
        if style is None and self.username is not None:
            raise ValueError("username needs password_env, password_file, token_env or token_file")
        if style == "ssh" and (self.ssh_key_file is None or self.known_hosts_file is None):
            raise ValueError("ssh_key_file and known_hosts_file go together")
        if style in ("token", "password"):
            if self.scheme not in ("https", "http"):
                raise ValueError("token and password credentials need an https:// URL")
            if self.scheme == "http" and not _is_loopback(_parse_url(self.url)[1]):
                raise ValueError("credentials would cross the network in clear text: use https://")
        if style == "ssh" and self.scheme != "ssh":
            raise ValueError("ssh_key_file and known_hosts_file need an ssh:// or scp-like URL")
        return self

    @property
    def scheme(self) -> Scheme:
        """The transport git uses: https, http, ssh (also for scp-like URLs), git or file."""
        return _parse_url(self.url)[0]

    @property
    def credential_style(self) -> CredentialStyle | None:
        """``token``, ``password``, ``ssh`` or None, as declared."""
        if self.token_env is not None or self.token_file is not None:
            return "token"
        if self.password_env is not None or self.password_file is not None:
            return "password"
        if self.ssh_key_file is not None:
            return "ssh"
        return None

    @property
    def ref(self) -> str:
        """The remote branch's full ref name, ``refs/heads/<branch>``."""
        return f"refs/heads/{self.branch}"


class _RemotesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    remotes: list[Remote] = []


def load_remotes(path: Path) -> dict[str, Remote]:
    """The remotes declared in the TOML file ``path``, by name; one ``ValueError`` naming file and problem."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ValueError(
            f"remotes file {path}: cannot read it ({exc.strerror or type(exc).__name__})"
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"remotes file {path}: not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's messages give a position, never the offending text
        raise ValueError(f"remotes file {path}: not valid TOML: {exc}") from None
    try:
        declared = _RemotesFile.model_validate(data, context={"base": path.parent})
    except ValidationError as exc:
        raise ValueError(f"remotes file {path}: {_describe(exc, data)}") from None
    remotes: dict[str, Remote] = {}
    for remote in declared.remotes:
        if remote.name in remotes:
            raise ValueError(f"remotes file {path}: remote {remote.name!r} is declared twice")
        remotes[remote.name] = remote
    return remotes


def is_branch_name(branch: str) -> bool:
    """Whether ``branch`` is a name ``git check-ref-format --branch`` accepts (a conservative subset)."""
    if not branch or len(branch) > 200 or branch == "@":
        return False
    if branch.startswith(("-", "/")) or branch.endswith(("/", ".")):
        return False
    if "//" in branch or ".." in branch or "@{" in branch or _BAD_REF_CHARS.search(branch):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in branch.split("/"))


def _parse_url(url: str) -> tuple[Scheme, str]:
    """``(scheme, host)`` of an acceptable remote URL; ``ValueError`` (never quoting it) otherwise."""
    if not url or len(url) > 2048 or _BAD_URL_CHARS.search(url):
        raise ValueError("must be a URL without spaces or control characters")
    if url.startswith("-"):
        raise ValueError("must not start with '-'")
    if "::" in url.split("/", 1)[0]:
        raise ValueError("git remote helpers ('<transport>::...') are not allowed")
    if "://" not in url:
        return "ssh", _parse_scp_like(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError("is not a valid URL") from None
    scheme = parts.scheme
    if scheme not in SCHEMES or not url.startswith(f"{scheme}://"):  # urlsplit lowercases; git would not
        raise ValueError(
            "scheme must be one of https, http, ssh, git, file, in lowercase (or an scp-like user@host:path)"
        )
    if parts.password is not None or (scheme != "ssh" and "@" in parts.netloc):
        raise ValueError(
            "must not carry credentials: give token_env, token_file, username with password_env or "
            "password_file instead"
        )
    if scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError("a file:// URL names an absolute path: file:///srv/git/docs.git")
        return "file", ""
    host = parts.hostname or ""
    _check_host(host, parts.username)
    if not parts.path or parts.path == "/":
        raise ValueError("names no repository path")
    return scheme, host  # type: ignore[return-value]


def _parse_scp_like(url: str) -> str:
    match = _SCP_LIKE.match(url)
    if match is None:
        raise ValueError(
            "must be a URL with a scheme (https://, http://, ssh://, git://, file://) or an scp-like "
            "user@host:path"
        )
    if "@" in match["path"] or ":" in (match["user"] or ""):
        raise ValueError("must not carry credentials (use ssh_key_file with an ssh URL)")
    if match["path"].startswith(("-", ":")):
        raise ValueError("has an invalid repository path")
    _check_host(match["host"], match["user"])
    return match["host"]


def _check_host(host: str, user: str | None) -> None:
    if not _HOST_NAME.match(host) and not _is_ip(host.strip("[]")):
        raise ValueError("has an invalid host")
    if user is not None and (not user or user.startswith("-")):
        raise ValueError("has an invalid user name")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _describe(exc: ValidationError, data: object) -> str:
    """The first problems of a validation error as ``remotes[1] (name): field: message``, without values."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False)[:3]:
        loc = list(error["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "remotes" and isinstance(loc[1], int):
            where = f"remotes[{loc[1]}]"
            name = _declared_name(data, loc[1])
            if name is not None:
                where += f" ({name})"
            loc = loc[2:]
        field = ".".join(str(part) for part in loc)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] == "string_pattern_mismatch" and field == "name":
            message = "must match ^[a-z0-9][a-z0-9._-]{0,62}$"
        problems.append(": ".join(part for part in (where, field, message) if part))
    return "; ".join(problems)


def _declared_name(data: object, index: int) -> str | None:
    """The ``name`` of remote ``index`` in the raw file when it is a valid name (so safe to repeat)."""
    try:
        name = data["remotes"][index]["name"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    return name if isinstance(name, str) and re.fullmatch(REMOTE_NAME[1:-1], name) else None
