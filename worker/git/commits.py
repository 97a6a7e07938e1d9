"""Commit objects as wikiq reads and writes them: identities, the ``Wikiq-Job`` trailer, parsing.

Every commit wikiq makes for a job ends with the trailers ``Wikiq-Proof: <HMAC-SHA256 of the job id and
the commit's tree under the deployment's commit key>`` (``job_proof``) and ``Wikiq-Job: <job id>``;
only the last line of each counts, so a caller's message cannot pass itself off as another job's commit,
and without the key no one else (a person pushing to a wiki's remote) can write a commit wikiq takes for a
job's own (``worker.git.repo.WikiRepo.find_job_commit``).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from dataclasses import dataclass

JOB_TRAILER = "Wikiq-Job"
PROOF_TRAILER = "Wikiq-Proof"


def job_proof(key: bytes, job_id: str, tree: str) -> str:
    """The ``Wikiq-Proof`` of a commit of job ``job_id`` with root tree ``tree``, under ``key``."""
    return hmac.new(key, f"wikiq-job\x00{job_id}\x00{tree}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Identity:
    """A git author or committer."""

    name: str
    email: str

    def line(self, when: int) -> bytes:
        """``Name <email> <epoch> +0000`` with characters git cannot store removed."""
        return b"%s %d +0000" % (self._who, when)

    @functools.cached_property
    def _who(self) -> bytes:
        """``Name <email>`` as ``line`` writes it (worked out once: every commit has two such lines)."""
        name = _NOT_IN_NAME.sub("", self.name).strip() or "unknown"
        email = _NOT_IN_EMAIL.sub("", self.email)
        return f"{name} <{email}>".encode()


_NOT_IN_NAME = re.compile(r"[<>\n\r\x00]")
_NOT_IN_EMAIL = re.compile(r"[<>\n\r\x00\s]")


@dataclass(frozen=True)
class CommitInfo:
    """One commit of ``main`` as the API shows it."""

    commit: str
    message: str
    author: Identity
    time: int
    job_id: str | None
    parents: tuple[str, ...]
    proof: str | None = None  # the Wikiq-Proof trailer (``job_proof``), None when there is none


SERVICE = Identity("wikiq", "wikiq@localhost")


def parse_commit(oid: str, data: bytes) -> CommitInfo:
    """Read the fields wikiq shows from a raw commit object."""
    header, _, message_bytes = data.partition(b"\n\n")
    parents: list[str] = []
    author = Identity("unknown", "")
    when = 0
    for line in header.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"parent":
            parents.append(value.decode())
        elif key == b"author":
            match = re.match(rb"^(.*) <(.*)> (\d+) ", value)
            if match:
                author = Identity(match[1].decode("utf-8", "replace"), match[2].decode("utf-8", "replace"))
                when = int(match[3])
    message = message_bytes.decode("utf-8", "replace")
    # wikiq appends its trailer last; a "Wikiq-Job:" line inside the caller's message must not count
    jobs = re.findall(rf"^{JOB_TRAILER}: (\S+)\s*$", message, re.MULTILINE)
    proofs = re.findall(rf"^{PROOF_TRAILER}: ([0-9a-f]{{64}})\s*$", message, re.MULTILINE)
    job = jobs[-1] if jobs else None
    return CommitInfo(oid, message, author, when, job, tuple(parents), proofs[-1] if proofs else None)
