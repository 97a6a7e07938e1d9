"""Hostile webhook receivers on loopback: raw sockets, answering what no well-behaved server would.

Modes (each connection reads one request, then):
- ``header-bomb``: ``HTTP/1.1 200 OK`` and one header whose value streams on for as long as the client
  reads;
- ``many-headers``: ``HTTP/1.1 200 OK`` and ``X-A: b`` header lines, streamed on the same way;
- ``hang``: never answers, until the test ``release()``s it (then the connection is closed);
- ``hang-retries``: answers ``500`` to the first request of each ``webhook-id`` and hangs on every later
  one (a receiver whose retries hang while first attempts fail at once).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

MODES = ("header-bomb", "many-headers", "hang", "hang-retries")
CHUNK = 64 * 1024


@dataclass
class Hostile:
    """A running hostile receiver: its counters, and ``release`` for the hanging modes."""

    mode: str
    port: int = 0
    requests: int = 0  # requests read in full
    hanging: int = 0  # connections held unanswered now
    sent: int = 0  # bytes of answers written
    ids: dict[str, int] = field(default_factory=dict)  # requests per webhook-id
    changed: threading.Condition = field(default_factory=threading.Condition)
    released: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/hook") -> str:
        """The URL of ``path`` on this receiver."""
        return f"http://127.0.0.1:{self.port}{path}"

    def release(self) -> None:
        """Let every hanging connection go (closed without an answer)."""
        self.released.set()

    def wait_for(self, what: str, predicate: object, timeout: float = 60) -> None:
        """Block until ``predicate()`` holds after some request (asserting it does within ``timeout``)."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                assert left > 0, f"the hostile receiver did not see {what}"
                self.changed.wait(left)

    def _note(self, **add: int) -> None:
        with self.changed:
            for name, count in add.items():
                setattr(self, name, getattr(self, name) + count)
            self.changed.notify_all()

    def serve(self, connection: socket.socket) -> None:
        """Read one request from ``connection``, then behave as the mode says."""
        with connection:
            head = _read_request(connection)
            if head is None:
                return
            event = next(
                (
                    line.split(b":", 1)[1].strip().decode()
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"webhook-id:")
                ),
                "",
            )
            with self.changed:
                seen = self.ids[event] = self.ids.get(event, 0) + 1
                self.requests += 1
                self.changed.notify_all()
            if self.mode == "hang" or (self.mode == "hang-retries" and seen > 1):
                self._note(hanging=1)
                self.released.wait()
                self._note(hanging=-1)
                return
            if self.mode == "hang-retries":
                answer = (
                    b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                connection.sendall(answer)
                self._note(sent=len(answer))
                return
            start, filler = (
                (b"HTTP/1.1 200 OK\r\nX-Big: ", b"a" * CHUNK)
                if self.mode == "header-bomb"
                else (b"HTTP/1.1 200 OK\r\n", b"X-A: b\r\n" * (CHUNK // 8))
            )
            try:
                connection.sendall(start)
                while not self.released.is_set():
                    connection.sendall(filler)
                    self._note(sent=len(filler))
            except OSError:
                return  # the client hung up: what a bounded client does


def _read_request(connection: socket.socket) -> bytes | None:
    """The head of one request, its body read too; None when the client left first."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = connection.recv(CHUNK)
        if not got:
            return None
        data += got
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        got = connection.recv(CHUNK)
        if not got:
            return None
        body += got
    return head


@contextmanager
def hostile_receiver(mode: str) -> Iterator[Hostile]:
    """A hostile receiver in ``mode`` (see the module) on a free loopback port, for the block; on leaving,
    hanging connections are released and streaming ones stopped."""
    assert mode in MODES, mode
    hostile = Hostile(mode)
    server = socket.create_server(("127.0.0.1", 0), backlog=256)
    hostile.port = server.getsockname()[1]
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=hostile.serve, args=(connection,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield hostile
    finally:
        stopping.set()
        hostile.release()
        server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        server.close()
        acceptor.join(timeout=5)
