"""The Python client (``api.client``), sync and async, against real processes: Redis, the API and a worker.

What a client over a real socket adds: its URL and token from the environment, an unreachable server, the
sync client's refactor calls; each call's answers are tests/service/test_python_client.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.client import AsyncClient, Client, ClientError, ConnectionFailed
from tests.e2e.service import Service
from worker.redis_server import free_port
from worker.schema.edits import Batch, Replace

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
