"""``WIKIQ_PAUSE_AT`` stops the thread that reaches the point before it runs on, whatever the process's other
threads are doing: the fault tests count on a paused worker holding exactly what it held at the point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# A thread reaches the point and then writes a marker. The main thread is made the slowest to take a
# signal: on the same CPU as the other, scheduled only when that CPU is idle, asleep in a join.
CHILD = """
import os, sys, threading, time
from pathlib import Path
from worker import faults

marker = Path(sys.argv[1])
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
go = threading.Event()

def writer():
    go.wait()
    faults.point("probe")
    marker.write_text("ran on")
    time.sleep(60)

thread = threading.Thread(target=writer, daemon=True)
thread.start()
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
go.set()
thread.join()
"""


def _state(pid: int) -> str:
    """The process's state letter in ``/proc`` (its main thread's)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _until(what: str, done: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling another process's state


def test_the_thread_at_a_pause_point_stops_before_it_runs_on(tmp_path: Path) -> None:
    marker = tmp_path / "after-the-point"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(marker)],
        env={**os.environ, "WIKIQ_PAUSE_AT": "probe"},
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        _until("the child to stop", lambda: child.poll() is not None or _state(child.pid) == "T")
        assert child.poll() is None, "the child exited instead of stopping"
        assert not marker.exists(), "the thread ran past the pause point before the process stopped"
        os.kill(child.pid, signal.SIGCONT)
        _until("the resumed thread to run on", marker.exists)
    finally:
        child.kill()
        child.wait()
