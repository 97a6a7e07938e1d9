"""Running one ``git`` command against a declared remote: a clean environment, credentials, a deadline.

Why ``subprocess`` and not GitPython's ``Git.execute``: GitPython starts every child from a copy of
``os.environ`` and can only add to it, so variables such as ``GIT_TRACE_CURL`` (which logs Authorization
headers), ``GIT_SSL_NO_VERIFY``, ``GIT_DIR``, ``GIT_ASKPASS`` or another remote's token variable would
reach git; its errors quote the whole stderr; and its timeout kills only the direct child, leaving
``git-remote-https`` or ``ssh`` running. Here every child gets an environment built from scratch, runs in
its own session, and the whole session is killed when the deadline passes.

What each command gets (``prepare``):

- environment: only ``PATH``, ``TMPDIR``, proxy and CA-bundle variables from ours, ``HOME`` set to an
  empty private folder (no ``~/.netrc``, which curl would read, nor any other dotfile), plus
  ``LC_ALL=C`` (messages parsed below are English), ``GIT_TERMINAL_PROMPT=0``, ``GIT_CONFIG_NOSYSTEM=1``
  and ``GIT_CONFIG_GLOBAL=/dev/null`` (no system or user config: no credential helper, ``insteadOf``
  rewrite or hook of theirs), and ``GIT_SSH_COMMAND`` for ssh remotes;
- ``-c`` options: ``credential.helper=`` (none), only the remote's own protocol allowed
  (``protocol.allow=never``, ``protocol.<scheme>.allow=always``), ``http.followRedirects=false`` (a
  redirect must not carry credentials to another host), no hooks, no automatic gc/maintenance;
- HTTP credentials through ``GIT_ASKPASS``: a fixed helper script (no secret inside) in a private
  0700 directory answers git's username/password prompts from two variables set in that child's
  environment only. The secret is never in argv (world-readable in /proc), a URL, a file or a log;
  the environment of a process is readable only by its own user and root;
- ssh identities through ``GIT_SSH_COMMAND``: ``ssh -F /dev/null -i <key> -o IdentitiesOnly=yes
  -o UserKnownHostsFile=<known_hosts> -o StrictHostKeyChecking=yes -o BatchMode=yes ...`` with the
  paths shell-quoted (git runs it through ``sh``). An ssh remote without an identity keeps the user's
  ``HOME`` and ssh agent (their ssh setup) but still never prompts and never trusts an unknown host key.

Failures become ``RemoteUnavailable`` (``unavailable``): the kind is read from git's stderr, and the
message carries at most one line of it, redacted, with URLs replaced by the remote's name.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from worker.errors import WikiqError
from worker.git.remote.config import Remote
from worker.git.remote.credentials import HttpCredentials, SshIdentity, read_credentials
from worker.git.remote.errors import RemoteUnavailable, UnavailableKind
from worker.git.remote.redact import redact

SSH_CONNECT_TIMEOUT = 10
ASKPASS_USERNAME = "WIKIQ_ASKPASS_USERNAME"
ASKPASS_PASSWORD = "WIKIQ_ASKPASS_PASSWORD"
_PASSED_THROUGH = (
    "PATH",
    "HOME",
    "TMPDIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "GIT_EXEC_PATH",
)
# answers git's prompts ("Username for 'https://host': ", "Password for 'https://user@host': ");
# printf is a shell builtin: the secret is never in an argv
_ASKPASS_SCRIPT = f"""#!/bin/sh
# wikiq's GIT_ASKPASS: answers from this process's environment, set by wikiq for one git command.
case "$1" in
  [Uu]sername*) printf '%s\\n' "${ASKPASS_USERNAME}" ;;
  *) printf '%s\\n' "${ASKPASS_PASSWORD}" ;;
esac
"""


@dataclass(frozen=True)
class GitCommand:
    """One prepared command: its argv (never a secret) and its environment (may hold one: not printed)."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class Finished:
    """What a command that ran to its end left: exit code, stdout, stderr (both decoded leniently)."""

    returncode: int
    stdout: str
    stderr: str


