"""The hand-written Python client (``api.client.AsyncClient``) against the in-process app.

The client takes the ``httpx.AsyncClient`` it sends with, so here that is one bound to the app through
``ASGITransport``: the same answers as over the network, typed by ``worker.schema.answers``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from api.client import AsyncClient, ClientError, SearchOptions, raise_for_error
from tests.gitutil import blob_id
from tests.service.harness import BASE_URL, Deployment, create
from worker.schema.answers import Job
from worker.schema.edits import Batch, Create, Replace


@pytest_asyncio.fixture(loop_scope="module")
async def client(dep: Deployment) -> AsyncIterator[AsyncClient]:
    """A Python client of the module's app."""
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=dep.app))
    async with http, AsyncClient(BASE_URL, token="", http=http) as wikiq:
        yield wikiq


async def test_wikis_create_and_list(client: AsyncClient) -> None:
    """create_wiki answers the new head and list_wikis then shows the wiki with that head."""
    made = await client.create_wiki("made")
    assert made.head is not None and len(made.head) == 40
    assert any(w.id == made.id and w.head == made.head for w in await client.list_wikis())
    with pytest.raises(ClientError) as refused:
        await client.create_wiki(made.id)
    assert (refused.value.code, refused.value.status) == ("WIKI_EXISTS", 409)


async def test_submit_wait_returns_typed_job(dep: Deployment, client: AsyncClient) -> None:
    """submit(wait=True) returns a succeeded Job whose applied versions are the pages' versions."""
    wiki = await dep.new_wiki("typed")
    batch = Batch(message="one page", edits=[Create(op="create", path="wiki/a.md", content="A\n")])
    job = await client.submit(wiki, batch, wait=True)
    assert isinstance(job, Job) and job.status == "succeeded" and job.wiki == wiki
    assert job.result is not None and job.result.commit == (await client.commits(wiki, 1))[0].commit
    (applied,) = job.result.applied
    assert (applied.index, applied.op, applied.path) == (0, "create", "wiki/a.md")
    assert applied.version == blob_id(b"A\n") == (await client.read_page(wiki, "wiki/a.md")).version
    assert (await client.commits(wiki, 1))[0].job_id == job.job_id


async def test_pages_iterate_read_and_search(dep: Deployment, client: AsyncClient) -> None:
    """iter_pages follows cursors; read_page and read_bytes give exact text and bytes; search finds lines."""
    wiki = await dep.new_wiki("pages")
    binary = bytes(range(256))
    edits = [create(f"wiki/p{i}.md", f"page {i}\n") for i in range(5)]
    edits.append(
        {
            "op": "create",
            "path": "raw/blob.bin",
            "content": base64.b64encode(binary).decode(),
            "encoding": "base64",
        }
    )
    raise_for_error(await client.submit(wiki, {"message": "pages", "edits": edits}, wait=True))
    listed = [p.path async for p in client.iter_pages(wiki, page_size=2)]
    assert listed == sorted(listed) and len(listed) == 9
    first = await client.list_pages(wiki, prefix="wiki/", limit=2)
    assert [p.path for p in first.pages] == ["wiki/p0.md", "wiki/p1.md"] and first.next_cursor
    page = await client.read_page(wiki, "wiki/p3.md")
    assert (page.content, page.encoding, page.size, page.version) == (
        "page 3\n",
        "utf-8",
        7,
        blob_id(b"page 3\n"),
    )
    blob = await client.read_page(wiki, "raw/blob.bin")
    assert blob.encoding == "base64" and await client.read_bytes(wiki, "raw/blob.bin") == binary
    assert [(m.path, m.line, m.text) for m in await client.search(wiki, "PAGE 4")] == [
        ("wiki/p4.md", 1, "page 4")
    ]


async def test_failed_job_and_refusals(dep: Deployment, client: AsyncClient) -> None:
    """A worker refusal is a failed Job naming the edit; a submission refusal raises with status and index."""
    wiki = await dep.new_wiki("refused")
    edits = [
        create("wiki/new.md"),
        {"op": "overwrite", "path": "index.md", "content": "y\n", "expected_version": "0" * 40},
    ]
    job = await client.submit(wiki, {"message": "stale", "edits": edits}, wait=True)
    assert job.status == "failed" and job.result is None
    assert job.error is not None and (job.error.code, job.error.index) == ("VERSION_MISMATCH", 1)
    with pytest.raises(ClientError) as failed:
        raise_for_error(job)
    assert (failed.value.code, failed.value.index) == ("VERSION_MISMATCH", 1)
    index_version = (await client.read_page(wiki, "index.md")).version
    assert failed.value.details == {"path": "index.md", "current_version": index_version}
    assert failed.value.error.details == failed.value.details
    with pytest.raises(ClientError) as zone:
        await client.submit(wiki, {"message": "zone", "edits": [create("wiki/ok.md"), create("etc/x.md")]})
    assert (zone.value.code, zone.value.index, zone.value.status) == ("ZONE_FORBIDDEN", 1, 422)
    with pytest.raises(ClientError) as missing:
        await client.read_page(wiki, "wiki/none.md")
    assert (missing.value.code, missing.value.status) == ("NOT_FOUND", 404)


