"""A real HTTP webhook receiver on loopback whose answers a test scripts per path.

A scripted answer is a status and headers, optionally a body, or ``HANG``: no answer at all, the request held
until the sender hangs up (what a sender's timeout meets). Every request is recorded (method, path with its
query, headers, body) before it is answered, so a sender that has its answer, or gave up waiting for it,
finds its request recorded (``at``, ``wait_for``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Delivery:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"


class Hang:
    """The type of ``HANG``: no answer, the request recorded, then held until the sender hangs up."""


HANG = Hang()
Answer = tuple[int, dict[str, str]] | tuple[int, dict[str, str], bytes] | Hang


@dataclass
class Receiver:
    """Records every POST and GET; ``script[path]`` gives the answers in order (the last one repeats)."""

    port: int = 0
    script: dict[str, list[Answer]] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def url(self, path: str) -> str:
        """The full URL of ``path`` on this receiver."""
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, path: str) -> Answer:
        """The next scripted answer for ``path`` (200 when unscripted)."""
        answers = self.script.get(path) or [(200, {})]
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def at(self, path: str) -> list[Delivery]:
        """Deliveries received on ``path``."""
        with self.arrived:
            return [d for d in self.deliveries if d.path == path]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30) -> None:
        """Block until ``predicate()`` holds after some delivery (asserting it does within ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while not predicate():
                left = deadline - time.monotonic()
                assert left > 0, "the expected webhook deliveries did not arrive"
                self.arrived.wait(left)


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    """A receiver serving on a free loopback port for the duration of the block."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with receiver.arrived:  # recorded before answering: a sender that has its answer finds it here
                delivery = Delivery(self.path, dict(self.headers.items()), body, self.command)
                receiver.deliveries.append(delivery)
                answer = receiver.answer(self.path)  # in arrival order
                receiver.arrived.notify_all()
            pause = receiver.delay.get(self.path, 0.0)
            if pause:
                time.sleep(pause)  # a slow receiver is the behaviour under test
            if isinstance(answer, Hang):
                self.close_connection = True
                self.rfile.read(1)  # returns once the sender hangs up (it gave up waiting)
                return
            status, headers = answer[0], answer[1]
            content = answer[2] if len(answer) == 3 else b""
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST  # recorded too: a followed redirect would show

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    """``python -m tests.e2e.receiver PORT``: answer 200 to every POST (HTTP/1.1, connections kept alive,
    as any production web server does); ``GET /count`` says how many came, ``GET /last`` when the last one
    came (``time.monotonic()``, the same clock in every process of the machine), ``GET /delays`` how long
    after its job finished each came, in ms, one per line (the wall clock at arrival minus the event's
    ``timestamp``, the job's finish time in ms on the same machine's clock). One asyncio loop, so the
    receiver costs the machine it shares with the benchmark little CPU per request: a POST keeps its arrival
    time and the event's first bytes, read only when ``/delays`` is asked for."""
    import asyncio
    import sys
    from datetime import datetime

    count = 0
    last = 0.0
    arrivals: list[tuple[float, bytes]] = []

    def delays() -> bytes:
        out = []
        for arrived, head in arrivals:
            start = head.find(b'"timestamp":"') + len(b'"timestamp":"')
            stamp = head[start : head.find(b'"', start)].decode().replace("Z", "+00:00")
            out.append(f"{(arrived - datetime.fromisoformat(stamp).timestamp()) * 1000:.3f}")
        return "\n".join(out).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count, last
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request, *lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in lines:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                content = await reader.readexactly(length)
                if request.startswith("POST "):
                    count += 1
                    last = time.monotonic()
                    arrivals.append((time.time(), content[:120]))
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                else:
                    if request.startswith("GET /delays "):
                        body = delays()
                    else:
                        body = str(last if request.startswith("GET /last ") else count).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def run() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]))
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
