"""Contract section 3 in process, jobs: long-poll, cancellation, a wiki's job list, webhook redelivery rules.

Where a job must stay queued, the in-process worker is paused; a job function is also called directly
(``apply_batch(ctx, job_id)``) to show what a worker does with a cancelled job.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.service.harness import Deployment, check_job, create, expect_error, expect_error_shape
from worker.jobs.run import apply_batch

UNKNOWN = "01HZZZZZZZZZZZZZZZZZZZZZZZ"


@pytest.mark.both  # the poll held by the API process is woken by a worker process
async def test_long_poll_answers_when_the_job_finishes(dep: Deployment) -> None:
    """A long-poll started while the job is queued answers with the finished job once a worker runs it."""
    wiki = await dep.new_wiki("poll")
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "quick", "edits": [create("wiki/q.md")]})
        poll = asyncio.create_task(dep.client.get(f"/v1/jobs/{job_id}", params={"wait": 60}))
        queued = await dep.client.get(f"/v1/jobs/{job_id}")
        check_job(queued.json(), wiki, "queued")
        assert not poll.done()
    answer = await poll  # the worker resumed: the poll ends on the job's finish, not after 60 s
    assert answer.status_code == 200, answer.text
    check_job(answer.json(), wiki, "succeeded")
    assert answer.json()["job_id"] == job_id
    assert (await dep.client.get(f"/v1/jobs/{job_id}")).json() == answer.json()
    again = await dep.client.get(f"/v1/jobs/{job_id}", params={"wait": 60})
    assert again.json() == answer.json()


async def test_many_long_polls_of_one_job_all_answer(dep: Deployment) -> None:
    """Twenty long-polls of one queued job all answer with the same finished job."""
    wiki = await dep.new_wiki("polls")
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "m", "edits": [create("wiki/q.md")]})
        polls = [
            asyncio.create_task(dep.client.get(f"/v1/jobs/{job_id}", params={"wait": 60})) for _ in range(20)
        ]
    answers = await asyncio.gather(*polls)
    assert {a.status_code for a in answers} == {200}
    assert len({a.text for a in answers}) == 1
    check_job(answers[0].json(), wiki, "succeeded")


async def test_short_wait_on_a_queued_job_answers_queued(dep: Deployment) -> None:
    """A wait that runs out before the job starts answers the queued job (200), not an error."""
    wiki = await dep.new_wiki("short")
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "m", "edits": [create("wiki/q.md")]})
        answer = await dep.client.get(f"/v1/jobs/{job_id}", params={"wait": 0.05})
        assert answer.status_code == 200, answer.text
        check_job(answer.json(), wiki, "queued")
    check_job(await dep.wait(job_id), wiki, "succeeded")


async def test_long_poll_wait_over_60_is_capped(dep: Deployment) -> None:
    """A wait of more than 60 s is capped at 60 (contract: "at most 60"), not refused."""
    wiki = await dep.new_wiki("cap")
    job = await dep.apply(wiki, {"message": "quick", "edits": [create("wiki/q.md")]})
    answer = await dep.client.get(f"/v1/jobs/{job['job_id']}", params={"wait": 120})
    assert answer.status_code == 200, answer.text
    assert answer.json() == job


@pytest.mark.parametrize("job_id", [UNKNOWN, "nope", "x" * 64])
async def test_unknown_job_is_404(dep: Deployment, job_id: str) -> None:
    """GET (with or without wait), DELETE and redeliver of an unknown job answer 404 JOB_NOT_FOUND."""
    expect_error(await dep.client.get(f"/v1/jobs/{job_id}"), 404, "JOB_NOT_FOUND")
    expect_error(await dep.client.get(f"/v1/jobs/{job_id}", params={"wait": 1}), 404, "JOB_NOT_FOUND")
    expect_error(await dep.client.delete(f"/v1/jobs/{job_id}"), 404, "JOB_NOT_FOUND")
    expect_error(await dep.client.post(f"/v1/jobs/{job_id}/webhook/redeliver"), 404, "JOB_NOT_FOUND")


async def test_over_long_job_id_is_refused(dep: Deployment) -> None:
    """A job id longer than 64 characters is refused with the error object (never looked up)."""
    answer = await dep.client.get(f"/v1/jobs/{'x' * 65}")
    assert answer.status_code in (404, 422), answer.text
    expect_error_shape(answer, answer.status_code)


async def test_cancel_finished_job_is_409(dep: Deployment) -> None:
    """DELETE of a finished job answers 409 NOT_CANCELLABLE and leaves the job as it was."""
    wiki = await dep.new_wiki("late")
    ok = await dep.apply(wiki, {"message": "ok", "edits": [create("wiki/x.md")]})
    failed = await dep.apply(wiki, {"message": "bad", "edits": [create("wiki/x.md")]})
    assert (ok["status"], failed["status"]) == ("succeeded", "failed")
    for job in (ok, failed):
        expect_error(await dep.client.delete(f"/v1/jobs/{job['job_id']}"), 409, "NOT_CANCELLABLE")
        assert (await dep.client.get(f"/v1/jobs/{job['job_id']}")).json() == job


async def test_cancel_queued_job_never_runs(dep: Deployment) -> None:
    """DELETE of a queued job answers 200 cancelled (again on repeat); it never runs, the next job does."""
    wiki = await dep.new_wiki("cancel")
    before = await dep.head(wiki)
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "never", "edits": [create("wiki/never.md")]})
        poll = asyncio.create_task(dep.client.get(f"/v1/jobs/{job_id}", params={"wait": 60}))
        answer = await dep.client.delete(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        cancelled = answer.json()
        check_job(cancelled, wiki, "cancelled")
        assert cancelled["job_id"] == job_id and cancelled["finished_at"] is not None
        assert (await poll).json() == cancelled  # a long-poll ends on the cancellation too
        repeated = await dep.client.delete(f"/v1/jobs/{job_id}")
        assert repeated.status_code == 200, repeated.text
        assert repeated.json() == cancelled
    after = await dep.apply(wiki, {"message": "after", "edits": [create("wiki/after.md")]})
    check_job(after, wiki, "succeeded")
    assert (await dep.client.get(f"/v1/jobs/{job_id}")).json() == cancelled
    assert [c["commit"] for c in await dep.commits(wiki)] == [after["result"]["commit"], before]
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/wiki/never.md"), 404, "NOT_FOUND")
    assert [j["job_id"] for j in await dep.jobs(wiki, status="cancelled")] == [job_id]


async def test_a_cancelled_job_handed_to_a_worker_does_nothing(dep: Deployment) -> None:
    """If a worker is handed a job already cancelled (a race with the queue), the run writes nothing."""
    wiki = await dep.new_wiki("cancelrun")
    before = await dep.head(wiki)
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "never", "edits": [create("wiki/never.md")]})
        assert (await dep.client.delete(f"/v1/jobs/{job_id}")).status_code == 200
        assert await apply_batch(dep.worker.context(), job_id) == "cancelled"
    assert await dep.head(wiki) == before
    check_job((await dep.client.get(f"/v1/jobs/{job_id}")).json(), wiki, "cancelled")


async def test_a_job_run_twice_commits_once(dep: Deployment) -> None:
    """Running one job's function twice (at-least-once delivery) reports one commit, made once."""
    wiki = await dep.new_wiki("twice")
    before = await dep.head(wiki)
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "once", "edits": [create("wiki/once.md")]})
        assert await apply_batch(dep.worker.context(), job_id) == "succeeded"
        assert await apply_batch(dep.worker.context(job_try=2), job_id) == "succeeded"
    job = await dep.wait(job_id)
    check_job(job, wiki, "succeeded")
    history = await dep.commits(wiki)
    assert [c["commit"] for c in history] == [job["result"]["commit"], before]