async def test_job_wait_cancel_and_jobs(dep: Deployment, client: AsyncClient) -> None:
    """job(wait=True) long-polls to the end; cancel works only while queued; jobs() lists newest first."""
    wiki = await dep.new_wiki("jobs")
    async with dep.worker.paused():
        queued = await client.submit(wiki, {"message": "one", "edits": [create("wiki/one.md", "1\n")]})
        assert (queued.status, queued.wiki) == ("queued", wiki)
        doomed = await client.submit(wiki, {"message": "never", "edits": [create("wiki/never.md")]})
        cancelled = await client.cancel(doomed.job_id)
        assert cancelled.status == "cancelled" and cancelled.finished
    done = await client.job(queued.job_id, wait=True)
    assert done.status == "succeeded" and done.finished
    with pytest.raises(ClientError) as late:
        await client.cancel(done.job_id)
    assert (late.value.code, late.value.status) == ("NOT_CANCELLABLE", 409)
    second = await client.submit(wiki, {"message": "two", "edits": [create("wiki/two.md", "2\n")]}, wait=30.0)
    assert second.status == "succeeded"
    assert [j.job_id for j in await client.jobs(wiki)] == [second.job_id, doomed.job_id, done.job_id]
    assert [j.job_id for j in await client.jobs(wiki, status="succeeded", limit=1)] == [second.job_id]
    with pytest.raises(ClientError) as unknown:
        await client.job("01NOSUCHJOB")
    assert unknown.value.code == "JOB_NOT_FOUND"


async def test_idempotency_key(dep: Deployment, client: AsyncClient) -> None:
    """The same Idempotency-Key and batch return the same job; another batch under it is refused."""
    wiki = await dep.new_wiki("idem")
    batch = {"message": "once", "edits": [create("wiki/once.md", "1\n")]}
    first = await client.submit(wiki, batch, idempotency_key="k-1", wait=True)
    again = await client.submit(wiki, batch, idempotency_key="k-1", wait=True)
    assert again.job_id == first.job_id and again.status == "succeeded"
    with pytest.raises(ClientError) as conflict:
        await client.submit(wiki, {**batch, "message": "other"}, idempotency_key="k-1")
    assert conflict.value.code == "IDEMPOTENCY_CONFLICT"


async def test_replace_with_the_read_version(dep: Deployment, client: AsyncClient) -> None:
    """Read, replace with the read version, read again: commits and jobs line up newest first."""
    wiki = await dep.new_wiki("async")
    job = await client.submit(wiki, {"message": "a", "edits": [create("wiki/a.md", "A\n")]}, wait=True)
    page = await client.read_page(wiki, "wiki/a.md")
    edit = Replace(op="replace", path="wiki/a.md", old="A", new="B", expected_version=page.version)
    queued = await client.submit(wiki, Batch(message="b", edits=[edit]))
    done = await client.job(queued.job_id, wait=True)
    assert done.status == "succeeded" and await client.read_bytes(wiki, "wiki/a.md") == b"B\n"
    assert [m.path for m in await client.search(wiki, "b")] == ["wiki/a.md"]
    assert [c.job_id for c in await client.commits(wiki, 2)] == [done.job_id, job.job_id]
    assert (await client.list_pages(wiki, prefix="wiki/")).next_cursor is None


async def test_search_modes_and_counts(dep: Deployment, client: AsyncClient) -> None:
    """SearchOptions sends outside_code, multiline and count: prose-only lines, a match across lines only
    when asked, and counts per page with their total, typed."""
    wiki = await dep.new_wiki("client-modes")
    await dep.seed(wiki, {"wiki/a.md": "typo here\n\n```\ntypo in code\n```\n\nend\nstart typo\n"})
    prose = await client.search_page(wiki, "typo", options=SearchOptions(outside_code=True))
    assert [m.line for m in prose.matches] == [1, 8]
    assert (await client.search_page(wiki, "end\\nstart", options=SearchOptions(regex=True))).matches == []
    across = await client.search_page(wiki, "end\\nstart", options=SearchOptions(regex=True, multiline=True))
    assert [m.line for m in across.matches] == [7]
    counted = await client.search_page(wiki, "typo", options=SearchOptions(count=True, outside_code=True))
    assert (counted.matches, counted.total) == ([], 2)
    assert [(p.path, p.count) for p in counted.pages or []] == [("wiki/a.md", 2)]
