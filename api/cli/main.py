"""The ``wikiq`` command: ``dev`` (everything in the foreground), ``api``, ``worker``, ``webhooks``, and the
client commands of ``api.cli.commands`` (wikis, pages, read, submit, job, jobs, log, mcp, ...)."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from api.cli.commands import register
from worker.settings import Settings, SettingsError, load_settings

app = typer.Typer(help="wikiq: atomic batches of edits to git-backed wikis.", no_args_is_help=True)


def _settings(**overrides: object) -> Settings:
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        typer.echo(f"wikiq: {exc}", err=True)
        raise typer.Exit(2) from None


def _logging(settings: Settings) -> None:
    """Configure structured logs once, at process start: JSON lines on stderr unless it is a terminal."""
    from worker.telemetry.logs import configure

    configure(settings.log_level)


def _check_remotes(settings: Settings) -> None:
    """Refuse to start, with one line naming it, when the remotes file does not parse."""
    from worker.git.remote import RemoteRegistry

    try:
        RemoteRegistry(settings.remotes_file)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        typer.echo(f"wikiq: bad remotes file WIKIQ_REMOTES_FILE={settings.remotes_file}: {first}", err=True)
        raise typer.Exit(2) from None


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
    from api.server.app import create_app
    from api.server.stopping import Draining, serve

    settings = _settings()
    if settings.tokens_file is None and not _loopback(host):
        typer.echo(
            f"wikiq: refusing to listen on {host}: without WIKIQ_TOKENS_FILE wikiq runs single-user "
            "and binds loopback only",
            err=True,
        )
        raise typer.Exit(2)
    _logging(settings)
    _check_remotes(settings)
    draining = Draining()
    try:
        application = create_app(settings, bind_host=host, draining=draining)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        typer.echo(f"wikiq: bad tokens file WIKIQ_TOKENS_FILE={settings.tokens_file}: {first}", err=True)
        raise typer.Exit(2) from None
    serve(  # SIGTERM: long-polls answer at once, other requests finish, exit 0 (api.server.stopping)
        application,
        draining,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,  # uvicorn's lines go through the structured logging of _logging
        access_log=False,
        proxy_headers=False,  # the app believes only WIKIQ_TRUSTED_PROXIES (api.server.app)
        h11_max_incomplete_event_size=256 * 1024,  # the request limits of api.server.limits answer first
    )


@app.command()
def worker() -> None:
    """Run a worker process (configured by WIKIQ_* variables)."""
    from worker.process import serve

    settings = _settings()
    _logging(settings)
    _check_remotes(settings)
    import uvloop

    uvloop.run(serve(settings))


@app.command()
def webhooks() -> None:
    """Run a webhook sender: takes the first attempt of each finished job's webhook from the outbox."""
    from worker.sender import serve

    settings = _settings()
    _logging(settings)
    import uvloop

    uvloop.run(serve(settings))


@app.command()
def doctor() -> None:
    """Check a deployment (Redis, AOF, data dir, git, partition leases) and print what to fix; exit 0/1."""
    from api.cli.doctor import run

    text, code = run(_settings())
    typer.echo(text)
    raise typer.Exit(code)