async def test_wiki_jobs_newest_first_with_status_filter(dep: Deployment) -> None:
    """GET /v1/wikis/{wiki}/jobs lists the wiki's jobs newest first, filtered by status and cut by limit."""
    wiki = await dep.new_wiki("joblist")
    other = await dep.new_wiki("joblist")
    outcomes = []
    for i, path in enumerate(["wiki/a.md", "wiki/a.md", "wiki/b.md", "wiki/b.md"]):
        job = await dep.apply(wiki, {"message": f"j{i}", "edits": [create(path)]})
        outcomes.append((job["job_id"], job["status"]))
    await dep.apply(other, {"message": "elsewhere", "edits": [create("wiki/a.md")]})
    assert [s for _, s in outcomes] == ["succeeded", "failed", "succeeded", "failed"]
    listed = await dep.jobs(wiki)
    assert [j["job_id"] for j in listed] == [i for i, _ in reversed(outcomes)]
    for job in listed:
        check_job(job, wiki, job["status"])
    assert [j["job_id"] for j in await dep.jobs(wiki, status="failed")] == [outcomes[3][0], outcomes[1][0]]
    assert [j["job_id"] for j in await dep.jobs(wiki, status="succeeded")] == [outcomes[2][0], outcomes[0][0]]
    assert await dep.jobs(wiki, status="queued") == []
    assert [j["job_id"] for j in await dep.jobs(wiki, limit=1)] == [outcomes[3][0]]
    assert [j["job_id"] for j in await dep.jobs(wiki, status="succeeded", limit=1)] == [outcomes[2][0]]
    expect_error(
        await dep.client.get(f"/v1/wikis/{wiki}/jobs", params={"status": "done"}), 422, "INVALID_BATCH"
    )


