"""Settings of Redis Sentinel and durable acceptance, and the naming of storage faults: pure checks."""

from __future__ import annotations

import errno

import pytest

from worker.jobs.storage import describe, storage_fault, storage_fault_in
from worker.redis_server import appendfsync_for
from worker.settings import Settings, SettingsError, load_settings


def test_sentinels_parse_and_replace_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """``host:port`` pairs (IPv6 in brackets) and a master name; printed without the URL."""
    monkeypatch.setenv("WIKIQ_REDIS_SENTINELS", "s1:26379, [::1]:26380")
    monkeypatch.setenv("WIKIQ_REDIS_SENTINEL_MASTER", "wikiq")
    settings = load_settings()
    assert settings.redis_sentinels == (("s1", 26379), ("::1", 26380))
    assert settings.redis_where == "sentinel master 'wikiq' via s1:26379,::1:26380"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WIKIQ_REDIS_SENTINELS": "s1:26379"}, "WIKIQ_REDIS_SENTINEL_MASTER"),
        ({"WIKIQ_REDIS_SENTINEL_MASTER": "wikiq"}, "WIKIQ_REDIS_SENTINEL_MASTER"),
        ({"WIKIQ_REDIS_SENTINELS": "s1", "WIKIQ_REDIS_SENTINEL_MASTER": "m"}, "WIKIQ_REDIS_SENTINELS"),
        ({"WIKIQ_REDIS_SENTINELS": "s1:0", "WIKIQ_REDIS_SENTINEL_MASTER": "m"}, "WIKIQ_REDIS_SENTINELS"),
        ({"WIKIQ_ACCEPT_DURABILITY": "disk"}, "WIKIQ_ACCEPT_DURABILITY"),
        ({"WIKIQ_ACCEPT_TIMEOUT_SECONDS": "0"}, "WIKIQ_ACCEPT_TIMEOUT_SECONDS"),
        ({"WIKIQ_MIN_FREE_BYTES": "-1"}, "WIKIQ_MIN_FREE_BYTES"),
    ],
)
def test_bad_redis_settings_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    """A half-configured Sentinel or a bad durability value stops start-up naming the variable."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError, match=f"^bad setting {named}="):
        load_settings()


def test_durability_defaults_and_matching_fsync() -> None:
    """``local`` by default; ``always`` fsync for local and replica, ``everysec`` for none."""
    assert Settings().accept_durability == "local"
    assert [appendfsync_for(d) for d in ("none", "local", "replica")] == ["everysec", "always", "always"]


def test_storage_faults_are_recognised_through_wrapping_and_git_text() -> None:
    """ENOSPC, EDQUOT and EROFS (also as a cause, or as git's stderr) are STORAGE_UNAVAILABLE; others not."""
    full = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise full
        except OSError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        fault = storage_fault(wrapped)
    assert fault is not None and fault.code == "STORAGE_UNAVAILABLE" and "full (ENOSPC)" in fault.message
    assert "read-only" in (storage_fault(OSError(errno.EROFS, "ro")) or full).args[0]
    assert storage_fault(OSError(errno.EACCES, "denied")) is None
    assert storage_fault(ValueError("x")) is None

    class GitFailed(Exception):
        stderr = b"fatal: write error: No space left on device"

    assert storage_fault(GitFailed()) is not None
    assert storage_fault_in("error: unable to create file: Read-only file system") is not None
    assert storage_fault_in("fatal: could not read from remote repository") is None
    assert "quota" in describe(errno.EDQUOT)