@app.command()
def dev(
    host: Annotated[str, typer.Option(help="API address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port")] = 8080,
    data_dir: Annotated[Path | None, typer.Option(help="data directory (default ./data)")] = None,
) -> None:
    """Run an embedded Redis-compatible server (unless WIKIQ_REDIS_URL or WIKIQ_REDIS_SENTINELS is set),
    one API and one worker (which sends the webhooks too)."""
    from worker.redis_server import RedisServer, appendfsync_for

    settings = _settings(data_dir=data_dir)
    data = settings.data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WIKIQ_DATA_DIR=str(data))
    secret_source = "WIKIQ_WEBHOOK_SECRET"
    if settings.webhook_secret is None:
        env["WIKIQ_WEBHOOK_SECRET"] = _dev_secret(data)
        secret_source = f"the secret in {data / 'webhook-secret'}"
    server = None
    if "WIKIQ_REDIS_URL" not in os.environ and not settings.redis_sentinels:
        if settings.accept_durability == "replica":
            typer.echo(
                "wikiq: WIKIQ_ACCEPT_DURABILITY=replica needs a Redis replica; the embedded server has "
                "none (use local, or point WIKIQ_REDIS_URL/WIKIQ_REDIS_SENTINELS at a replicated Redis)",
                err=True,
            )
            raise typer.Exit(2)
        # AOF on, fsynced as the acceptance durability needs (always for local/replica)
        fsync = appendfsync_for(settings.accept_durability)
        server = RedisServer(data / "redis", appendonly=True, appendfsync=fsync).start()
        env["WIKIQ_REDIS_URL"] = server.url
    # -P: the children do not put the current directory first on sys.path, so a file there named like a
    # module wikiq imports (mcp.py, typer.py, ...) is not run as code
    exe = [sys.executable, "-P", "-m", "api.cli"]
    children = [
        # own sessions: Ctrl-C reaches only `wikiq dev`, which stops workers and API before Redis
        subprocess.Popen([*exe, "api", "--host", host, "--port", str(port)], env=env, start_new_session=True),
        subprocess.Popen([*exe, "worker"], env=env, start_new_session=True),
    ]
    typer.echo(f"wikiq dev: API on http://{host}:{port} (docs at /docs), data in {data}; Ctrl-C stops")
    typer.echo(f"wikiq dev: webhooks are signed with {secret_source}")
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


token_app = typer.Typer(help="Bearer tokens for WIKIQ_TOKENS_FILE.", no_args_is_help=True)
app.add_typer(token_app, name="token")


@token_app.command("new")
def token_new(
    name: Annotated[str, typer.Option(help="principal name (the commit author)")],
    email: Annotated[str, typer.Option(help="principal email (the commit author)")],
    wiki: Annotated[
        list[str], typer.Option(help="WIKI:RIGHT, repeatable; RIGHT is read, write or admin; WIKI may be *")
    ],
    prefix: Annotated[
        list[str] | None, typer.Option(help="WIKI:PREFIX, repeatable: writes only under these path prefixes")
    ] = None,
) -> None:
    """Print a new token (shown once) and the entry to add to the tokens file."""
    import json

    from api.server.auth import RIGHTS, new_token

    rights: dict[str, str] = {}
    for item in wiki:
        target, _, right = item.rpartition(":")
        if not target or right not in RIGHTS:
            typer.echo(
                f"wikiq: --wiki {item!r}: give WIKI:RIGHT with RIGHT one of read, propose, write, admin",
                err=True,
            )
            raise typer.Exit(2)
        rights[target] = right
    prefixes: dict[str, list[str]] = {}
    for item in prefix or []:
        target, sep, path = item.partition(":")
        if not sep or not path:
            typer.echo(f"wikiq: --prefix {item!r}: give WIKI:PREFIX, e.g. homelab:wiki/team-a/", err=True)
            raise typer.Exit(2)
        prefixes.setdefault(target, []).append(path)
    token, digest = new_token()
    typer.echo(f"token (give it to {name}; it is not stored anywhere): {token}")
    typer.echo("\nadd to the tokens file (TOML):\n")
    typer.echo("[[principals]]")
    typer.echo(f"name = {json.dumps(name)}")
    typer.echo(f"email = {json.dumps(email)}")
    typer.echo(f'token_sha256 = "{digest}"')
    typer.echo(
        "rights = { " + ", ".join(f"{json.dumps(w)} = {json.dumps(r)}" for w, r in rights.items()) + " }"
    )
    if prefixes:
        typer.echo(
            "prefixes = { "
            + ", ".join(f"{json.dumps(w)} = {json.dumps(p)}" for w, p in prefixes.items())
            + " }"
        )


def _dev_secret(data: Path) -> str:
    """The webhook secret of a dev data directory, made once and kept in ``<data>/webhook-secret``."""
    import base64
    import secrets

    file = data / "webhook-secret"
    if not file.exists():
        file.write_text("whsec_" + base64.b64encode(secrets.token_bytes(24)).decode() + "\n")
        file.chmod(0o600)
    return file.read_text().strip()


def _pause(seconds: float) -> None:
    import time

    time.sleep(seconds)  # supervising children: wake to check them or a stop signal


register(app)


def main() -> None:
    """Entry point of the ``wikiq`` script."""
    app()


if __name__ == "__main__":
    main()
