"""A TCP proxy on loopback that can freeze its connections: bytes stop flowing both ways, nothing is closed
(a peer that stopped answering, a stalled network path), until it is thawed."""

from __future__ import annotations

import contextlib
import socket
import threading


class FreezableProxy:
    """Forwards every connection made to ``port`` to ``target_port`` on 127.0.0.1; ``freeze`` holds every
    byte read from then on (connections stay open, new ones are accepted and held too), ``thaw`` lets them
    through again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """A ``redis://`` URL through the proxy."""
        return f"redis://127.0.0.1:{self.port}"

    def freeze(self) -> None:
        """Stop forwarding: what is read from either side from now on is held."""
        self.flowing.clear()

    def thaw(self) -> None:
        """Forward again, the held bytes first."""
        self.flowing.set()

    def close(self) -> None:
        """Close the listener and every connection."""
        self.closed = True
        self.flowing.set()
        with self.lock:
            for sock in [self.listener, *self.sockets]:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # frozen: hold what was read until thawed
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
