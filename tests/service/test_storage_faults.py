"""Storage faults are named: a data directory on a small tmpfs that fills up mid-run, then is made
read-only. Jobs fail with ``STORAGE_UNAVAILABLE`` (not ``INTERNAL``, not retried) saying what to free,
``/readyz`` answers 503, creating a wiki answers 503, nothing partial is left (``git fsck --strict``, no
temporary pack, no ref lock, ``main`` at the last good commit), and every job after freeing space succeeds.

Needs root to mount a tmpfs (this sandbox allows it); skipped elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.harness import Deployment, expect_error

SIZE = 8 * 1024 * 1024
THRESHOLD = 1024 * 1024
PAGE = 192 * 1024  # bytes of random (incompressible) content a batch adds


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """An 8 MiB tmpfs, mounted outside pytest's numbered directories (other sessions prune those)."""
    mount = Path(tempfile.mkdtemp(prefix="wikiq-tmpfs-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(mount, ignore_errors=True)


def _free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _fill(path: Path, leave: int) -> None:
    """Write ``path`` until its filesystem has about ``leave`` bytes free (0: until it is full)."""
    with open(path, "ab", buffering=0) as out:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while _free(path.parent) > leave + len(chunk):
                out.write(chunk)
        if leave == 0:
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 4096)


def _page(number: int) -> dict[str, Any]:
    content = base64.b64encode(os.urandom(PAGE)).decode()
    return {"op": "create", "path": f"wiki/p{number}.bin", "content": content, "encoding": "base64"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _clean(dep: Deployment, wiki: str) -> None:
    """Nothing partial: fsck strict is clean, no temporary pack or ref lock is left."""
    repo = dep.repo(wiki)
    fsck = subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    leftovers = [p.name for p in (repo / "objects" / "pack").iterdir() if p.name.startswith("tmp_")]
    assert not leftovers, leftovers
    assert not list((repo / "refs").rglob("*.lock")), "a ref lock was left"


async def test_full_then_read_only_data_dir(fresh: Any, small_fs: Path) -> None:
    """Fill the tmpfs mid-run: STORAGE_UNAVAILABLE, /readyz 503, 503 on create-wiki, nothing partial;
    free it: every job succeeds. Remount it read-only: the same code, saying it is read-only."""
    async with fresh(data_dir=small_fs / "data", min_free_bytes=THRESHOLD) as dep:
        wiki = await dep.new_wiki("full")
        assert (await dep.client.get("/readyz")).status_code == 200
        ballast = small_fs / "ballast"
        _fill(ballast, leave=3 * PAGE)

        ready = await dep.client.get("/readyz")  # under the threshold already
        assert ready.status_code == 503, ready.text
        assert ready.json()["data_dir"].startswith("low on space") and ready.json()["redis"] == "ok"

        good_head = await dep.head(wiki)
        failed = None
        for number in range(20):  # a few fit, then the filesystem is full mid-run
            job = await dep.apply(wiki, {"message": f"page {number}", "edits": [_page(number)]})
            if job["status"] == "failed":
                failed = job
                break
            assert job["status"] == "succeeded", job
            good_head = job["result"]["commit"]
        assert failed is not None, "the filesystem never filled up"
        error = failed["error"]
        assert error["code"] == "STORAGE_UNAVAILABLE" and error["index"] is None, error
        assert "full" in error["message"] and "free space" in error["message"], error
        record = await dep.worker.resources.jobs.get(failed["job_id"])
        assert record is not None and record.runs == 1  # failed at once, never retried
        assert await dep.head(wiki) == good_head
        _clean(dep, wiki)

        _fill(small_fs / "ballast-2", leave=0)
        created = await dep.client.post("/v1/wikis", json={"id": "another"})
        expect_error(created, 503, "STORAGE_UNAVAILABLE")

        ballast.unlink()
        (small_fs / "ballast-2").unlink()
        assert (await dep.client.get("/readyz")).status_code == 200
        for number in range(100, 103):
            job = await dep.apply(wiki, {"message": f"page {number}", "edits": [_page(number)]})
            assert job["status"] == "succeeded", job
        _clean(dep, wiki)
        assert _git(dep.repo(wiki), "rev-parse", "main").strip() == job["result"]["commit"]

        subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
        try:
            job = await dep.apply(wiki, {"message": "read-only", "edits": [_page(200)]})
            assert job["status"] == "failed" and job["error"]["code"] == "STORAGE_UNAVAILABLE", job
            assert "read-only" in job["error"]["message"], job
            ready = await dep.client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["data_dir"].startswith("not writable"), (
                ready.text
            )
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
        job = await dep.apply(wiki, {"message": "writable again", "edits": [_page(201)]})
        assert job["status"] == "succeeded", job
        _clean(dep, wiki)
