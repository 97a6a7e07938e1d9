"""Plain git, for checking what wikiq wrote from the outside: one copy of the helpers every test layer uses.

Every call runs with no system or user configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL``), so
nothing on the machine changes what git checks. ``blob_id`` is an independent reference for page versions
(the formula, not wikiq's code).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path


def git_env() -> dict[str, str]:
    """The environment for git here: no system or user configuration can change what it checks."""
    identity = {
        f"GIT_{who}_{part}": value
        for who in ("AUTHOR", "COMMITTER")
        for part, value in (("NAME", "wikiq tests"), ("EMAIL", "tests@wikiq.local"))
    }
    return {
        **os.environ,
        **identity,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
    }


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """The output of ``git --git-dir repo args`` (asserting it exits 0)."""
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, input=input, env=git_env()
    ).stdout


def git_text(repo: Path, *args: str) -> str:
    """``git`` as text."""
    return git(repo, *args).decode()


def fsck(repo: Path) -> None:
    """``git fsck --strict`` exits 0 and reports nothing broken, missing, dangling or bad."""
    result = subprocess.run(
        ["git", "--git-dir", str(repo), "fsck", "--strict", "--no-progress"],
        capture_output=True,
        text=True,
        env=git_env(),
    )
    assert result.returncode == 0, result.stderr
    for word in ("error", "warning", "missing", "broken", "dangling", "bad"):
        assert word not in result.stdout + result.stderr, result.stdout + result.stderr


def bare(path: Path) -> Path:
    """A new empty bare repository at ``path`` with branch ``main``."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True, env=git_env())
    return path


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` as ``git hash-object`` prints it: the page version of the contract."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def tree_files(repo: Path, commit: str, regular_only: bool = False) -> dict[str, bytes]:
    """Every file at ``commit`` read with plain git: path -> bytes (``regular_only``: assert mode 100644)."""
    files = {}
    for record in git(repo, "ls-tree", "-r", "-z", commit).split(b"\x00"):
        if record:
            meta, path = record.split(b"\t", 1)
            mode, kind, oid = meta.split()
            if regular_only:
                assert (mode, kind) == (b"100644", b"blob"), (path, mode)
            files[path.decode()] = git(repo, "cat-file", "blob", oid.decode())
    return files
