"""The container deployment files, read as Docker would (nothing is built or started here; ``make
deploy-test`` starts them on podman): ``compose.yaml`` (wikis on a shared volume) and
``deploy/compose.remotes.yaml`` (wikis in git remotes, no shared volume) are parsed with a YAML parser and
checked against the ``Dockerfile`` and the settings model.

- every ``WIKIQ_*`` variable a wikiq service sets is a setting, and its value passes the settings' checks;
- every bind-mount source exists in the repository (Docker would create a missing one as a directory), and
  a file mounted where a file is expected is a file; the tokens and remotes files parse;
- the data directory the services use is a named volume, and the image creates it owned by the user it
  runs as (a named volume starts with the owner of the directory it is mounted on); no service overrides
  that user;
- Redis keeps an append-only file, fsynced as ``WIKIQ_ACCEPT_DURABILITY`` needs, on a version with
  ``WAITAOF``; the API has a healthcheck on ``/readyz`` on the port it listens on;
- with remotes, no two wikiq processes share a data volume (not even a scaled service), and every remote
  points at a service of the file.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.server.auth import load_tokens
from worker.git.remote import RemoteRegistry
from worker.redis_server import appendfsync_for
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = [ROOT / "compose.yaml", ROOT / "deploy" / "compose.remotes.yaml"]
FIELDS = {name.upper() for name in Settings.model_fields}


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), path
    return data


def _dockerfile() -> tuple[str, list[str], dict[str, str]]:
    """The runtime user, the RUN commands and the ENV values of the Dockerfile."""
    user = "root"
    runs: list[str] = []
    env: dict[str, str] = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "USER":
            user = rest.strip()
        elif word == "RUN":
            runs.append(rest)
        elif word == "ENV":
            key, _, value = rest.partition("=")
            env[key.strip()] = value.strip()
    return user, runs, env


def _interpolated(value: object) -> str:
    """A compose value with ``${VAR:-default}`` replaced by its default (what an empty environment gives)."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(value))


