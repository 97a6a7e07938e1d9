"""git operations between a local bare repository (a wiki's cache) and a declared remote's branch.

Each function takes the cache's path and a ``Remote``, runs one git command with the hygiene of
``worker.git.remote.gitcommand`` (clean environment, credentials read now and passed only to that child, a
deadline), and returns plain data or raises a ``RemoteError``: ``RemoteUnavailable`` (kind
``unreachable``, ``timeout``, ``auth``, ``not_found``, ``credentials``) whenever the remote cannot be
used. A refused push is not an exception but a ``PushResult``: ``Accepted``, ``Moved`` or ``Rejected``.

The remote branch's last known value lives in the cache under a private ref, ``refs/wikiq/remote/<branch>``
(``tracking_ref``), set by ``fetch`` and by an accepted ``push_cas``; nothing here touches the cache's
``refs/heads/*``: what the local ``main`` is, is the caller's business.

Progress is logged at debug level on ``wikiq.remote`` with the remote's name, never its URL or a secret.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from pathlib import Path

from worker.errors import WikiqError
from worker.git.refs import write_ref
from worker.git.remote.config import Remote
from worker.git.remote.errors import RemoteUnavailable
from worker.git.remote.gitcommand import prepare, run, run_local, unavailable
from worker.git.remote.porcelain import Accepted, Moved, PushResult, Rejected, outcome, status_of
from worker.git.remote.redact import redact

log = logging.getLogger("wikiq.remote")

LS_REMOTE_TIMEOUT = 30.0
FETCH_TIMEOUT = 600.0
PUSH_TIMEOUT = 120.0
_OBJECT_ID = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")
_NO_SUCH_REF = re.compile(r"couldn't find remote ref", re.I)
_REMOTE_LINE = re.compile(r"^remote: ?(.*?)\s*$")
_MAX_REASON = 300


def tracking_ref(remote: Remote) -> str:
    """The cache's private ref holding the remote branch's last known commit."""
    return f"refs/wikiq/remote/{remote.branch}"


def remote_head(
    cache: Path, remote: Remote, *, timeout: float = LS_REMOTE_TIMEOUT, ref: str | None = None
) -> str | None:
    """The commit the remote branch (or the remote's ``ref``) points at now (``git ls-remote``); None when
    it does not exist."""
    started = time.monotonic()
    ref = remote.ref if ref is None else ref
    command = prepare(cache, remote, ["ls-remote", remote.url, ref])
    finished = run(command, remote, "ls-remote", timeout)
    if finished.returncode != 0:
        raise _failed(remote, "ls-remote", finished.stderr, command.secrets, started)
    head = None
    for line in finished.stdout.splitlines():
        oid, _, name = line.partition("\t")
        if name == ref and _OBJECT_ID.match(oid):
            head = oid
    log.debug("remote %s: ls-remote %s -> %s in %.0f ms", remote.name, ref, head, _ms(started))
    return head


def fetch(cache: Path, remote: Remote, *, timeout: float = FETCH_TIMEOUT) -> str | None:
    """Fetch the remote branch into ``tracking_ref`` and return its commit; None (ref removed) when empty."""
    started = time.monotonic()
    private = tracking_ref(remote)
    args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance"]
    command = prepare(cache, remote, [*args, remote.url, f"+{remote.ref}:{private}"])
    finished = run(command, remote, "fetch", timeout)
    if finished.returncode != 0:
        if _NO_SUCH_REF.search(finished.stderr):
            _local(cache, ["update-ref", "-d", private])
            log.debug("remote %s: fetch %s -> none in %.0f ms", remote.name, remote.ref, _ms(started))
            return None
        raise _failed(remote, "fetch", finished.stderr, command.secrets, started)
    head = _local(cache, ["rev-parse", "--verify", "--quiet", f"{private}^{{commit}}"]).strip()
    log.debug("remote %s: fetch %s -> %s in %.0f ms", remote.name, remote.ref, head, _ms(started))
    return head


def push_cas(
    cache: Path,
    remote: Remote,
    commit: str,
    expected: str | None,
    *,
    timeout: float = PUSH_TIMEOUT,
    built_on_expected: bool = False,
) -> PushResult:
    """Move the remote branch from ``expected`` (None: absent) to ``commit``, or learn why not.

    ``commit`` (and its history) must be in the cache and, when ``expected`` is given, descend from it:
    anything else is a ``ValueError`` before anything is sent, so this never rewrites the branch. The
    push carries ``--force-with-lease=<ref>:<expected>``: git sends it only if the remote advertises
    exactly ``expected``, and the server's receive-pack applies it only if the ref still holds that value
    when it locks it. ``Accepted`` also updates ``tracking_ref``.
    """
    _check_object_id(commit, "commit")
    if expected is not None:
        _check_object_id(expected, "expected")
        if not built_on_expected:  # the caller may vouch for it: it wrote ``commit`` on ``expected``
            _check_descends(cache, commit, expected)
    started = time.monotonic()
    result = _push(cache, remote, remote.ref, commit, expected, timeout, started)
    if isinstance(result, Accepted):
        write_ref(cache, tracking_ref(remote), commit)
    _log_push(remote, remote.ref, expected, commit, result, started)
    return result


def push_branch(
    cache: Path,
    remote: Remote,
    ref: str,
    commit: str | None,
    expected: str | None,
    *,
    timeout: float = PUSH_TIMEOUT,
) -> PushResult:
    """Set the remote's ``ref`` (another branch than the wiki's, e.g. a proposal's) to ``commit``, or
    delete it (``commit`` None), only while it is at ``expected`` (None: absent): ``--force-with-lease``,
    so the new value need not descend from the old one, yet a value someone else pushed is never
    overwritten. ``Moved`` when the ref holds something else; ``Accepted`` (``already``) when it is already
    as asked (a retry whose first answer was lost, a ref deleted by someone else). ``ref`` is never the
    wiki's own branch (``ValueError``)."""
    if ref == remote.ref or not ref.startswith("refs/heads/"):
        raise ValueError(f"{ref!r} is not a branch other than the wiki's")
    if commit is not None:
        _check_object_id(commit, "commit")
    if expected is not None:
        _check_object_id(expected, "expected")
    started = time.monotonic()
    result = _push(cache, remote, ref, commit, expected, timeout, started)
    if isinstance(result, Moved) and remote_head(cache, remote, ref=ref) == commit:
        result = Accepted(commit or "", already=True)
    _log_push(remote, ref, expected, commit, result, started)
    return result


def _push(
    cache: Path,
    remote: Remote,
    ref: str,
    commit: str | None,
    expected: str | None,
    timeout: float,
    started: float,
) -> PushResult:
    """Push ``commit`` (None: delete) to the remote's ``ref`` with ``--force-with-lease`` from ``expected``
    (None: absent): the outcome git's porcelain reports for ``ref`` (a refusal in the remote's own words, a
    deletion done ``Accepted``); ``RemoteUnavailable`` when the outcome is unknown (no line for ``ref``)."""
    args = [
        "push",
        "--porcelain",
        "--no-verify",
        f"--force-with-lease={ref}:{expected or ''}",
        remote.url,
        f"{commit or ''}:{ref}",
    ]
    command = prepare(cache, remote, args)
    finished = run(command, remote, "push", timeout)
    status = status_of(finished.stdout, ref)
    if status is not None and status.flag == "-" and commit is None:
        result: PushResult | None = Accepted("")
    else:
        result = outcome(status, commit or "") if status is not None else None
    if result is None:
        raise _failed(remote, "push", finished.stderr, command.secrets, started)
    if isinstance(result, Rejected):
        return Rejected(_rejection(result.reason, finished.stderr, remote, command.secrets))
    return result


def _log_push(
    remote: Remote, ref: str, expected: str | None, commit: str | None, result: PushResult, started: float
) -> None:
    """The debug line of one push: the remote's name, never its URL."""
    log.debug(
        "remote %s: push %s %s..%s -> %s in %.0f ms",
        remote.name,
        ref,
        expected,
        commit,
        _describe_result(result),
        _ms(started),
    )


def clone_or_init_cache(path: Path, remote: Remote, *, timeout: float = FETCH_TIMEOUT) -> str | None:
    """Make ``path`` a bare cache of ``remote`` (created if missing) and fetch its branch; idempotent.

    A missing repository is made under a temporary name next to ``path`` and renamed into place, so a
    half-made cache is never seen; an existing one must be a bare repository (``ValueError`` otherwise).
    Returns what ``fetch`` returns: the remote branch's commit, or None for an empty remote.
    """
    path = Path(path)
    if not path.exists():
        _init_bare(path)
    elif _local(path, ["rev-parse", "--is-bare-repository"], check=False).strip() != "true":
        raise ValueError(f"{path} exists and is not a bare git repository")
    return fetch(path, remote, timeout=timeout)


def _init_bare(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        _local(
            temporary, ["init", "--quiet", "--bare", "--template=", "--initial-branch=main", str(temporary)]
        )
        try:
            temporary.rename(path)
        except OSError:  # another process made it meanwhile: theirs is as good as ours
            if not path.exists():
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _check_object_id(value: str, what: str) -> None:
    if not isinstance(value, str) or not _OBJECT_ID.match(value):
        raise ValueError(f"{what} must be a full lowercase hexadecimal object id")


def _check_descends(cache: Path, commit: str, expected: str) -> None:
    """``ValueError`` unless ``commit`` descends from ``expected`` (both present in the cache)."""
    finished = run_local(cache, ["merge-base", "--is-ancestor", expected, commit])
    if finished.returncode == 1:
        raise ValueError(f"{commit} does not descend from {expected}: publishing it would rewrite the branch")
    if finished.returncode != 0:
        raise ValueError(f"{commit} or {expected} is not a commit in the cache (fetch first)")


def _local(cache: Path, args: list[str], *, check: bool = True) -> str:
    finished = run_local(cache, args)
    if check and finished.returncode != 0:
        detail = finished.stderr.strip().splitlines()[-1:] or [f"exit {finished.returncode}"]
        raise WikiqError(f"git {args[0]} on the cache failed: {detail[0][:200]}", code="STORAGE_UNAVAILABLE")
    return finished.stdout


def _failed(
    remote: Remote, operation: str, stderr: str, secrets: tuple[str, ...], started: float
) -> RemoteUnavailable:
    error = unavailable(remote, operation, stderr, secrets)
    log.debug("%s [%s, %.0f ms]", error.message, error.kind, _ms(started))
    return error


def _rejection(reason: str, stderr: str, remote: Remote, secrets: tuple[str, ...]) -> str:
    """git's reason followed by what the remote's hooks said (``remote:`` lines), redacted and shortened."""
    said = []
    for line in stderr.splitlines():
        match = _REMOTE_LINE.match(line)
        if match and match[1]:
            said.append(match[1])
    text = reason + (": " + " / ".join(said[:5]) if said else "")
    text = redact(text, remote, secrets)
    return text[:_MAX_REASON] + ("..." if len(text) > _MAX_REASON else "")


def _describe_result(result: PushResult) -> str:
    if isinstance(result, Accepted):
        return "accepted (already there)" if result.already else "accepted"
    if isinstance(result, Moved):
        return f"moved ({result.reason})"
    return "rejected"


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000
