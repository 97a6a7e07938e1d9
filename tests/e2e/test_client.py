"""The Python client (``api.client``), sync and async, against real processes: Redis, the API and a worker."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.client import AsyncClient, Client, ClientError, ConnectionFailed, raise_for_error
from tests.e2e.service import Service
from tests.gitutil import blob_id as git_version
from worker.redis_server import free_port
from worker.schema.answers import Job
from worker.schema.edits import Batch, Create, Replace

_serial = itertools.count()


@pytest.fixture
def client(svc: Service) -> Iterator[Client]:
    """A sync client of the module's service."""
    with Client(svc.url) as c:
        yield c


def new_wiki(svc: Service, stem: str) -> str:
    """A fresh wiki for one test."""
    wiki = f"{stem}-{next(_serial)}"
    svc.create_wiki(wiki)
    return wiki


def create(path: str, content: str) -> dict[str, Any]:
    """A create edit."""
    return {"op": "create", "path": path, "content": content}


def test_wikis_create_and_list(client: Client) -> None:
    """create_wiki answers the new head and list_wikis then shows the wiki with that head."""
    made = client.create_wiki(f"made-{next(_serial)}")
    assert made.head is not None and len(made.head) == 40
    assert any(w.id == made.id and w.head == made.head for w in client.list_wikis())
    with pytest.raises(ClientError) as refused:
        client.create_wiki(made.id)
    assert (refused.value.code, refused.value.status) == ("WIKI_EXISTS", 409)


def test_submit_wait_returns_typed_job(svc: Service, client: Client) -> None:
    """submit(wait=True) returns a succeeded Job whose applied versions are the pages' versions."""
    wiki = new_wiki(svc, "typed")
    batch = Batch(message="two pages", edits=[Create(op="create", path="wiki/a.md", content="A\n")])
    job = client.submit(wiki, batch, wait=True)
    assert isinstance(job, Job) and job.status == "succeeded" and job.wiki == wiki
    assert job.result is not None and job.result.commit == client.commits(wiki, 1)[0].commit
    (applied,) = job.result.applied
    assert (applied.index, applied.op, applied.path) == (0, "create", "wiki/a.md")
    assert applied.version == git_version(b"A\n") == client.read_page(wiki, "wiki/a.md").version
    assert client.commits(wiki, 1)[0].job_id == job.job_id


def test_pages_iterate_read_and_search(svc: Service, client: Client) -> None:
    """iter_pages follows cursors; read_page and read_bytes give exact text and bytes; search finds lines."""
    wiki = new_wiki(svc, "pages")
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
    raise_for_error(client.submit(wiki, {"message": "pages", "edits": edits}, wait=True))
    listed = [p.path for p in client.iter_pages(wiki, page_size=2)]
    assert listed == sorted(listed) and len(listed) == 9
    first = client.list_pages(wiki, prefix="wiki/", limit=2)
    assert [p.path for p in first.pages] == ["wiki/p0.md", "wiki/p1.md"] and first.next_cursor
    page = client.read_page(wiki, "wiki/p3.md")
    assert (page.content, page.encoding, page.size, page.version) == (
        "page 3\n",
        "utf-8",
        7,
        git_version(b"page 3\n"),
    )
    blob = client.read_page(wiki, "raw/blob.bin")
    assert blob.encoding == "base64" and client.read_bytes(wiki, "raw/blob.bin") == binary
    assert [(m.path, m.line, m.text) for m in client.search(wiki, "PAGE 4")] == [("wiki/p4.md", 1, "page 4")]


