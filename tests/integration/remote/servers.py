"""Real git servers for the remote tests, each on a free loopback port, started and stopped by the tests.

- ``GitDaemon``: ``git daemon`` serving every bare repository under a folder over git://, pushes enabled.
- ``HttpGitServer``: ``git http-backend`` (CGI) behind a threaded ``http.server`` that insists on HTTP
  Basic credentials (401 with ``WWW-Authenticate: Basic`` otherwise) for fetches and pushes alike.
- ``SshServer``: OpenSSH's ``sshd`` with its own host key, config and authorized key, for the current
  user; ``sshd_binary()`` is None when openssh-server is not installed.
- ``SilentServer``: accepts connections and never answers (for timeouts).

A server is ready when its port accepts a connection (polled with a deadline; no sleeps as synchronisation).
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from worker.redis_server import free_port

SSHD = "/usr/sbin/sshd"
SSHD_INSTALL = "apt-get install -y openssh-server"


def wait_for_port(
    port: int,
    process: subprocess.Popen[bytes] | None = None,
    timeout: float = 15.0,
    log: Path | None = None,
) -> None:
    """Return once 127.0.0.1:``port`` accepts a connection; fail early if ``process`` died meanwhile
    (quoting its ``log``)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        if process is not None and process.poll() is not None:
            stderr = log.read_text(errors="replace") if log is not None and log.exists() else ""
            raise RuntimeError(f"server exited with {process.returncode} before listening: {stderr}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")
        time.sleep(0.02)  # polling interval of the readiness check, not a synchronisation sleep


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a server in its own session, its stderr (and that of everything it forks, such as git
    daemon's connection handlers) appended to ``log``: a pipe nobody reads would fill up over a long run
    and block the next handler that writes an error to it."""
    with open(log, "ab") as err:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )


def _stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """Stop a server started in its own session, with everything it forked for connections."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class GitDaemon:
    """``git daemon`` on 127.0.0.1 serving the bare repositories under ``root`` (receive-pack enabled)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> GitDaemon:
        """Start the daemon and return once it listens."""
        log = self.root.parent / f"git-daemon-{self.port}.log"
        self.process = _spawn(
            [
                "git",
                "daemon",
                "--reuseaddr",
                f"--base-path={self.root}",
                "--export-all",
                "--enable=receive-pack",
                "--informative-errors",
                "--listen=127.0.0.1",
                f"--port={self.port}",
                str(self.root),
            ],
            log,
        )
        wait_for_port(self.port, self.process, log=log)
        return self

    def url(self, name: str) -> str:
        """The git:// URL of repository ``name`` under the root."""
        return f"git://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the daemon and its connection handlers."""
        _stop_process(self.process)


class HttpGitServer:
    """Smart HTTP (``git http-backend``) for the bare repositories under ``root``, behind HTTP Basic auth."""

    def __init__(self, root: Path, username: str, password: str) -> None:
        self.root = root
        self.username = username
        self.password = password
        self.on_request: Callable[[], None] | None = None
        self.requests: list[tuple[str, str, bool]] = []  # (method, path, authorized)
        self.chunked_requests = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> HttpGitServer:
        """Listen on a free loopback port and serve requests from a background thread."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _GitHttpHandler)
        self._httpd.daemon_threads = True
        self._httpd.git_server = self  # type: ignore[attr-defined]
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="git-http", daemon=True)
        self._thread.start()
        wait_for_port(self.port)
        return self

    def url(self, name: str) -> str:
        """The http:// URL of repository ``name`` under the root (no credentials in it)."""
        return f"http://127.0.0.1:{self.port}/{name}"

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries this server's user and password."""
        expected = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return header is not None and header.strip() == f"Basic {expected}"

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)


class _GitHttpHandler(BaseHTTPRequestHandler):
    """One request: check Basic auth, then hand it to ``git http-backend`` as a CGI request."""

    protocol_version = "HTTP/1.0"  # one request per connection: no keep-alive bookkeeping

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _serve(self) -> None:
        server: HttpGitServer = self.server.git_server  # type: ignore[attr-defined]
        if server.on_request is not None:
            server.on_request()
        path, _, query = self.path.partition("?")
        authorized = server.authorized(self.headers.get("Authorization"))
        server.requests.append((self.command, path, authorized))
        body = self._read_body(server)
        if not authorized:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="wikiq-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_PROJECT_ROOT": str(server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": unquote(path),
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": server.username,
            "REMOTE_ADDR": "127.0.0.1",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=120, check=False
        )
        self._relay(result.stdout)

    def _read_body(self, server: HttpGitServer) -> bytes:
        """The request body, whether sent with ``Content-Length`` or ``Transfer-Encoding: chunked``."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            server.chunked_requests += 1
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _relay(self, output: bytes) -> None:
        """Turn the CGI answer (headers, blank line, body) into an HTTP response."""
        separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
        head, _, payload = output.partition(separator)
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def sshd_binary() -> str | None:
    """OpenSSH's server binary when openssh-server is installed, else None."""
    return SSHD if os.access(SSHD, os.X_OK) else None


class SshServer:
    """``sshd`` on 127.0.0.1 letting the current user in with a generated key, files kept in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.user = getpass.getuser()
        self.key_file = directory / "id_ed25519"
        self.known_hosts_file = directory / "known_hosts"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SshServer:
        """Make the host and user keys and the config, start sshd, return once it listens."""
        binary = sshd_binary()
        if binary is None:
            raise RuntimeError(f"sshd is not installed: {SSHD_INSTALL}")
        self.directory.mkdir(parents=True, exist_ok=True)
        host_key = self.directory / "host_ed25519"
        _keygen(host_key)
        _keygen(self.key_file)
        (self.directory / "authorized_keys").write_text(self.key_file.with_suffix(".pub").read_text())
        public_host_key = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
        self.known_hosts_file.write_text(f"[127.0.0.1]:{self.port} {public_host_key}\n")
        config = self.directory / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    f"PidFile {self.directory / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.directory / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    f"AllowUsers {self.user}",
                    "AcceptEnv GIT_PROTOCOL",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        log = self.directory / "sshd.log"
        self.process = _spawn([binary, "-D", "-e", "-f", str(config)], log)
        wait_for_port(self.port, self.process, log=log)
        return self

    def url(self, repo: Path) -> str:
        """The ssh:// URL of the bare repository at absolute path ``repo``."""
        return f"ssh://{self.user}@127.0.0.1:{self.port}{repo}"

    def stop(self) -> None:
        """Stop sshd and the sessions it forked."""
        _stop_process(self.process)


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "wikiq-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


class SilentServer:
    """A loopback port that accepts connections and never says anything (for timeouts)."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self._accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._socket.accept()
                self._accepted.append(connection)

    def stop(self) -> None:
        """Close every connection and the listening socket."""
        for connection in self._accepted:
            connection.close()
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._thread.join(timeout=5)


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything under it if it is there."""
    shutil.rmtree(path, ignore_errors=True)