async def test_queued_job_is_listed_as_queued(dep: Deployment) -> None:
    """While the worker is away a submitted job is listed with status queued and no start time."""
    wiki = await dep.new_wiki("queuedlist")
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, {"message": "m", "edits": [create("wiki/a.md")]})
        (listed,) = await dep.jobs(wiki, status="queued")
        assert listed["job_id"] == job_id
        check_job(listed, wiki, "queued")
        assert listed["finished_at"] is None
    await dep.wait(job_id)
    assert await dep.jobs(wiki, status="queued") == []


async def test_redeliver_refuses_a_job_without_webhook(dep: Deployment) -> None:
    """Redelivering a job that named no webhook is 422 INVALID_BATCH."""
    wiki = await dep.new_wiki("nohook")
    job = await dep.apply(wiki, {"message": "no hook", "edits": [create("wiki/nh.md")]})
    answer = await dep.client.post(f"/v1/jobs/{job['job_id']}/webhook/redeliver")
    expect_error(answer, 422, "INVALID_BATCH")


async def test_redeliver_refuses_an_unfinished_job(dep: Deployment) -> None:
    """Redelivering the webhook of a job not finished yet is 422 INVALID_BATCH; the job is unchanged."""
    wiki = await dep.new_wiki("early")
    batch = {"message": "m", "edits": [create("wiki/a.md")], "webhook": {"url": "http://127.0.0.1:9/hook"}}
    async with dep.worker.paused():
        job_id = await dep.submit_ok(wiki, batch)
        before = (await dep.client.get(f"/v1/jobs/{job_id}")).json()
        assert before["webhook"] == {"url": "http://127.0.0.1:9/hook", "state": "pending", "attempts": []}
        expect_error(await dep.client.post(f"/v1/jobs/{job_id}/webhook/redeliver"), 422, "INVALID_BATCH")
        assert (await dep.client.get(f"/v1/jobs/{job_id}")).json() == before
        assert (await dep.client.delete(f"/v1/jobs/{job_id}")).status_code == 200


async def test_redeliver_a_finished_job_is_202_pending(dep: Deployment) -> None:
    """Redelivering a finished job's webhook answers 202 with the job, its webhook pending again."""
    wiki = await dep.new_wiki("again")
    batch = {"message": "m", "edits": [create("wiki/a.md")], "webhook": {"url": "http://127.0.0.1:9/hook"}}
    job = await dep.apply(wiki, batch)
    check_job(job, wiki, "succeeded")
    answer = await dep.client.post(f"/v1/jobs/{job['job_id']}/webhook/redeliver")
    assert answer.status_code == 202, answer.text
    assert answer.json()["job_id"] == job["job_id"]
    assert answer.json()["webhook"]["state"] == "pending"
    assert answer.json()["result"] == job["result"]