def test_failed_job_and_refusals(svc: Service, client: Client) -> None:
    """A worker refusal is a failed Job naming the edit; a submission refusal raises with status and index."""
    wiki = new_wiki(svc, "refused")
    stale = "0" * 40
    edits = [
        create("wiki/new.md", "x\n"),
        {"op": "overwrite", "path": "index.md", "content": "y\n", "expected_version": stale},
    ]
    job = client.submit(wiki, {"message": "stale", "edits": edits}, wait=True)
    assert job.status == "failed" and job.result is None
    assert job.error is not None and (job.error.code, job.error.index) == ("VERSION_MISMATCH", 1)
    with pytest.raises(ClientError) as failed:
        raise_for_error(job)
    assert (failed.value.code, failed.value.index) == ("VERSION_MISMATCH", 1)
    with pytest.raises(ClientError) as zone:
        client.submit(wiki, {"message": "zone", "edits": [create("wiki/ok.md", ""), create("etc/x.md", "")]})
    assert (zone.value.code, zone.value.index, zone.value.status) == ("ZONE_FORBIDDEN", 1, 422)
    with pytest.raises(ClientError) as missing:
        client.read_page(wiki, "wiki/none.md")
    assert (missing.value.code, missing.value.status) == ("NOT_FOUND", 404)


def test_job_wait_cancel_and_jobs(svc: Service, client: Client) -> None:
    """job(wait=True) long-polls to the end; a finished job is not cancellable; jobs() lists newest first."""
    wiki = new_wiki(svc, "jobs")
    queued = client.submit(wiki, {"message": "one", "edits": [create("wiki/one.md", "1\n")]})
    assert queued.status in ("queued", "running", "succeeded") and queued.wiki == wiki
    done = client.job(queued.job_id, wait=True)
    assert done.status == "succeeded" and done.finished
    with pytest.raises(ClientError) as late:
        client.cancel(done.job_id)
    assert (late.value.code, late.value.status) == ("NOT_CANCELLABLE", 409)
    second = client.submit(wiki, {"message": "two", "edits": [create("wiki/two.md", "2\n")]}, wait=30.0)
    assert second.status == "succeeded"
    assert [j.job_id for j in client.jobs(wiki)] == [second.job_id, done.job_id]
    assert [j.job_id for j in client.jobs(wiki, status="succeeded", limit=1)] == [second.job_id]
    with pytest.raises(ClientError) as unknown:
        client.job("01NOSUCHJOB")
    assert unknown.value.code == "JOB_NOT_FOUND"


def test_idempotency_key(svc: Service, client: Client) -> None:
    """The same Idempotency-Key and batch return the same job; another batch under it is refused."""
    wiki = new_wiki(svc, "idem")
    batch = {"message": "once", "edits": [create("wiki/once.md", "1\n")]}
    first = client.submit(wiki, batch, idempotency_key="k-1", wait=True)
    again = client.submit(wiki, batch, idempotency_key="k-1", wait=True)
    assert again.job_id == first.job_id and again.status == "succeeded"
    with pytest.raises(ClientError) as conflict:
        client.submit(wiki, {**batch, "message": "other"}, idempotency_key="k-1")
    assert conflict.value.code == "IDEMPOTENCY_CONFLICT"


