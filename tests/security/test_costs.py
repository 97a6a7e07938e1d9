"""Every request has a bounded cost: adversarial batches and reads against a real API and worker.

Each test measures the CPU time the serving process spent on one request and how far its peak memory
rose (``/proc``: utime + stime, and VmHWM after resetting it), and asserts both stay far under what the
unbounded code took (tens of seconds, hundreds of MB); the bounds are generous so that only a blow-up
fails them, not a busy machine. Each also checks that the partition's next job still runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.service import Service
from tests.security.conftest import TOKENS, deployment, fsck_every_wiki

CPU_LIMIT = 8.0  # seconds one refused request may take here (the budget is 2 s; unbounded took 25-75 s)
MEMORY_LIMIT = 96 * 1024 * 1024  # bytes the serving process may grow by (the budget is ~64 MB)
MIB = 1024 * 1024
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def reset_peak(pid: int) -> int:
    """Reset the process's peak resident size to its current one (Linux clear_refs 5); that size."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return peak(pid)


def peak(pid: int) -> int:
    """The process's peak resident size since the last reset, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class Cost:
    """CPU and peak-memory growth of one process over a ``with`` block."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = 0.0
        self.grew = 0

    def __enter__(self) -> Cost:
        self._cpu = cpu_seconds(self.pid)
        self._rss = reset_peak(self.pid)
        return self

    def __exit__(self, *_: object) -> None:
        self.cpu = cpu_seconds(self.pid) - self._cpu
        self.grew = peak(self.pid) - self._rss

    def assert_bounded(self) -> None:
        assert self.cpu < CPU_LIMIT, f"the request took {self.cpu:.1f} s of CPU"
        assert self.grew < MEMORY_LIMIT, f"the process grew by {self.grew / MIB:.0f} MB"


