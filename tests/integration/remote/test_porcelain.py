"""worker.git.remote.porcelain on ``git push --porcelain`` lines, including ones a test server cannot easily
provoke (the server-side lost race, a remote failure). No I/O."""

from __future__ import annotations

from worker.git.remote.porcelain import Accepted, Moved, Rejected, outcome, parse_porcelain, status_of

C = "a" * 40
REF = "refs/heads/main"


def result_of(line: str) -> Accepted | Moved | Rejected | None:
    """The outcome of a push whose porcelain output has ``line`` as its ref line."""
    status = status_of(f"To file:///srv/docs.git\n{line}\nDone\n", REF)
    assert status is not None
    return outcome(status, C)


def test_success_flags_are_accepted() -> None:
    """New branch, fast-forward and forced updates are accepted; ``=`` is accepted as already there."""
    assert result_of(f"*\t{C}:{REF}\t[new branch]") == Accepted(C)
    assert result_of(f" \t{C}:{REF}\t6f2715f..fc4e19b") == Accepted(C)
    assert result_of(f"+\t{C}:{REF}\t6f2715f...fc4e19b (forced update)") == Accepted(C)
    assert result_of(f"=\t{C}:{REF}\t[up to date]") == Accepted(C, already=True)


def test_a_lost_lease_or_race_is_moved() -> None:
    """Stale info, fetch first, non-fast-forward and the server's own lost race all mean "fetch again"."""
    assert result_of(f"!\t{C}:{REF}\t[rejected] (stale info)") == Moved("stale info")
    assert result_of(f"!\t{C}:{REF}\t[rejected] (fetch first)") == Moved("fetch first")
    assert result_of(f"!\t{C}:{REF}\t[rejected] (non-fast-forward)") == Moved("non-fast-forward")
    race = "cannot lock ref 'refs/heads/main': is at 1111 but expected 2222"
    assert result_of(f"!\t{C}:{REF}\t[remote rejected] ({race})") == Moved(race)


def test_a_remote_refusal_is_rejected() -> None:
    """Hooks and protected branches are the remote's decision: ``Rejected`` with the reason."""
    assert result_of(f"!\t{C}:{REF}\t[remote rejected] (pre-receive hook declined)") == Rejected(
        "pre-receive hook declined"
    )
    assert result_of(f"!\t{C}:{REF}\t[remote rejected] (protected branch hook declined)") == Rejected(
        "protected branch hook declined"
    )
    assert result_of(f"!\t{C}:{REF}\t[rejected] (needs force)") == Rejected("needs force")


def test_an_unknown_outcome_is_none() -> None:
    """A remote that failed to report, or output without our ref, leaves the outcome unknown."""
    assert result_of(f"!\t{C}:{REF}\t[remote failure] (remote failed to report status)") is None
    assert status_of("To file:///srv/docs.git\nDone\n", REF) is None
    assert status_of(f"*\t{C}:refs/heads/other\t[new branch]\n", REF) is None


def test_parse_reads_every_ref_line() -> None:
    """Each ref line becomes a status with flag, source, destination, summary and reason."""
    statuses = parse_porcelain(
        f"To x\n*\t{C}:{REF}\t[new branch]\n!\t{C}:refs/heads/b\t[rejected] (stale info)\nDone\n"
    )
    assert [(s.flag, s.destination, s.summary, s.reason) for s in statuses] == [
        ("*", REF, "[new branch]", None),
        ("!", "refs/heads/b", "[rejected]", "stale info"),
    ]