def test_env_url_token_and_unreachable(svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """WIKIQ_URL and WIKIQ_TOKEN configure the client; a closed port raises ConnectionFailed."""
    seen: list[httpx.Request] = []
    monkeypatch.setenv("WIKIQ_URL", svc.url)
    monkeypatch.setenv("WIKIQ_TOKEN", "secret-token")
    with httpx.Client(event_hooks={"request": [seen.append]}) as http, Client(http=http) as client:
        client.list_wikis()
    assert seen[0].headers["Authorization"] == "Bearer secret-token"
    assert str(seen[0].url) == f"{svc.url}/v1/wikis"
    with (
        Client(f"http://127.0.0.1:{free_port()}", token="") as closed,
        pytest.raises(ConnectionFailed) as down,
    ):
        closed.list_wikis()
    assert (
        isinstance(down.value, ClientError) and down.value.code == "UNREACHABLE" and down.value.status is None
    )


async def test_async_client(svc: Service) -> None:
    """AsyncClient has the sync client's methods and answers."""
    wiki = new_wiki(svc, "async")
    async with AsyncClient(svc.url) as client:
        assert wiki in [w.id for w in await client.list_wikis()]
        job = await client.submit(wiki, {"message": "a", "edits": [create("wiki/a.md", "A\n")]}, wait=True)
        assert job.status == "succeeded" and job.result is not None
        page = await client.read_page(wiki, "wiki/a.md")
        old = Replace(op="replace", path="wiki/a.md", old="A", new="B", expected_version=page.version)
        queued = await client.submit(wiki, Batch(message="b", edits=[old]))
        done = await client.job(queued.job_id, wait=True)
        assert done.status == "succeeded" and await client.read_bytes(wiki, "wiki/a.md") == b"B\n"
        assert [p.path async for p in client.iter_pages(wiki, "wiki/", page_size=1)] == ["wiki/a.md"]
        assert [m.path for m in await client.search(wiki, "b")] == ["wiki/a.md"]
        assert [c.job_id for c in await client.commits(wiki, 2)] == [done.job_id, job.job_id]
        assert [j.job_id for j in await client.jobs(wiki)] == [done.job_id, job.job_id]
        with pytest.raises(ClientError) as late:
            await client.cancel(done.job_id)
        assert late.value.code == "NOT_CANCELLABLE"
        assert (await client.list_pages(wiki, prefix="wiki/")).next_cursor is None
    async with AsyncClient(f"http://127.0.0.1:{free_port()}") as closed:
        with pytest.raises(ConnectionFailed):
            await closed.list_wikis()


def test_refactor_reads_and_check(svc: Service, client: Client) -> None:
    """read_pages, sections, backlinks, search pages with a cursor, and check (a dry run with a diff)."""
    from api.client import SearchOptions

    wiki = new_wiki(svc, "refactor")
    edits = [
        create("wiki/a.md", "# A\n\n## Part\n\nsee [[b]]\n"),
        create("wiki/b.md", "# B\n\nback to [[a]]\n"),
    ]
    client.submit(wiki, {"message": "seed", "edits": edits}, wait=True)
    found = client.read_pages(wiki, ["wiki/b.md", "wiki/none.md", "wiki/a.md"], sections=True)
    assert [p.path for p in found.pages] == ["wiki/b.md", "wiki/a.md"]
    assert [e.code for e in found.errors] == ["NOT_FOUND"]
    assert [s.address for s in found.pages[1].sections or []] == ["A", "Part"]
    page = client.read_page(wiki, "wiki/a.md", sections=True)
    assert page.sections is not None and page.sections[1].version == found.pages[1].sections[1].version  # type: ignore[index]
    links = client.backlinks(wiki, "wiki/b.md")
    assert [(b.path, b.line, b.text) for b in links.backlinks] == [("wiki/a.md", 5, "[[b]]")]
    first = client.search_page(wiki, "[[", limit=1)
    assert len(first.matches) == 1 and first.next_cursor
    rest = client.search_page(wiki, "[[", limit=10, options=SearchOptions(cursor=first.next_cursor))
    assert [m.path for m in first.matches + rest.matches] == ["wiki/a.md", "wiki/b.md"]
    assert [m.line for m in client.search(wiki, r"^#+ \w+$", regex=True, prefix="wiki/a")] == [1, 3]
    checked = client.check(
        wiki,
        {"message": "m", "edits": [{"op": "delete", "path": "wiki/b.md", "expected_version": links.version}]},
    )
    assert checked.status == "succeeded" and checked.dry_run and checked.result is not None
    assert checked.result.diff is not None and checked.result.diff[0].path == "wiki/b.md"
    assert [(w.code, w.path) for w in checked.result.warnings or []] == [("LINK_BROKEN", "wiki/a.md")]
    assert client.read_page(wiki, "wiki/b.md").version == links.version
