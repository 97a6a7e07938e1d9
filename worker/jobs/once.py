"""Exactly once: every decision whether an accepted batch lands, in one place.

arq may start a job more than once (a killed or paused worker, a Redis restart, a lost lease), and a run
may stop at any moment: before its commit, after the commit landed but before its record says so, or
while another run of the same job goes on elsewhere. What keeps each accepted batch applied once, in
order, or reported failed, is decided here; the pipeline, the targets and the finish ask:

- ``Doubt`` (one per job in a run): whether the job's commit may already be on the branch. A job whose
  record counts an earlier run (``runs > 1``: its worker died, or a group gave it back) starts in doubt,
  and every member of a round whose land did not surely fail joins it (``Doubt.after_setback``). A job
  in doubt first looks for its own commit (``Doubt.own_commit``: the ``Wikiq-Job`` trailer with a valid
  ``Wikiq-Proof`` under the deployment's commit key, from the branch head at the round's start back to
  the head when the job was accepted) and, found, reports it instead of applying the batch again; a
  round with a member in doubt reads the branch head afresh (``fresh``), never a cached guess.
- ``runs_alone``: a job run again heads a group of its own, so nothing queued behind it lands before it
  has found whether it landed.
- ``may_record``: only a job's latest run records its outcome (a late failure of a run that a newer run
  overtook never marks failed a job the newer run committed).

The fences that make a paused run harmless are the lease's (``worker.jobs.leases``: an epoch that only
grows, carried by every record script and by ``main.lock``); submission is made once by the idempotency
key (``worker.jobs.queue.ACCEPT``). ``docs/architecture.md`` lists every failure with the guard that
handles it and its test.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.git import WikiRepo
from worker.jobs.record import JobRecord


@dataclass
class Doubt:
    """Whether a job's commit may already be on the branch (see the module)."""

    maybe_ran: bool

    @classmethod
    def of(cls, record: JobRecord) -> Doubt:
        """A run's doubt about ``record`` as it starts: an earlier run was counted (``runs > 1``)."""
        return cls(record.runs > 1)

    def after_setback(self) -> None:
        """A round's land failed in a way that may have landed it anyway, or the branch moved: from now
        on the job looks for its own commit first."""
        self.maybe_ran = True

    def own_commit(
        self, repo: WikiRepo, record: JobRecord, landed: str | None, key: bytes | None
    ) -> str | None:
        """The job's own proven commit on the branch from ``landed`` (its head when the round began) back
        to the head at the job's acceptance; None when not in doubt (nothing to look for), for a dry run,
        or when none is there."""
        if not self.maybe_ran or landed is None or (record.batch is not None and record.batch.dry_run):
            return None
        return repo.find_job_commit(record.job_id, record.base, start=landed, key=key)


def in_doubt(doubts: list[Doubt]) -> bool:
    """True when one of a round's jobs may have landed already (read the branch afresh; a setback that
    would fail at once waits and looks instead)."""
    return any(doubt.maybe_ran for doubt in doubts)


def runs_alone(record: JobRecord) -> bool:
    """True for a job run again: it heads a group of its own (see the module)."""
    return record.runs > 1


def may_record(record: JobRecord, run: int | None) -> bool:
    """True when run ``run`` (None: any) may record an outcome on ``record``: it is running and ``run`` is
    its latest run."""
    return record.status == "running" and (run is None or record.runs == run)
