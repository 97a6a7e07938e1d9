"""``GET /metrics`` after runs of known jobs: counters, histograms and queue gauges checked by value."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.receiver import running_receiver
from tests.e2e.service import Service
from worker.jobs.ids import partition_of

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(service: Service) -> Samples:
    """Every sample of ``/metrics``, keyed by sample name and label set."""
    answer = service.client.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value, or None when the series is absent."""
    return samples.get((name, frozenset(labels.items())))


def named(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every series of one sample name."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


def scrape_when(service: Service, ready: Callable[[Samples], bool], timeout: float = 15) -> Samples:
    """Scrape until ``ready(samples)`` holds (workers add their counts into Redis moments after a job)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(service)
        if ready(samples):
            return samples
        assert time.monotonic() < deadline, {k: v for k, v in samples.items() if k[0].startswith("wikiq_job")}
        time.sleep(0.05)  # polling a value that is written in the background


def _ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_counters_and_histograms_after_known_jobs(service: Service) -> None:
    """4 commits, 1 dry run, 2 VERSION_MISMATCH and 1 NOT_FOUND: every counter and histogram by value."""
    service.create_wiki("m")
    sizes: list[int] = []
    edit_counts: list[int] = []
    for n in range(1, 5):  # job n creates n files of 100*n bytes each
        edits = [{"op": "create", "path": f"wiki/j{n}-{i}.md", "content": "é" * 50 * n} for i in range(n)]
        job = service.apply("m", {"message": f"job {n}", "edits": edits})
        assert job["status"] == "succeeded", job
        sizes.append(n * 100 * n)
        edit_counts.append(n)
    dry = service.apply(
        "m",
        {
            "message": "dry",
            "dry_run": True,
            "edits": [{"op": "create", "path": "wiki/dry.md", "content": "x"}],
        },
    )
    assert dry["status"] == "succeeded" and dry["result"]["commit"] is None
    index = service.page("m", "index.md")
    for wrong in ("0" * 40, "1" * 40):
        bad = {"op": "overwrite", "path": "index.md", "content": "x", "expected_version": wrong}
        job = service.apply("m", {"message": "stale", "edits": [bad]})
        assert job["error"]["code"] == "VERSION_MISMATCH"
    missing = {"op": "delete", "path": "wiki/none.md", "expected_version": index["version"]}
    assert service.apply("m", {"message": "gone", "edits": [missing]})["error"]["code"] == "NOT_FOUND"

    samples = scrape_when(
        service,
        lambda s: (
            value(s, "wikiq_jobs_succeeded_total") == 5
            and sum(named(s, "wikiq_jobs_failed_total").values()) == 3
            and value(s, "wikiq_jobs_accepted_total") == 8
        ),
    )
    assert named(samples, "wikiq_jobs_failed_total") == {
        frozenset({("code", "VERSION_MISMATCH")}): 2.0,
        frozenset({("code", "NOT_FOUND")}): 1.0,
    }
    assert value(samples, "wikiq_jobs_cancelled_total") == 0
    assert value(samples, "wikiq_job_retries_total") == 0
    assert named(samples, "wikiq_cas_retries_total") == {}
    assert value(samples, "wikiq_job_queue_seconds_count") == 8
    assert value(samples, "wikiq_job_run_seconds_count", outcome="succeeded") == 5
    assert value(samples, "wikiq_job_run_seconds_count", outcome="failed") == 3
    assert value(samples, "wikiq_job_run_seconds_bucket", outcome="succeeded", le="+Inf") == 5
    assert value(samples, "wikiq_commit_edits_count") == 4
    assert value(samples, "wikiq_commit_edits_sum") == sum(edit_counts)
    assert value(samples, "wikiq_commit_edits_bucket", le="1.0") == 1
    assert value(samples, "wikiq_commit_edits_bucket", le="2.0") == 2
    assert value(samples, "wikiq_commit_edits_bucket", le="5.0") == 4
    assert value(samples, "wikiq_commit_bytes_count") == 4
    assert value(samples, "wikiq_commit_bytes_sum") == sum(sizes)  # 100, 400, 900, 1600 bytes
    assert value(samples, "wikiq_commit_bytes_bucket", le="256.0") == 1
    assert value(samples, "wikiq_commit_bytes_bucket", le="1024.0") == 3
    assert value(samples, "wikiq_commit_bytes_bucket", le="4096.0") == 4
    buckets = [v for (n, labels), v in samples.items() if n == "wikiq_job_queue_seconds_bucket"]
    assert max(buckets) == 8 and buckets == sorted(buckets)  # cumulative


def test_queue_gauges_leases_and_cancel(tmp_path: Path) -> None:
    """With no worker, queue depth and oldest age rise and leases lapse; a new worker drains and owns all."""
    service = Service(tmp_path).start(workers=1)
    try:
        service.create_wiki("q")
        partition = str(partition_of("q", 4))
        first = scrape_when(  # a starting worker takes its leases one by one: wait until it holds them all
            service,
            lambda s: (
                value(s, "wikiq_workers_live") == 1 and sum(named(s, "wikiq_partition_owned").values()) == 4
            ),
        )
        worker = next(iter(named(first, "wikiq_worker_partitions")))
        assert named(first, "wikiq_worker_partitions") == {worker: 4.0}

        service.kill_worker(service.workers[0])
        submitted = time.monotonic()
        ids = []
        for n in range(3):
            answer = service.submit(
                "q",
                {"message": f"q{n}", "edits": [{"op": "create", "path": f"wiki/q{n}.md", "content": "q\n"}]},
            )
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["job_id"])
        assert service.client.delete(f"/v1/jobs/{ids[1]}").json()["status"] == "cancelled"
        down = scrape_when(
            service,
            lambda s: value(s, "wikiq_workers_live") == 0 and value(s, "wikiq_jobs_cancelled_total") == 1,
        )
        assert value(down, "wikiq_queue_depth", partition=partition) == 2
        assert sum(named(down, "wikiq_queue_depth").values()) == 2
        age = value(down, "wikiq_queue_oldest_age_seconds", partition=partition)
        assert age is not None and 0 < age <= time.monotonic() - submitted + 0.5
        assert sum(named(down, "wikiq_partition_owned").values()) == 0
        assert named(down, "wikiq_worker_partitions") == {}

        service.start_worker()
        jobs = [service.wait(i) for i in (ids[0], ids[2])]
        assert [j["status"] for j in jobs] == ["succeeded", "succeeded"]
        up = scrape_when(
            service,
            lambda s: (
                value(s, "wikiq_jobs_succeeded_total") == 2
                and sum(named(s, "wikiq_partition_owned").values()) == 4
            ),
        )
        assert value(up, "wikiq_queue_depth", partition=partition) == 0
        assert value(up, "wikiq_queue_oldest_age_seconds", partition=partition) == 0
        assert value(up, "wikiq_workers_live") == 1
        assert list(named(up, "wikiq_worker_partitions").values()) == [4.0]
        waited = sum(_ms(j["started_at"]) - _ms(j["submitted_at"]) for j in jobs) / 1000
        assert value(up, "wikiq_job_queue_seconds_count") == 2
        assert abs((value(up, "wikiq_job_queue_seconds_sum") or 0) - waited) < 0.01
        assert value(up, "wikiq_job_queue_seconds_bucket", le="0.1") == 0  # both waited out the dead worker
    finally:
        service.stop()


def test_webhook_attempts_by_outcome(tmp_path: Path) -> None:
    """500, 503, 200 on one hook and three 404s on another: 1 delivered, 2 http_5xx, 3 http_4xx."""
    service = Service(tmp_path, WIKIQ_WEBHOOK_RETRY_SCHEDULE="0,0.2,0.2").start(workers=1)
    try:
        service.create_wiki("h")
        with running_receiver() as receiver:
            receiver.script["/flaky"] = [(500, {}), (503, {}), (200, {})]
            receiver.script["/nope"] = [(404, {})]
            for n, path in enumerate(("/flaky", "/nope")):
                batch = {
                    "message": f"hook {n}",
                    "edits": [{"op": "create", "path": f"wiki/h{n}.md", "content": "h\n"}],
                    "webhook": {"url": receiver.url(path)},
                }
                assert service.submit("h", batch).status_code == 202
            receiver.wait_for(lambda: len(receiver.at("/flaky")) == 3 and len(receiver.at("/nope")) == 3)
        samples = scrape_when(service, lambda s: sum(named(s, "wikiq_webhook_attempts_total").values()) == 6)
        assert named(samples, "wikiq_webhook_attempts_total") == {
            frozenset({("outcome", "delivered")}): 1.0,
            frozenset({("outcome", "http_5xx")}): 2.0,
            frozenset({("outcome", "http_4xx")}): 3.0,
        }
    finally:
        service.stop()
