"""`wikiq dev` (or `make run`) as a test runs it: a real process tree on a free port, waited for until
``/readyz`` answers, stopped as Ctrl-C stops it, and killed if a test leaves it running."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


def clean_env(*drop: str) -> dict[str, str]:
    """This environment without ``WIKIQ_`` settings (and the prefixes in ``drop``): defaults only."""
    prefixes = ("WIKIQ_", *drop)
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


@dataclass
class Running:
    """A started service: its process (the leader of its own group when so started) and a client."""

    process: subprocess.Popen[str]
    client: httpx.Client
    group: bool

    def interrupt(self, timeout: float = 60) -> str:
        """SIGINT, as Ctrl-C in its terminal sends (to the whole group when it has one); its output."""
        if self.group:
            os.killpg(self.process.pid, signal.SIGINT)
        else:
            self.process.send_signal(signal.SIGINT)
        output, _ = self.process.communicate(timeout=timeout)
        return output


@contextmanager
def running(
    command: list[str],
    port: int,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    group: bool = False,
    ready_seconds: float = 60,
) -> Iterator[Running]:
    """Start ``command`` serving on ``port`` and yield once ``/readyz`` answers 200; a process that exits
    first, or is not ready in time, fails the test."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=dict(env) if env is not None else clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=group,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        deadline = time.monotonic() + ready_seconds
        while True:
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, f"{command[-5:]} did not start"
            time.sleep(0.1)  # waiting for the child processes to listen
        yield Running(process, client, group)
    finally:
        client.close()
        if process.poll() is None:
            if group:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
            process.wait()
