"""The ``wikiq`` command: ``dev`` (everything in the foreground), ``api``, ``worker``, and the client
commands of ``api.cli_client`` (wikis, pages, read, submit, job, jobs, log, mcp, ...)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from api.cli_client import register
from worker.settings import Settings, SettingsError, load_settings

app = typer.Typer(help="wikiq: atomic batches of edits to git-backed wikis.", no_args_is_help=True)


def _settings(**overrides: object) -> Settings:
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        typer.echo(f"wikiq: {exc}", err=True)
        raise typer.Exit(2) from None


def _logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def api(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
) -> None:
    """Run the HTTP API (configured by WIKIQ_* variables)."""
    import uvicorn

    from api.app import create_app

    settings = _settings()
    if settings.tokens_file is None and not _loopback(host):
        typer.echo(
            f"wikiq: refusing to listen on {host}: without WIKIQ_TOKENS_FILE wikiq runs single-user "
            "and binds loopback only",
            err=True,
        )
        raise typer.Exit(2)
    _logging(settings)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", access_log=False)


@app.command()
def worker() -> None:
    """Run a worker process (configured by WIKIQ_* variables)."""
    from worker.queue import serve

    settings = _settings()
    _logging(settings)
    asyncio.run(serve(settings))


@app.command()
def dev(
    host: Annotated[str, typer.Option(help="API address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port")] = 8080,
    data_dir: Annotated[Path | None, typer.Option(help="data directory (default ./data)")] = None,
) -> None:
    """Run an embedded Redis-compatible server (unless WIKIQ_REDIS_URL is set), one API and one worker."""
    from worker.redis_server import RedisServer

    settings = _settings(data_dir=data_dir)
    data = settings.data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WIKIQ_DATA_DIR=str(data))
    server = None
    if "WIKIQ_REDIS_URL" not in os.environ:
        server = RedisServer(data / "redis", appendonly=True).start()
        env["WIKIQ_REDIS_URL"] = server.url
    exe = [sys.executable, "-m", "api.cli"]
    children = [
        subprocess.Popen([*exe, "api", "--host", host, "--port", str(port)], env=env),
        subprocess.Popen([*exe, "worker"], env=env),
    ]
    typer.echo(f"wikiq dev: API on http://{host}:{port} (docs at /docs), data in {data}; Ctrl-C stops")
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop["now"] and all(child.poll() is None for child in children):
            _pause(0.5)
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
        if server is not None:
            server.stop()
        typer.echo("wikiq dev: stopped")
    failed = [c.returncode for c in children if c.returncode not in (0, -signal.SIGTERM, None)]
    if failed and not stop["now"]:
        raise typer.Exit(1)


def _pause(seconds: float) -> None:
    import time

    time.sleep(seconds)  # supervising children: wake to check them or a stop signal


register(app)


def main() -> None:
    """Entry point of the ``wikiq`` script."""
    app()


if __name__ == "__main__":
    main()
