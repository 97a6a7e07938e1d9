"""A dry run's diff is charged to the batch's budget: a small request over a long page stays cheap.

A real API, worker and Redis (``tests/security/conftest.py``). One page of 20 000 short lines, each line
repeated a few times over the page (the shape that makes a longest-common-subsequence matcher rescan the
page per changed line), and a ``replace_across`` dry run that changes a quarter of its lines, scattered.
The worker's CPU is read from ``/proc`` around the dry run (``tests/security/test_costs.py``); the same
wiki's next commit, submitted right behind it, must land soon after it was submitted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.e2e.service import Service
from tests.security.conftest import deployment, fsck_every_wiki
from tests.security.test_costs import Cost, client, run, worker_pid

LINES = 20_000
CPU_LIMIT = 4.0  # seconds of worker CPU for the dry run (the budget is 2 s; unbounded took about 20 s)
NEXT_COMMIT_LIMIT = 6.0  # seconds from the next commit's submission to its end (unbounded: about 30 s)


@pytest.fixture(scope="module")
def diffed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with one worker and one wiki ``sec``."""
    service = deployment(tmp_path_factory.mktemp("diffed"), workers=1, WIKIQ_REDELIVER_INTERVAL_SECONDS="60")
    yield service
    service.stop()
    fsck_every_wiki(service)


def long_page() -> str:
    """20 000 lines of 5 characters: 1 000 distinct lines, each 20 times."""
    return "".join(f"w{number % 1000:03}\n" for number in range(LINES))


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_a_dry_run_over_a_long_page_stays_within_its_budget(diffed: Service) -> None:
    """A replace_across dry run of a few bytes over the page answers its full diff within the bound, and
    the commit queued right behind it on the same wiki is not held up by it."""
    page = long_page()
    created = run(diffed, [{"op": "create", "path": "wiki/long.md", "content": page}])
    assert created["status"] == "succeeded", created
    changed = sum("7" in line for line in page.splitlines())
    edit = {"op": "replace_across", "prefix": "wiki/long.md", "old": "7", "new": "seven"}
    batch = {"message": "m", "edits": [edit], "dry_run": True}
    after = {"message": "m", "edits": [{"op": "create", "path": "wiki/after.md", "content": "# ok\n"}]}
    with Cost(worker_pid(diffed)) as cost, client(diffed) as http:
        dry = http.post("/v1/wikis/sec/batches", json=batch)
        assert dry.status_code == 202, dry.text
        commit = http.post("/v1/wikis/sec/batches", json=after)
        assert commit.status_code == 202, commit.text
        job = diffed.wait(dry.json()["job_id"], timeout=120)
    assert job["status"] == "succeeded", job
    (entry,) = job["result"]["diff"]
    assert entry["path"] == "wiki/long.md" and not entry.get("truncated"), entry
    lines = entry["diff"].splitlines()
    assert sum(line.startswith("-w") for line in lines) == changed
    assert sum(line.startswith("+w") and "seven" in line for line in lines) == changed
    assert cost.cpu < CPU_LIMIT, f"the dry run took {cost.cpu:.1f} s of worker CPU"
    landed = diffed.wait(commit.json()["job_id"], timeout=120)
    assert landed["status"] == "succeeded", landed
    waited = seconds(landed["finished_at"]) - seconds(landed["submitted_at"])
    assert waited < NEXT_COMMIT_LIMIT, f"the next commit took {waited:.1f} s"
