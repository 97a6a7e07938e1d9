"""One settings class for every wikiq process, read from ``WIKIQ_*`` environment variables.

A bad value stops start-up with one line naming the variable (``load_settings``).
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from worker.schema.edits import Limits

DEFAULT_RETRY_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


class Settings(BaseSettings):
    """wikiq's configuration; every field is ``WIKIQ_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="WIKIQ_", extra="ignore", frozen=True)

    redis_url: str = "redis://127.0.0.1:6379/0"
    data_dir: Path = Path("data")
    partitions: Annotated[int, Field(ge=1, le=1024)] = 16
    tokens_file: Path | None = None
    webhook_secret: str | None = None
    webhook_allow_private: bool = False
    webhook_retry_schedule: Annotated[tuple[float, ...], NoDecode] = DEFAULT_RETRY_SCHEDULE
    webhook_timeout: Annotated[float, Field(gt=0, le=60)] = 15.0
    max_edits: Annotated[int, Field(ge=1)] = 1000
    max_content_bytes: Annotated[int, Field(ge=1)] = 8 * 1024 * 1024
    max_file_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    max_batch_output_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024 * 1024
    max_body_bytes: Annotated[int, Field(ge=1024)] = 12 * 1024 * 1024
    max_queued_bytes: Annotated[int, Field(ge=0)] = 128 * 1024 * 1024
    job_retention_seconds: Annotated[int, Field(ge=60)] = 7 * 24 * 3600
    dry_run_retention_seconds: Annotated[int, Field(ge=60)] = 3600
    redeliver_interval_seconds: Annotated[int, Field(ge=0)] = 10
    mcp_max_concurrent: Annotated[int, Field(ge=1)] = 16
    lease_seconds: Annotated[float, Field(gt=0.5, le=120)] = 5.0
    job_timeout_seconds: Annotated[float, Field(gt=1)] = 120.0
    max_job_tries: Annotated[int, Field(ge=1, le=100)] = 25
    rate_limit_submissions: Annotated[int, Field(ge=0)] = 1200
    rate_limit_window_seconds: Annotated[float, Field(gt=0)] = 60.0
    remotes_file: Path | None = None
    remote_wait_seconds: Annotated[float, Field(ge=0)] = 600.0
    remote_push_attempts: Annotated[int, Field(ge=1, le=100)] = 8
    remote_push_interval_seconds: Annotated[float, Field(ge=0)] = 0.0
    remote_coalesce_max: Annotated[int, Field(ge=1, le=1000)] = 64
    author_name: str = "wikiq user"
    author_email: str = "user@localhost"
    log_level: str = "info"

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
    def limits(self) -> Limits:
        """The per-batch limits these settings configure."""
        return Limits(
            max_edits=self.max_edits,
            max_content_bytes=self.max_content_bytes,
            max_file_bytes=self.max_file_bytes,
            max_output_bytes=self.max_batch_output_bytes,
        )


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
