"""Crash points for the crash tests: ``WIKIQ_FAULTS="name:probability,..."`` makes a worker SIGKILL itself
at named points of its write path, so a test can kill it *at each step* rather than at random moments.

Unset (always, outside tests), ``point`` is one dictionary lookup. Points: ``publish.after_commit`` (the
group's commits are written, nothing pushed), ``publish.during_push`` (a kill a few milliseconds into the
push), ``publish.after_push`` (the remote accepted; nothing recorded yet).

The git write path (``worker.git.repo``, ``worker.git.refs``, ``worker.git.packs``), in order:
``git.pack_written`` (the commit's pack and index written under ``tmp_`` names), ``git.locked``
(``main.lock`` holds the new id, nothing flushed), ``git.synced`` (the temporary files are durable, not
renamed), ``git.published`` (the pack is visible under its real name, ``main`` not moved),
``git.ref_moved`` (``main`` moved and durable, the packs it absorbed not yet retired),
``git.rollup_delete`` (same, after the in-memory bookkeeping of the new pack), ``git.unlinking`` (between
deleting an absorbed pack's index and its pack file, in the background deleter).

``WIKIQ_PAUSE_AT="name"`` makes the process stop the first time it reaches point ``name`` (a SIGSTOP sent to
the thread there; it goes on where it stopped once sent SIGCONT), so a test can pause a worker at an exact
step, such as holding ``main.lock`` (``git.locked``), and let another take over meanwhile.
"""

from __future__ import annotations

import os
import random
import signal
import threading


def _parse(text: str) -> dict[str, float]:
    faults: dict[str, float] = {}
    for item in text.split(","):
        name, _, chance = item.strip().partition(":")
        if name:
            faults[name] = float(chance or 1)
    return faults


FAULTS = _parse(os.environ.get("WIKIQ_FAULTS", ""))
_PAUSE_AT = [os.environ.get("WIKIQ_PAUSE_AT", "")]  # emptied once the process paused there


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def point(name: str) -> None:
    """SIGKILL this process now, with the probability ``WIKIQ_FAULTS`` gives ``name`` (none: never); or
    SIGSTOP it, the first time, if ``WIKIQ_PAUSE_AT`` names this point.

    The stop is sent to the calling thread, which stops before it runs on (the other threads follow): a
    stop sent to the process is taken by its main thread, and until that thread is scheduled the caller
    runs on, on a busy machine far past the point (a worker's commits run in another thread). A SIGKILL
    sent to the process ends every thread at once."""
    if name == _PAUSE_AT[0]:
        _PAUSE_AT[0] = ""
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    chance = FAULTS.get(name)
    if chance and random.random() < chance:
        _kill()


def soon(name: str, within: float = 0.02) -> None:
    """Like ``point``, but the kill comes up to ``within`` seconds later, in the middle of what follows."""
    chance = FAULTS.get(name)
    if chance and random.random() < chance:
        timer = threading.Timer(random.uniform(0.0, within), _kill)
        timer.daemon = True
        timer.start()