def _wikiq_services(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services that run wikiq (built from the Dockerfile and starting ``wikiq ...``)."""
    return {
        name: service
        for name, service in data["services"].items()
        if "build" in service and list(service.get("command", []))[:1] == ["wikiq"]
    }


def _data_services(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The wikiq services that keep wikis in ``WIKIQ_DATA_DIR`` (all but the webhook senders)."""
    return {n: s for n, s in _wikiq_services(data).items() if list(s["command"])[:2] != ["wikiq", "webhooks"]}


def _mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """``(source, target, read_only)`` of each short-syntax volume entry."""
    out = []
    for entry in service.get("volumes", []):
        assert isinstance(entry, str), f"use the short volume syntax: {entry!r}"
        source, target, *mode = entry.split(":")
        out.append((source, target, mode == ["ro"]))
    return out


def _is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_wikiq_variables_are_settings_with_valid_values(path: Path) -> None:
    """Every WIKIQ_* a wikiq service sets names a field of Settings, and the values load as settings."""
    for name, service in _wikiq_services(_load(path)).items():
        env = {str(k): _interpolated(v) for k, v in service.get("environment", {}).items()}
        for key in env:
            if key.startswith("WIKIQ_"):
                assert key.removeprefix("WIKIQ_") in FIELDS, f"{path.name}: {name} sets unknown {key}"
        values = {k.removeprefix("WIKIQ_").lower(): v for k, v in env.items() if k.startswith("WIKIQ_") and v}
        Settings(**values)  # raises on a value wikiq would refuse at start


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_bind_mounts_exist_and_parse(path: Path) -> None:
    """Bind-mount sources exist in the repository (files where files are meant); the tokens and remotes
    files a service points at are mounted there and parse."""
    for name, service in _load(path)["services"].items():
        env = service.get("environment", {})
        mounted = {}
        for source, target, _ in _mounts(service):
            if not _is_bind(source):
                continue
            local = (path.parent / source).resolve()
            assert local.exists(), f"{path.name}: {name} mounts {source}, which is not in the repository"
            if Path(target).suffix:
                assert local.is_file(), f"{path.name}: {name} mounts {source} on {target}: not a file"
            mounted[target] = local
        if "WIKIQ_TOKENS_FILE" in env:
            tokens = mounted.get(env["WIKIQ_TOKENS_FILE"])
            assert tokens is not None, f"{path.name}: {name}'s WIKIQ_TOKENS_FILE is not mounted"
            load_tokens(tokens)
        if "WIKIQ_REMOTES_FILE" in env:
            remotes = mounted.get(env["WIKIQ_REMOTES_FILE"])
            assert remotes is not None, f"{path.name}: {name}'s WIKIQ_REMOTES_FILE is not mounted"
            RemoteRegistry(remotes)


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_data_dir_is_a_volume_the_image_creates_for_its_user(path: Path) -> None:
    """WIKIQ_DATA_DIR is a named volume's mount point; the image creates that directory and gives it to
    the user it runs as, and no service runs as anyone else."""
    user, runs, image_env = _dockerfile()
    assert user not in ("root", "0"), "the image must not run as root"
    data = _load(path)
    for name, service in data["services"].items():
        if "build" not in service:
            continue
        assert "user" not in service, f"{path.name}: {name} overrides the image's user"
    for name, service in _data_services(data).items():
        data_dir = service.get("environment", {}).get("WIKIQ_DATA_DIR", image_env.get("WIKIQ_DATA_DIR"))
        assert data_dir, f"{path.name}: {name} has no WIKIQ_DATA_DIR"
        volume = next((s for s, t, _ in _mounts(service) if t == data_dir), None)
        assert volume is not None and not _is_bind(volume), f"{path.name}: {name}: {data_dir} is no volume"
        assert volume in data.get("volumes", {}), f"{path.name}: volume {volume} is not declared"
        commands = [shlex.split(part) for run in runs for part in re.split(r"&&|;", run)]
        made = any(c[:1] == ["mkdir"] and data_dir in c for c in commands)
        owned = any(c[:1] == ["chown"] and data_dir in c and c[-2].split(":")[0] == user for c in commands)
        assert made and owned, f"the Dockerfile must create {data_dir} and chown it to {user}"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_the_workers_send_webhooks_with_the_apis_secret(path: Path) -> None:
    """The workers send the webhooks (their own jobs' first attempts, and the rest of the outbox: nothing
    leaves that to a ``wikiq webhooks`` service, which would have to run), signed with the secret the API
    checks submissions against."""
    services = _wikiq_services(_load(path))
    workers = [s for s in services.values() if list(s["command"]) == ["wikiq", "worker"]]
    api = next(s for s in services.values() if list(s["command"])[:2] == ["wikiq", "api"])
    assert workers, path.name
    for worker in workers:
        assert worker["environment"].get("WIKIQ_WEBHOOK_SENDERS", "false") == "false", path.name
        assert worker["environment"].get("WIKIQ_WEBHOOK_SECRET") == api["environment"].get(
            "WIKIQ_WEBHOOK_SECRET"
        ), path.name


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_redis_persists_as_durability_needs_and_api_has_a_readiness_check(path: Path) -> None:
    """Redis: AOF on, appendfsync matching WIKIQ_ACCEPT_DURABILITY, a version with WAITAOF (>= 7.2).
    The API: a healthcheck on /readyz at the port it listens on."""
    data = _load(path)
    redis = data["services"]["redis"]
    command = list(redis["command"])
    option = {command[i].removeprefix("--"): command[i + 1] for i in range(1, len(command) - 1, 2)}
    assert option.get("appendonly") == "yes"
    image, _, tag = str(redis["image"]).partition(":")
    major, minor = (int(part) for part in [*tag.split("."), "0"][:2])
    if image.endswith("redis"):
        assert (major, minor) >= (7, 2), redis["image"]
    else:
        assert image.endswith("valkey") and major >= 8, redis["image"]
    for name, service in _wikiq_services(data).items():
        durability = service.get("environment", {}).get("WIKIQ_ACCEPT_DURABILITY", "local")
        assert option.get("appendfsync") == appendfsync_for(durability), (name, durability, option)
        assert service.get("depends_on", {}).get("redis", {}).get("condition") == "service_healthy", name
    api = data["services"]["api"]
    port = api["command"][api["command"].index("--port") + 1]
    probe = " ".join(api["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/readyz" in probe, probe
    assert any(str(p).endswith(f":{port}") for p in api.get("ports", [])), api.get("ports")


def test_shared_volume_deployment_shares_the_data_volume() -> None:
    """Without remotes the API and the workers must see the same wikis: one shared data volume."""
    services = _data_services(_load(ROOT / "compose.yaml"))
    assert not any("WIKIQ_REMOTES_FILE" in s.get("environment", {}) for s in services.values())
    volumes = {next(s for s, t, _ in _mounts(svc) if t == "/data") for svc in services.values()}
    assert len(volumes) == 1, volumes


def test_remotes_deployment_shares_no_volume_and_names_its_git_server() -> None:
    """With remotes, every wikiq process has a data volume of its own (a scaled service would share one)
    and each declared remote points at a service of the file."""
    path = ROOT / "deploy" / "compose.remotes.yaml"
    data = _load(path)
    services = _data_services(data)
    workers = [name for name, s in services.items() if s["command"][:2] == ["wikiq", "worker"]]
    assert len(workers) >= 2, workers
    seen: dict[str, str] = {}
    for name, service in services.items():
        assert "WIKIQ_REMOTES_FILE" in service.get("environment", {}), name
        assert int(service.get("deploy", {}).get("replicas", 1)) == 1, f"{name} is scaled: one shared volume"
        for source, _target, _ in _mounts(service):
            if _is_bind(source):
                continue
            assert source not in seen, f"{name} and {seen[source]} share volume {source}"
            seen[source] = name
    for remote in RemoteRegistry(path.parent / "remotes.toml").remotes().values():
        host = re.match(r"^[a-z]+://([^/:]+)", remote.url)
        assert host is not None and host.group(1) in data["services"], remote.url
