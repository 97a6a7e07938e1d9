"""Reading ``git push --porcelain``: what happened to the one ref a compare-and-swap push updates.

git prints, on stdout, one line per ref after ``To <url>``::

    <flag> TAB <src>:<dst> TAB <summary> [(<reason>)]

with flag `` `` (fast-forward), ``+`` (forced), ``*`` (new ref), ``=`` (up to date), ``-`` (deleted) or
``!`` (rejected). The outcomes wikiq tells apart:

- ``Accepted``: flags `` ``, ``+``, ``*``, ``=``. ``=`` means the branch already was at the commit (a
  retried push whose first answer was lost): published all the same.
- ``Moved``: the branch is not where the caller expected, so fetch and check again: ``[rejected]`` with
  ``stale info`` (our lease lost), ``fetch first`` or ``non-fast-forward``; or ``[remote rejected]`` with
  git's own lost-race message (``cannot lock ref ... is at X but expected Y``: someone pushed between the
  advertisement and our update, and the server's atomic old-value check refused us).
- ``Rejected``: any other refusal (a hook, a protected branch): the remote's decision.
- no line for our ref, or ``[remote failure]``: the outcome is unknown; the caller treats the remote as
  unavailable and, on its next attempt, a push of the same commit answers ``=`` if it had gone through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(?P<flag>[ +*=!-])\t(?P<src>[^\t]*):(?P<dst>[^\t]*)\t(?P<summary>.*)$")
_REASON = re.compile(r"^(?P<summary>.*?)(?: \((?P<reason>.*)\))?$")
_MOVED_REJECTED = ("stale info", "fetch first", "non-fast-forward", "remote ref updated since checkout")
_LOST_RACE = re.compile(r"cannot lock ref|but expected|reference already exists", re.I)


@dataclass(frozen=True)
class RefStatus:
    """One ref line of ``git push --porcelain``."""

    flag: str
    source: str
    destination: str
    summary: str
    reason: str | None


@dataclass(frozen=True)
class Accepted:
    """The remote branch is now at ``commit``; ``already`` when it was there before this push."""

    commit: str
    already: bool = False


@dataclass(frozen=True)
class Moved:
    """The remote branch was not at the expected commit (someone pushed): fetch, check again, retry."""

    reason: str


@dataclass(frozen=True)
class Rejected:
    """The remote refused the update for a reason of its own (``reason``: git's and the hook's words)."""

    reason: str


PushResult = Accepted | Moved | Rejected


def parse_porcelain(stdout: str) -> list[RefStatus]:
    """Every ref line in ``git push --porcelain`` output (``To ...`` and ``Done`` lines skipped)."""
    statuses = []
    for line in stdout.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        parts = _REASON.match(match["summary"])
        assert parts is not None  # the pattern matches any text
        statuses.append(
            RefStatus(match["flag"], match["src"], match["dst"], parts["summary"], parts["reason"])
        )
    return statuses


def status_of(stdout: str, ref: str) -> RefStatus | None:
    """The line about destination ``ref``, or None when git printed none."""
    return next((s for s in parse_porcelain(stdout) if s.destination == ref), None)


def outcome(status: RefStatus, commit: str) -> PushResult | None:
    """What ``status`` means for a push of ``commit``; None when the outcome is unknown."""
    if status.flag in " +*=":
        return Accepted(commit, already=status.flag == "=")
    if status.flag != "!":
        return None
    reason = status.reason or status.summary
    if status.summary == "[rejected]":
        if reason in _MOVED_REJECTED:
            return Moved(reason)
        return Rejected(reason)
    if status.summary == "[remote rejected]":
        if _LOST_RACE.search(reason):
            return Moved(reason)
        return Rejected(reason)
    return None