@pytest.fixture(scope="module")
def costly(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with one worker and one wiki ``sec``."""
    service = deployment(tmp_path_factory.mktemp("costly"), workers=1, WIKIQ_REDELIVER_INTERVAL_SECONDS="60")
    yield service
    service.stop()
    fsck_every_wiki(service)


def client(service: Service) -> httpx.Client:
    return httpx.Client(
        base_url=service.url, headers={"authorization": f"Bearer {TOKENS['dave']}"}, timeout=120
    )


def run(service: Service, edits: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Submit a batch as dave and wait for its job."""
    with client(service) as http:
        answer = http.post("/v1/wikis/sec/batches", json={"message": "m", "edits": edits, **extra})
        assert answer.status_code == 202, answer.text
    return service.wait(answer.json()["job_id"], timeout=120)


def worker_pid(service: Service) -> int:
    (worker,) = service.workers
    return worker.pid


def api_pid(service: Service) -> int:
    assert service.api is not None
    return service.api.pid


def next_job_runs(service: Service, name: str) -> None:
    """The wiki's next batch still runs after the costly one."""
    job = run(service, [{"op": "create", "path": f"wiki/after-{name}.md", "content": "# ok\n"}])
    assert job["status"] == "succeeded", job


def bomb(levels: int) -> str:
    """A page whose front matter is a YAML alias chain: each level lists the one before ten times."""
    lines = ["---", "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    return "\n".join([*lines, "---", "# Bomb", ""])


def test_a_front_matter_alias_bomb_is_refused_cheaply(costly: Service) -> None:
    """Seven levels of aliases (a few hundred bytes) expand to 10^7 values: the frontmatter op on that
    page is BATCH_TOO_COSTLY within the budget, and nothing is committed."""
    text = bomb(7)
    assert len(text) < 600
    assert run(costly, [{"op": "create", "path": "wiki/bomb.md", "content": text}])["status"] == "succeeded"
    version = costly.page("sec", "wiki/bomb.md")["version"]
    edit = {"op": "frontmatter", "path": "wiki/bomb.md", "set": {"k": "v"}, "expected_version": version}
    with Cost(worker_pid(costly)) as cost:
        job = run(costly, [edit], dry_run=True)
    assert job["status"] == "failed", job
    assert (job["error"]["code"], job["error"]["index"]) == ("BATCH_TOO_COSTLY", 0)
    assert "alias" in job["error"]["message"]
    cost.assert_bounded()
    next_job_runs(costly, "bomb")


def test_a_pattern_with_a_huge_worst_case_is_refused_before_it_runs(costly: Service) -> None:
    """``a[ab]{1000}c`` over pages of a and b makes RE2 fall back to its NFA (seconds per MB): the
    replace_across is refused up front, naming the page."""
    page = "ab" * MIB + "\n"
    for name in ("re1", "re2", "re3"):
        created = run(costly, [{"op": "create", "path": f"wiki/re/{name}.md", "content": page}])
        assert created["status"] == "succeeded"
    edit = {"op": "replace_across", "prefix": "wiki/re/", "pattern": "a[ab]{1000}c", "new": "x"}
    with Cost(worker_pid(costly)) as cost:
        job = run(costly, [edit])
    assert (job["status"], job["error"]["code"]) == ("failed", "BATCH_TOO_COSTLY"), job
    assert "wiki/re/re1.md" in job["error"]["message"]
    cost.assert_bounded()
    next_job_runs(costly, "re")


def test_a_pattern_that_rescans_per_match_stops_at_the_cpu_budget(costly: Service) -> None:
    """``a.*b|a`` over a page of a's rescans the rest of the text per match: the batch's CPU budget stops
    it (BATCH_TOO_COSTLY), not the job timeout."""
    page = "a" * (400 * 1024) + "\n"
    assert run(costly, [{"op": "create", "path": "wiki/as.md", "content": page}])["status"] == "succeeded"
    edit = {"op": "replace_across", "prefix": "wiki/as.md", "pattern": "a.*b|a", "new": "c"}
    with Cost(worker_pid(costly)) as cost:
        job = run(costly, [edit])
    assert (job["status"], job["error"]["code"]) == ("failed", "BATCH_TOO_COSTLY"), job
    assert "CPU" in job["error"]["message"]
    cost.assert_bounded()
    next_job_runs(costly, "as")


def test_a_regex_search_with_a_huge_worst_case_is_query_too_costly(costly: Service) -> None:
    """The same pattern as a regex search: refused QUERY_TOO_COSTLY before RE2 runs, naming the page."""
    with Cost(api_pid(costly)) as cost, client(costly) as http:
        answer = http.get(
            "/v1/wikis/sec/search", params={"q": "a[ab]{1000}c", "regex": "true", "prefix": "wiki/re/"}
        )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "QUERY_TOO_COSTLY"
    assert "wiki/re/" in answer.json()["error"]["message"]
    cost.assert_bounded()


def test_a_regex_search_streams_big_pages(costly: Service) -> None:
    """A regex search over ~100 MB of big pages reads them one at a time: the API's memory does not
    grow by the pages' size (it read every blob of a chunk at once before)."""
    page = "y" * (7 * MIB) + "\n"
    for number in range(14):
        created = run(costly, [{"op": "create", "path": f"wiki/big/p{number:02}.md", "content": page}])
        assert created["status"] == "succeeded"
    with Cost(api_pid(costly)) as cost, client(costly) as http:
        answer = http.get(
            "/v1/wikis/sec/search", params={"q": "needle[0-9]", "regex": "true", "prefix": "wiki/big/"}
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["matches"] == []
    cost.assert_bounded()


def test_sections_of_a_page_of_too_many_lines_are_query_too_costly(costly: Service) -> None:
    """A page of 60 000 headings written by a small batch (replace_all multiplies it): ``sections=true``
    is refused before markdown-it runs, and the plain read still works."""
    seed = "# h\n" * 1000
    assert run(costly, [{"op": "create", "path": "wiki/heads.md", "content": seed}])["status"] == "succeeded"
    version = costly.page("sec", "wiki/heads.md")["version"]
    grow = {
        "op": "replace",
        "path": "wiki/heads.md",
        "old": "# h\n",
        "new": "# h\n" * 60,
        "replace_all": True,
        "expected_version": version,
    }
    assert run(costly, [grow])["status"] == "succeeded"
    with Cost(api_pid(costly)) as cost, client(costly) as http:
        answer = http.get("/v1/wikis/sec/pages/wiki/heads.md", params={"sections": "true"})
        plain = http.get("/v1/wikis/sec/pages/wiki/heads.md")
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "QUERY_TOO_COSTLY", answer.text
    assert "60001 lines" in answer.json()["error"]["message"]
    assert plain.status_code == 200 and plain.json()["content"].count("# h\n") == 60_000
    cost.assert_bounded()


def test_a_dry_run_over_a_page_of_many_short_lines_is_bounded(costly: Service) -> None:
    """A dry run touching a page of 500 000 short lines: its review stops checking links at the budget
    (a TRUNCATED warning) instead of parsing for many seconds; the dry run still answers its diff."""
    lines = "[[x]]\n" * 500_000
    with Cost(worker_pid(costly)) as cost:
        job = run(costly, [{"op": "create", "path": "wiki/lines.md", "content": lines}], dry_run=True)
    assert job["status"] == "succeeded", job
    codes = [warning["code"] for warning in job["result"]["warnings"]]
    assert "TRUNCATED" in codes, codes
    cost.assert_bounded()
    next_job_runs(costly, "lines")