def prepare(git_dir: Path, remote: Remote, args: list[str]) -> GitCommand:
    """The command ``git --git-dir <git_dir> <args>`` talking to ``remote``, with its credentials wired."""
    env = base_env()
    secrets: tuple[str, ...] = ()
    credentials = read_credentials(remote)
    if isinstance(credentials, HttpCredentials):
        password = credentials.password.get_secret_value()
        env.update(
            {
                "GIT_ASKPASS": str(askpass_helper()),
                ASKPASS_USERNAME: credentials.username,
                ASKPASS_PASSWORD: password,
            }
        )
        secrets = (password,)
    if remote.scheme == "ssh":
        env["GIT_SSH_COMMAND"] = ssh_command(credentials if isinstance(credentials, SshIdentity) else None)
    if remote.scheme == "ssh" and not isinstance(credentials, SshIdentity):
        # no identity declared: the user's own ssh setup (~/.ssh, agent) is what the operator meant
        if "SSH_AUTH_SOCK" in os.environ:
            env["SSH_AUTH_SOCK"] = os.environ["SSH_AUTH_SOCK"]
    else:
        # an empty private HOME: no ~/.netrc (curl would read it), ~/.ssh/config or other dotfile applies
        env["HOME"] = str(askpass_helper().parent)
    config = [
        "credential.helper=",
        "core.askPass=",
        "core.hooksPath=/dev/null",
        "http.followRedirects=false",
        "protocol.allow=never",
        f"protocol.{remote.scheme}.allow=always",
        "gc.auto=0",
        "maintenance.auto=false",
        "fetch.unpackLimit=1",  # fetched objects stay one pack, which wikiq reads in process (not loose)
    ]
    argv = ["git", "--git-dir", str(git_dir)]
    for option in config:
        argv += ["-c", option]
    return GitCommand(tuple(argv + args), env, secrets)


def base_env() -> dict[str, str]:
    """The environment every git child starts from: a few of ours, no git or user configuration."""
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        {
            "LC_ALL": "C",
            "LANGUAGE": "C",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
    )
    return env


def ssh_command(identity: SshIdentity | None) -> str:
    """``GIT_SSH_COMMAND``: never prompts, never trusts an unknown host; with an identity, nothing else."""
    parts = ["ssh"]
    if identity is not None:
        parts += [
            "-F",
            os.devnull,
            "-i",
            str(identity.key_file),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            f"UserKnownHostsFile={identity.known_hosts_file}",
            "-o",
            f"GlobalKnownHostsFile={os.devnull}",
        ]
    parts += [
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={SSH_CONNECT_TIMEOUT}",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=3",
    ]
    return shlex.join(parts)


def run(command: GitCommand, remote: Remote, operation: str, timeout: float) -> Finished:
    """Run ``command``, killing its whole session after ``timeout`` s (``RemoteUnavailable`` kind timeout)."""
    try:
        finished = execute(list(command.argv), command.env, timeout)
    except subprocess.TimeoutExpired:
        raise RemoteUnavailable(
            f"remote {remote.name!r}: {operation} did not finish within {timeout:g} s", kind="timeout"
        ) from None
    return finished


def execute(argv: list[str], env: dict[str, str], timeout: float) -> Finished:
    """Run ``argv`` in its own session with ``env``; ``subprocess.TimeoutExpired`` after killing it all."""
    try:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd="/",
        )
    except OSError as exc:
        raise WikiqError(f"cannot run git: {exc.strerror}", code="STORAGE_UNAVAILABLE") from None
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        raise
    except BaseException:
        _kill_session(process)
        raise
    return Finished(process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started (git-remote-https, ssh), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a grandchild left the session and holds our pipes
        process.kill()
        process.wait()


def run_local(git_dir: Path, args: list[str], timeout: float = 60.0) -> Finished:
    """A git command on the local repository only (no remote): the same clean environment."""
    try:
        return execute(["git", "--git-dir", str(git_dir), *args], base_env(), timeout)
    except subprocess.TimeoutExpired:
        raise WikiqError(f"git {args[0]} on the local cache timed out", code="STORAGE_UNAVAILABLE") from None


# -- failures -------------------------------------------------------------------------------------

_NOT_FOUND = re.compile(
    r"repository not found|repository '[^']*' not found|does not appear to be a git repository"
    r"|not exported|no such repository|returned error: 404",
    re.I,
)
_AUTH = re.compile(
    r"authentication failed|could not read (?:username|password)|terminal prompts disabled"
    r"|permission denied \(|returned error: 40[13]|host key verification failed|invalid username or password"
    r"|access denied|no matching host key|host key for .* has changed|remote host identification has changed",
    re.I,
)
_UNREACHABLE = re.compile(
    r"connection refused|could not resolve|timed out|failed to connect|unable to connect|unreachable"
    r"|no route to host|connection reset|connection closed|hung up|ssl|certificate|proxy",
    re.I,
)
_KINDS: tuple[tuple[UnavailableKind, re.Pattern[str], str], ...] = (
    ("not_found", _NOT_FOUND, "no such repository there, or no access to it"),
    ("auth", _AUTH, "the credentials (or the ssh host key) were refused"),
    ("unreachable", _UNREACHABLE, "it cannot be reached"),
)
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"]+")
_MAX_DETAIL = 240


