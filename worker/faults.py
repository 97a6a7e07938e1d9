"""Crash points for the crash tests: ``WIKIQ_FAULTS="name:probability,..."`` makes a worker SIGKILL itself
at named points of its write path, so a test can kill it *at each step* rather than at random moments.

Unset (always, outside tests), ``point`` is one dictionary lookup. Points: ``publish.after_commit`` (the
group's commits are written, nothing pushed), ``publish.during_push`` (a kill a few milliseconds into the
push), ``publish.after_push`` (the remote accepted; nothing recorded yet).
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


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def point(name: str) -> None:
    """SIGKILL this process now, with the probability ``WIKIQ_FAULTS`` gives ``name`` (none: never)."""
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
