"""Every Redis key and channel wikiq uses, in one place (like arq's ``constants.py``).

Only JSON and plain strings are stored under them. Keys derived from a caller-controlled string (an
idempotency key, a principal, a session id) hash it, so no caller can name another key.
"""

from __future__ import annotations

import hashlib

PREFIX = "wikiq:"
EVENTS = "wikiq:events"  # pub/sub: a job id, published when the job finishes
WORKERS = "wikiq:workers"  # sorted set: worker id -> last heartbeat (ms)
WEBHOOK_QUEUE = "wikiq:webhooks"  # the arq queue of webhook delivery attempts
OUTBOX_GROUP = "takers"  # the consumer group of every partition's webhook outbox (``outbox``)
METRICS = "wikiq:metrics"  # hash: metric field -> value, added to by every worker
WIKIS = "wikiq:wikis"  # hash: wiki id -> its registry entry (JSON), for remote-backed wikis
WIKI_HEADS = "wikiq:wiki-heads"  # hash: wiki id -> "<head commit> <published ms>", remote-backed wikis
COMMIT_SECRET = "wikiq:commit-secret"  # the generated secret of Wikiq-Proof trailers (no WIKIQ_COMMIT_SECRET)


def _digest(text: str, size: int = 32) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def job(job_id: str) -> str:
    """A job record (JSON)."""
    return f"wikiq:job:{job_id}"


def wiki_jobs(wiki: str) -> str:
    """Sorted set of a wiki's job ids by submission time (ms)."""
    return f"wikiq:wiki-jobs:{wiki}"


def idempotency(scope: str, key: str) -> str:
    """An idempotency key of a principal on a wiki: ``"<job id> <fingerprint>"``, kept 24 h."""
    return "wikiq:idem:" + hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest()


def queued(principal_id: str) -> tuple[str, str]:
    """A principal's unfinished jobs (hash: job id -> bytes) and the counter of their total."""
    digest = _digest(principal_id)
    return f"wikiq:queued:{digest}", f"wikiq:queued-bytes:{digest}"


def kept(principal_id: str) -> tuple[str, str]:
    """A principal's finished dry runs whose results Redis still keeps (sorted set: job id by expiry ms)
    and their sizes (hash: job id -> bytes); the sizes count in the queued-bytes total."""
    digest = _digest(principal_id)
    return f"wikiq:kept:{digest}", f"wikiq:kept-bytes:{digest}"


def retained(principal_id: str) -> tuple[str, str, str]:
    """A principal's finished job records Redis keeps (sorted set: job id by submission ms), what each
    counts and how to drop it (hash: job id -> ``"<bytes> <status> <wiki> [<idempotency key>]"``), and
    their total (string: bytes)."""
    digest = _digest(principal_id)
    return f"wikiq:retained:{digest}", f"wikiq:retained-jobs:{digest}", f"wikiq:retained-bytes:{digest}"


def plan_used(job_id: str) -> str:
    """Set once the plan of dry run ``job_id`` was submitted: a plan commits once."""
    return f"wikiq:plan-used:{job_id}"


def queue(partition: int) -> str:
    """The arq queue of a partition."""
    return f"wikiq:queue:{partition}"


def bell(partition: int) -> str:
    """The doorbell list rung when work arrives on a partition."""
    return f"wikiq:bell:{partition}"


def worker_bell(worker_id: str) -> str:
    """The doorbell list of one worker process, rung when a partition is handed back or a process joins."""
    return f"wikiq:worker-bell:{worker_id}"


def lease(partition: int) -> str:
    """The lease naming the worker that owns a partition."""
    return f"wikiq:lease:{partition}"


def landing(partition: int) -> str:
    """String: when a worker of ``partition`` last had a replica confirm the jobs it was about to land (ms;
    the write ``WAIT`` waits for, ``worker.jobs.queue.confirm_on_replica``)."""
    return f"wikiq:landing:{partition}"


def lease_epoch(partition: int) -> str:
    """The counter every grant of a partition's lease raises: the fencing token of the run that holds it."""
    return f"wikiq:lease-epoch:{partition}"


def outbox(partition: int) -> str:
    """The webhook outbox of a partition (a stream): one entry (job id, round) per webhook round to send."""
    return f"wikiq:outbox:{partition}"


def rate(principal_id: str, slot: int) -> str:
    """A principal's request counter in one rate-limit window."""
    return f"wikiq:rate:{_digest(principal_id)}:{slot}"


def once(what: str) -> str:
    """A marker that lets ``what`` happen once per interval."""
    return "wikiq:once:" + _digest(what)


def ui_session(session_id: str) -> str:
    """A status-page session: the SHA-256 of the token that signed in."""
    return "wikiq:ui-session:" + hashlib.sha256(session_id.encode()).hexdigest()


def ui_sessions_of(token_digest: str) -> str:
    """The status-page sessions of one token (sorted set: session key by creation ms)."""
    return "wikiq:ui-sessions:" + hashlib.sha256(token_digest.encode()).hexdigest()


def attempt(job_id: str, round_: int, number: int) -> str:
    """The arq job id of one webhook delivery attempt (a second enqueue of the same attempt is a no-op)."""
    return f"wh:{job_id}:{round_}:{number}"


def proposal(proposal_id: str) -> str:
    """A proposal (JSON): its author, revisions (dry-run job ids), decision and landing job."""
    return f"wikiq:proposal:{proposal_id}"


def wiki_proposals(wiki: str) -> str:
    """Sorted set of a wiki's proposal ids by creation time (ms)."""
    return f"wikiq:wiki-proposals:{wiki}"


def proposal_refs(partition: int) -> str:
    """Hash of the proposal revisions written on a partition's wikis (``<wiki>/<proposal id>`` ->
    ``"<check job id> <commit> <pushed commit or -> <branch or ->"``): what its worker's sweep removes once
    the proposal is decided (``worker.jobs.revisions``)."""
    return f"wikiq:proposal-refs:{partition}"


def author_proposals(principal_id: str) -> str:
    """Sorted set of the proposals a principal made, by creation time (ms): at most ``MAX_KEPT``."""
    return f"wikiq:author-proposals:{_digest(principal_id)}"