def unavailable(
    remote: Remote, operation: str, stderr: str, secrets: tuple[str, ...] = ()
) -> RemoteUnavailable:
    """The ``RemoteUnavailable`` a failed ``operation`` stands for, its kind read from git's ``stderr``."""
    kind, pattern, what = _classify(stderr)
    message = f"remote {remote.name!r}: {operation} failed: {what}"
    detail = describe(stderr, remote, secrets, pattern)
    if detail:
        message += f" (git: {detail})"
    return RemoteUnavailable(message, kind=kind)


def _classify(stderr: str) -> tuple[UnavailableKind, re.Pattern[str] | None, str]:
    """The kind of failure git's ``stderr`` tells, the pattern that told it, and how to say it."""
    for kind, pattern, what in _KINDS:
        if pattern.search(stderr):
            return kind, pattern, what
    return "unreachable", None, "it cannot be reached"


def describe(
    stderr: str, remote: Remote, secrets: tuple[str, ...] = (), telling: re.Pattern[str] | None = None
) -> str:
    """One line of git's ``stderr`` (the first matching ``telling``, else the first ``fatal:``), redacted,
    URLs shown as ``<remote name>``, shortened."""
    lines = [line.strip() for line in redact(stderr, remote, secrets).splitlines() if line.strip()]
    if not lines:
        return ""
    best = [line for line in lines if telling is not None and telling.search(line)]
    fatal = [line for line in lines if line.lower().startswith("fatal:")]
    index = lines.index((best or fatal or lines)[0])
    line = lines[index]
    if line.endswith(":") and index + 1 < len(lines):  # "unable to connect to host:" + "errno=..."
        line += " " + lines[index + 1]
    line = line.replace(remote.url, f"<{remote.name}>")
    line = _URL.sub(f"<{remote.name}>", line)
    return line[:_MAX_DETAIL] + ("..." if len(line) > _MAX_DETAIL else "")


# -- the askpass helper ---------------------------------------------------------------------------

_askpass_lock = threading.Lock()
_askpass_path: Path | None = None


def askpass_helper() -> Path:
    """The askpass script (no secret in it: it answers from the environment of each git command), in a
    private 0700 directory that also serves as the commands' empty ``HOME``.

    One directory per user, ``<tmp>/wikiq-askpass-<uid>``, shared by every wikiq process of that user and
    kept: a directory per process was left behind by every process that died without running its exit
    handlers (SIGKILL, a crash), hundreds of them on a machine running the tests. It is used only if it is
    a real directory owned by this user with mode 0700 (one another user made first, or a symlink, is not);
    otherwise a private directory of this process's own, removed at exit, as before. The script is written
    under a temporary name and renamed into place, so processes starting together never see half of it.
    """
    global _askpass_path
    with _askpass_lock:
        if _askpass_path is not None and os.access(_askpass_path, os.X_OK):
            return _askpass_path  # checked whole when it was set (every writer renames it in whole)
        directory = _shared_private_dir()
        path = directory / "askpass"
        if not _is_helper(path):
            fd, name = tempfile.mkstemp(dir=directory, prefix=".askpass-")
            with os.fdopen(fd, "w") as handle:
                handle.write(_ASKPASS_SCRIPT)
            os.chmod(name, 0o700)
            os.replace(name, path)
        _askpass_path = path
        return path


def _is_helper(path: Path) -> bool:
    """True when ``path`` is our askpass script, executable."""
    try:
        return path.read_text() == _ASKPASS_SCRIPT and os.access(path, os.X_OK)
    except OSError:
        return False


def _shared_private_dir() -> Path:
    """``<tmp>/wikiq-askpass-<uid>`` when it is (or can be made) this user's private directory; else a
    fresh private directory of this process, removed at exit."""
    shared = Path(tempfile.gettempdir()) / f"wikiq-askpass-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        shared.mkdir(mode=0o700)
    try:
        found = os.lstat(shared)
    except OSError:
        found = None
    if (
        found is not None
        and stat.S_ISDIR(found.st_mode)
        and found.st_uid == os.getuid()
        and stat.S_IMODE(found.st_mode) == 0o700
    ):
        return shared
    directory = Path(tempfile.mkdtemp(prefix="wikiq-askpass-"))  # mode 0700
    atexit.register(shutil.rmtree, directory, True)
    return directory
