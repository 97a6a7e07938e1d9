"""One settings class for every wikiq process, read from ``WIKIQ_*`` environment variables.

A bad value stops start-up with one line naming the variable (``load_settings``).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from worker.schema.edits import Costs, Limits

DEFAULT_RETRY_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
Durability = Literal["none", "local", "replica"]
# a host name of WIKIQ_ALLOWED_HOSTS, or ".domain" for the domain and its subdomains
_HOST_NAME = re.compile(r"\.?[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?")
_BRANCH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,150}")  # WIKIQ_PROPOSAL_BRANCH_PREFIX, then an id


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as a pair; ``ValueError`` saying what is wrong."""
    host, sep, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"give host:port pairs separated by commas, e.g. sentinel-1:26379 (got {text!r})")
    return host, int(port)


class Settings(BaseSettings):
    """wikiq's configuration; every field is ``WIKIQ_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="WIKIQ_", extra="ignore", frozen=True)

    redis_url: str = "redis://127.0.0.1:6379/0"
    # Redis Sentinel: when set, these replace redis_url (every connection goes to the current primary)
    redis_sentinels: Annotated[tuple[tuple[str, int], ...], NoDecode] = ()
    redis_sentinel_master: Annotated[str | None, Field(validate_default=True)] = None
    # what a 202 promises: none (in Redis' memory), local (in its fsynced AOF), replica (and on a replica)
    accept_durability: Durability = "local"
    accept_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 5.0
    # below this many free bytes in the data directory /readyz answers 503 and `wikiq doctor` warns
    min_free_bytes: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    data_dir: Path = Path("data")
    partitions: Annotated[int, Field(ge=1, le=1024)] = 16
    tokens_file: Path | None = None
    webhook_secret: str | None = None
    webhook_allow_private: bool = False
    webhook_retry_schedule: Annotated[tuple[float, ...], NoDecode] = DEFAULT_RETRY_SCHEDULE
    webhook_timeout: Annotated[float, Field(gt=0, le=60)] = 15.0
    # who takes the webhook outbox beyond a worker's own finishes (redeliveries, a dead worker's entries):
    # true, only `wikiq webhooks` processes (run at least one); false, every worker too
    webhook_senders: bool = False
    max_edits: Annotated[int, Field(ge=1)] = 1000
    max_content_bytes: Annotated[int, Field(ge=1)] = 8 * 1024 * 1024
    max_file_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    max_batch_output_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024 * 1024
    max_body_bytes: Annotated[int, Field(ge=1024)] = 12 * 1024 * 1024
    max_queued_bytes: Annotated[int, Field(ge=0)] = 128 * 1024 * 1024
    # finished job records Redis keeps per principal: past it, its oldest are dropped (0: no cap)
    max_retained_bytes: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    job_retention_seconds: Annotated[int, Field(ge=60)] = 7 * 24 * 3600
    dry_run_retention_seconds: Annotated[int, Field(ge=60)] = 600
    proposal_retention_seconds: Annotated[int, Field(ge=60)] = 7 * 24 * 3600
    proposal_self_approve: bool = False
    redeliver_interval_seconds: Annotated[int, Field(ge=0)] = 10
    mcp_max_concurrent: Annotated[int, Field(ge=1)] = 16
    lease_seconds: Annotated[float, Field(gt=0.5, le=120)] = 5.0
    job_timeout_seconds: Annotated[float, Field(gt=1)] = 120.0
    max_job_tries: Annotated[int, Field(ge=1, le=100)] = 25
    rate_limit_submissions: Annotated[int, Field(ge=0)] = 1200
    rate_limit_window_seconds: Annotated[float, Field(gt=0)] = 60.0
    # sign-ins at /ui/login per client address and per token in each window (0: no limit)
    ui_login_attempts: Annotated[int, Field(ge=0)] = 10
    ui_login_window_seconds: Annotated[float, Field(gt=0)] = 60.0
    ui_sessions_per_token: Annotated[int, Field(ge=1)] = 32
    remotes_file: Path | None = None
    remote_wait_seconds: Annotated[float, Field(ge=0)] = 600.0
    remote_push_attempts: Annotated[int, Field(ge=1, le=100)] = 8
    remote_push_interval_seconds: Annotated[float, Field(ge=0)] = 0.0
    remote_coalesce_max: Annotated[int, Field(ge=1, le=1000)] = 64
    # a proposal's revisions are pushed to branch <prefix><proposal id> of a remote-backed wiki's remote
    proposal_branch_prefix: str = "wikiq/proposals/"
    # how often a worker removes the revision refs and branches of decided or expired proposals
    proposal_sweep_seconds: Annotated[float, Field(gt=0, le=86400)] = 60.0
    # what one batch or one read may cost (worker.engine.budget): BATCH_TOO_COSTLY / QUERY_TOO_COSTLY
    cost_cpu_seconds: Annotated[float, Field(gt=0, le=600)] = 2.0
    cost_scan_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024 * 1024
    cost_regex_work: Annotated[int, Field(ge=1000)] = 100_000_000
    cost_re2_max_mem: Annotated[int, Field(ge=1024 * 1024)] = 8 * 1024 * 1024
    cost_parse_lines: Annotated[int, Field(ge=100)] = 50_000
    cost_yaml_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    cost_yaml_nodes: Annotated[int, Field(ge=100)] = 100_000
    cost_yaml_depth: Annotated[int, Field(ge=4)] = 64
    cost_output_bytes: Annotated[int, Field(ge=64 * 1024)] = 16 * 1024 * 1024
    author_name: str = "wikiq user"
    author_email: str = "user@localhost"
    log_level: str = "info"
    # Host names (besides the bind address's own) the API answers for: exact names, ".example.org" for
    # a domain and its subdomains, "*" for any; other Host headers get 421 (against DNS rebinding)
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    # proxies (IP addresses or networks) whose X-Forwarded-Proto and X-Forwarded-For are believed: the
    # scheme they name is the request's (https there makes the status page's cookie Secure)
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    # the key of the Wikiq-Proof trailer that proves a commit is wikiq's own; unset: one is generated
    # once and kept in Redis for the whole deployment (``worker.jobs.proofs``)
    commit_secret: str | None = None

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _parse_schedule(cls, value: object) -> object:
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",") if p.strip()]
            if not parts:
                raise ValueError("give comma-separated seconds between attempts, e.g. 0,5,300")
            return tuple(float(p) for p in parts)
        return value

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _check_schedule(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(v < 0 for v in value):
            raise ValueError("delays must be zero or positive seconds")
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            parts = (part.strip().lower().rstrip(".") for part in value.split(","))
            return tuple(part.removeprefix("[").removesuffix("]") for part in parts if part)
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        found = []
        for name in value:
            try:
                found.append(str(ipaddress.ip_address(name)))  # an address, as the Host check compares it
                continue
            except ValueError:
                pass
            found.append(name)
            if name != "*" and not _HOST_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a host name: give names without scheme or port, comma-separated "
                    '(".example.org" for a domain and its subdomains, "*" for any)'
                )
        return tuple(found)

    @field_validator("proposal_branch_prefix")
    @classmethod
    def _check_branch_prefix(cls, value: str) -> str:
        parts = (value + "prop-x").split("/")
        bad = not _BRANCH_PART.fullmatch(value + "x") or any(
            not part or part.startswith(".") or part.endswith(".lock") or ".." in part for part in parts
        )
        if bad:
            raise ValueError(
                f"{value!r} does not start a git branch name: letters, digits, '.', '_', '-' and '/' "
                "between non-empty parts, e.g. wikiq/proposals/"
            )
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _parse_proxies(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        if not isinstance(value, tuple | list):
            return value
        found = []
        for part in map(str, value):
            try:
                found.append(
                    str(
                        ipaddress.ip_network(part, strict=False)
                        if "/" in part
                        else ipaddress.ip_address(part)
                    )
                )
            except ValueError:
                raise ValueError(
                    f"{part!r} is not an IP address or network, e.g. 10.0.0.5 or 172.16.0.0/12"
                ) from None
        return tuple(found)

    @field_validator("redis_sentinels", mode="before")
    @classmethod
    def _parse_sentinels(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(parse_address(part) for part in value.split(",") if part.strip())
        return value

    @field_validator("redis_sentinel_master")
    @classmethod
    def _check_master(cls, value: str | None, info: ValidationInfo) -> str | None:
        sentinels = info.data.get("redis_sentinels")
        value = value or None
        if sentinels and value is None:
            raise ValueError("WIKIQ_REDIS_SENTINELS is set: name the primary's service (e.g. mymaster)")
        if value is not None and not sentinels:
            raise ValueError("needs WIKIQ_REDIS_SENTINELS (host:port of each sentinel)")
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _check_secret(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        body = value.removeprefix("whsec_")
        if body == value:
            raise ValueError("must start with whsec_ (a Standard Webhooks secret)")
        try:
            if not base64.b64decode(body + "=" * (-len(body) % 4), validate=True):
                raise ValueError
        except (ValueError, binascii.Error):
            raise ValueError("must be whsec_ followed by base64 bytes") from None
        return value

    @property
    def redis_where(self) -> str:
        """Where Redis is, fit to print (no password)."""
        if self.redis_sentinels:
            nodes = ",".join(f"{host}:{port}" for host, port in self.redis_sentinels)
            return f"sentinel master {self.redis_sentinel_master!r} via {nodes}"
        return redacted_url(self.redis_url)

    @property
    def limits(self) -> Limits:
        """The per-batch limits these settings configure."""
        return Limits(
            max_edits=self.max_edits,
            max_content_bytes=self.max_content_bytes,
            max_file_bytes=self.max_file_bytes,
            max_output_bytes=self.max_batch_output_bytes,
            costs=self.costs,
        )

    @property
    def costs(self) -> Costs:
        """What one batch or one read may cost, as these settings configure it."""
        return Costs(
            cpu_seconds=self.cost_cpu_seconds,
            scan_bytes=self.cost_scan_bytes,
            regex_work=self.cost_regex_work,
            re2_max_mem=self.cost_re2_max_mem,
            parse_lines=self.cost_parse_lines,
            yaml_bytes=self.cost_yaml_bytes,
            yaml_nodes=self.cost_yaml_nodes,
            yaml_depth=self.cost_yaml_depth,
            output_bytes=self.cost_output_bytes,
        )


def redacted_url(url: str) -> str:
    """``url`` without its password, fit to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class SettingsError(Exception):
    """A bad ``WIKIQ_*`` value; the message is the one line to print."""


def load_settings(**overrides: object) -> Settings:
    """Read the settings from the environment; ``SettingsError`` names the first bad variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "WIKIQ_" + str(first["loc"][0]).upper() if first["loc"] else "WIKIQ_*"
        value = os.environ.get(name, "")
        raise SettingsError(f"bad setting {name}={value[:60]!r}: {first['msg']}") from None
