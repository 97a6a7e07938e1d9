"""What one read may cost the read indexes: the link index behind backlinks and the text index behind
search, against a real API and worker.

Both indexes are built here at the wiki's head, as ``worker.git.warmup`` builds them for a large wiki, so
the reads go through them. Then a writer commits what a read would otherwise have to bring the index
forward over, and one read is measured: the API process's CPU (``/proc``, as ``test_costs`` does) and the
bytes the index holds. The bounds are generous so that only a blow-up fails them: a read's budget is 2 s
of CPU, and the unbounded indexes took 6-11 s and hundreds of MB for these reads.
"""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.service import Service
from tests.security.conftest import TOKENS, deployment, fsck_every_wiki
from tests.security.test_costs import Cost, api_pid
from worker.git import GitStore, WikiRepo, linkindex, textindex
from worker.git.linkindex import link_index

READ_CPU = 4.0  # seconds of API CPU one read may take here (its budget is 2 s; unbounded took 6-11 s)
KIB = 1024
LONG_PATH_BYTES = 3660
LINKS = 80_000  # "[[a]] " each: 480 KB, one create


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A deployment with one worker and a wiki ``sec`` holding a few pages, its link and text indexes
    built at the head."""
    service = deployment(tmp_path_factory.mktemp("indexes"), workers=1, WIKIQ_REDELIVER_INTERVAL_SECONDS="60")
    job = run(
        service,
        [{"op": "create", "path": "wiki/a.md", "content": "# A\n"}]
        + [
            {"op": "create", "path": f"wiki/p{n}.md", "content": f"# P{n}\n\nsee [[a]] and [[index]]\n"}
            for n in range(5)
        ],
    )
    assert job["status"] == "succeeded", job
    with opened(service) as repo:
        head = repo.head()
        assert head is not None
        link_index(repo).build(head)
        repo.text_index().build(head)
    yield service
    service.stop()
    fsck_every_wiki(service)


@contextlib.contextmanager
def opened(service: Service) -> Iterator[WikiRepo]:
    """The wiki ``sec`` of ``service``, opened in this process."""
    store = GitStore(service.data)
    try:
        yield store.open("sec")
    finally:
        store.close()


def client(service: Service) -> httpx.Client:
    return httpx.Client(
        base_url=service.url, headers={"authorization": f"Bearer {TOKENS['dave']}"}, timeout=120
    )


def run(service: Service, edits: list[dict[str, Any]]) -> dict[str, Any]:
    """Submit a batch as dave and wait for its job."""
    with client(service) as http:
        answer = http.post("/v1/wikis/sec/batches", json={"message": "m", "edits": edits})
        assert answer.status_code == 202, answer.text
    return service.wait(answer.json()["job_id"], timeout=120)


def index_bytes(service: Service, name: str) -> int:
    """The bytes an index of ``sec`` holds: its pages at its last commit, which its file has once its
    write-ahead log is checkpointed (the log, a copy of the last updates' pages, is cut back then)."""
    with contextlib.closing(sqlite3.connect(service.data / "wikis" / "sec.git" / name, timeout=60)) as db:
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    return int(pages) * int(size)


def wiki_bytes(service: Service) -> int:
    """The bytes of every file at the head of ``sec``, and the bytes of their paths."""
    with opened(service) as repo:
        head = repo.head()
        assert head is not None
        return sum(entry.size + len(entry.path.encode()) for entry in repo.list_files(head))


def long_path(total: int) -> str:
    """A page path of exactly ``total`` bytes, in folders of 250-byte names."""
    folders = []
    left = total - len("wiki/") - len(".md")
    while left > 251 + 1:
        folders.append("d" * 250)
        left -= 251
    return "wiki/" + "".join(f"{folder}/" for folder in folders) + "b" * left + ".md"


def test_one_backlinks_read_after_a_page_of_many_links_at_a_long_path_is_bounded(indexed: Service) -> None:
    """A page at a 3 660-byte path holding ``[[a]] `` 80 000 times (480 KB, one create), then one backlinks
    read any reader may send: the read brings the link index forward within its own budget, and the
    index grows by far less than the page (its path is stored once, and a page whose links would outweigh
    its bytes is kept as one costly row). A backlinks read of the page it links to parses it under the
    read's budget: answered or QUERY_TOO_COSTLY, never more."""
    path = long_path(LONG_PATH_BYTES)
    assert len(path.encode()) == LONG_PATH_BYTES
    before = index_bytes(indexed, linkindex.FILE_NAME)
    job = run(indexed, [{"op": "create", "path": path, "content": "[[a]] " * LINKS}])
    assert job["status"] == "succeeded", job
    with Cost(api_pid(indexed)) as cost, client(indexed) as http:
        answer = http.get("/v1/wikis/sec/backlinks", params={"path": "wiki/p0.md"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["backlinks"] == []
    assert cost.cpu < READ_CPU, f"the read took {cost.cpu:.1f} s of CPU"
    grown = index_bytes(indexed, linkindex.FILE_NAME) - before
    assert grown < 2 * wiki_bytes(indexed), f"the link index grew by {grown} bytes"
    with opened(indexed) as repo:
        assert link_index(repo).indexed() == repo.head()  # brought forward by the read, not left behind
    with Cost(api_pid(indexed)) as cost, client(indexed) as http:
        answer = http.get("/v1/wikis/sec/backlinks", params={"path": "wiki/a.md", "limit": 10})
    if answer.status_code == 200:
        assert {link["path"] for link in answer.json()["backlinks"]} == {path}  # it sorts first
        assert answer.json()["truncated"]
    else:
        assert answer.json()["error"]["code"] == "QUERY_TOO_COSTLY", answer.text
    assert cost.cpu < READ_CPU, f"the read took {cost.cpu:.1f} s of CPU"


def test_one_search_after_many_big_pages_is_bounded(indexed: Service) -> None:
    """Two batches of ten pages of 786 KB, then one search: the read does not index 15 MB of text in its
    request (it greps, bounded by its budget, and the index is brought forward in the background), and
    the index, once at the head, stays within a small multiple of the wiki's text."""
    page = 786 * KIB
    for batch in range(2):
        edits = [
            {
                "op": "create",
                "path": f"wiki/big/b{batch}-{n}.md",
                "content": base64.b64encode(os.urandom(page * 3 // 4)).decode(),
            }
            for n in range(10)
        ]
        assert run(indexed, edits)["status"] == "succeeded"
    with Cost(api_pid(indexed)) as cost, client(indexed) as http:
        answer = http.get("/v1/wikis/sec/search", params={"q": "see [[a]]"})
    assert answer.status_code == 200, answer.text
    assert [match["path"] for match in answer.json()["matches"]] == [f"wiki/p{n}.md" for n in range(5)]
    assert cost.cpu < READ_CPU, f"the search took {cost.cpu:.1f} s of CPU"
    with opened(indexed) as repo:
        head = repo.head()
        assert head is not None
        repo.text_index().build(head)  # waits for the background's update, if one is under way
        assert repo.text_index().indexed() == head
    size = index_bytes(indexed, textindex.FILE_NAME)
    assert size < 8 * wiki_bytes(indexed), f"the text index is {size} bytes"
