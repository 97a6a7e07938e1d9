"""Contract section 3 in process, reading side: wikis, page listings and paging, pages, search, commits.

One deployment (API app + worker in this event loop, real Redis, real git) serves the module; every test
works on wikis of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from tests.gitutil import blob_id, git_text
from tests.service.harness import INITIAL_FILES, Deployment, create, expect_error, expect_error_shape

# -- wikis -----------------------------------------------------------------------------------------------


async def test_create_wiki_makes_one_initial_commit(dep: Deployment) -> None:
    """POST /v1/wikis answers 201 and the wiki has one commit holding exactly index.md, log.md, schema.md."""
    wiki = "fresh-initial"
    answer = await dep.client.post("/v1/wikis", json={"id": wiki})
    assert answer.status_code == 201, answer.text
    assert set(answer.json()) == {"id", "head"}
    created_head = answer.json()["head"]
    assert answer.json()["id"] == wiki
    history = await dep.commits(wiki)
    assert [(c["commit"], c["job_id"]) for c in history] == [(created_head, None)]
    files = await dep.pages(wiki)
    assert set(files) == INITIAL_FILES
    for path, entry in files.items():
        page = await dep.page(wiki, path)
        assert page["commit"] == created_head
        assert page["encoding"] == "utf-8"
        assert entry["version"] == page["version"] == blob_id(page["content"].encode())
        assert entry["size"] == page["size"] == len(page["content"].encode())
    assert await dep.jobs(wiki) == []
    assert git_text(dep.repo(wiki), "rev-parse", "refs/heads/main").strip() == created_head


async def test_create_existing_wiki_is_409(dep: Deployment) -> None:
    """Creating a wiki twice answers 409 WIKI_EXISTS and leaves the first one as it was."""
    wiki = await dep.new_wiki("twice")
    before = await dep.head(wiki)
    expect_error(await dep.client.post("/v1/wikis", json={"id": wiki}), 409, "WIKI_EXISTS")
    assert await dep.head(wiki) == before
    assert len(await dep.commits(wiki)) == 1


@pytest.mark.parametrize(
    "wiki_id",
    ["Upper", "-dash-first", ".dot-first", "_under", "a" * 64, "has/slash", "has space", "", "é", "a\nb"],
)
async def test_create_wiki_with_invalid_id_is_422(dep: Deployment, wiki_id: str) -> None:
    """A wiki id outside ^[a-z0-9][a-z0-9._-]{0,62}$ is refused with 422 INVALID_BATCH and creates nothing."""
    expect_error(await dep.client.post("/v1/wikis", json={"id": wiki_id}), 422, "INVALID_BATCH")
    listed = (await dep.client.get("/v1/wikis")).json()["wikis"]
    assert wiki_id not in {w["id"] for w in listed}


@pytest.mark.parametrize(
    "body",
    [b"{}", b'{"id": 5}', b'{"id": "ok-id", "extra": 1}', b"not json", b"[]", b"", b'{"id": null}'],
    ids=str,
)
async def test_create_wiki_with_bad_body_is_422(dep: Deployment, body: bytes) -> None:
    """A POST /v1/wikis body that is not {"id": "<string>"} is refused with 422 INVALID_BATCH."""
    answer = await dep.client.post("/v1/wikis", content=body, headers={"content-type": "application/json"})
    expect_error(answer, 422, "INVALID_BATCH")
    assert "ok-id" not in {w["id"] for w in (await dep.client.get("/v1/wikis")).json()["wikis"]}


@pytest.mark.both  # simultaneous requests over real connections to uvicorn
async def test_concurrent_creates_of_one_wiki(dep: Deployment) -> None:
    """Of eight simultaneous creates of one wiki exactly one answers 201 and the others 409 WIKI_EXISTS."""
    wiki = "race-of-eight"
    answers = await asyncio.gather(*(dep.client.post("/v1/wikis", json={"id": wiki}) for _ in range(8)))
    assert sorted(a.status_code for a in answers) == [201] + [409] * 7, [a.text for a in answers]
    for answer in answers:
        if answer.status_code == 409:
            expect_error(answer, 409, "WIKI_EXISTS")
    created = next(a for a in answers if a.status_code == 201).json()["head"]
    assert [c["commit"] for c in await dep.commits(wiki)] == [created]
    listed = [w["id"] for w in (await dep.client.get("/v1/wikis")).json()["wikis"]]
    assert listed.count(wiki) == 1


async def test_create_wiki_longest_valid_id(dep: Deployment) -> None:
    """A 63-character id made of every allowed kind of character is accepted and usable."""
    wiki = "z0.a_b-c".ljust(63, "9")
    answer = await dep.client.post("/v1/wikis", json={"id": wiki})
    assert answer.status_code == 201, answer.text
    assert set(await dep.pages(wiki)) == INITIAL_FILES


async def test_list_wikis_gives_id_and_head(dep: Deployment) -> None:
    """GET /v1/wikis lists every wiki once with its current head."""
    one = await dep.new_wiki("listed")
    two = await dep.new_wiki("listed")
    await dep.seed(two, {"wiki/a.md": "a\n"})
    answer = await dep.client.get("/v1/wikis")
    assert answer.status_code == 200
    listed = answer.json()["wikis"]
    ids = [w["id"] for w in listed]
    assert len(ids) == len(set(ids))
    assert all(set(w) >= {"id", "head"} for w in listed), listed
    heads = {w["id"]: w["head"] for w in listed}
    assert heads[one] == await dep.head(one)
    assert heads[two] == await dep.head(two)
    assert heads[one] != heads[two]


# -- pages -----------------------------------------------------------------------------------------------


async def test_pages_listing_entries_match_files(dep: Deployment) -> None:
    """The pages listing names every file at the head with its git blob version and byte size."""
    wiki = await dep.new_wiki("listing")
    files = {"wiki/a.md": "a\n", "wiki/deep/er/b.md": "béé\n", "raw/src.txt": ""}
    await dep.seed(wiki, files)
    listed = await dep.pages(wiki)
    assert set(listed) == INITIAL_FILES | set(files)
    assert list(listed) == sorted(listed)
    for path, content in files.items():
        assert listed[path] == {
            "path": path,
            "version": blob_id(content.encode()),
            "size": len(content.encode()),
        }


async def test_pages_paging_walks_every_file_once(dep: Deployment) -> None:
    """Following next_cursor with a small limit returns every file exactly once, with and without prefix."""
    wiki = await dep.new_wiki("paging")
    files = {f"wiki/p/{i:02d}.md": f"page {i}\n" for i in range(23)}
    files |= {"wiki/pa.md": "pa\n", "wiki/q.md": "q\n", "raw/src.txt": "src\n"}
    await dep.seed(wiki, files)
    everything = INITIAL_FILES | set(files)

    async def walk(limit: int, prefix: str | None) -> list[str]:
        seen: list[str] = []
        cursor: str | None = None
        requests = 0
        while True:
            params: dict[str, Any] = {"limit": limit}
            if prefix is not None:
                params["prefix"] = prefix
            if cursor is not None:
                params["cursor"] = cursor
            answer = await dep.client.get(f"/v1/wikis/{wiki}/pages", params=params)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            requests += 1
            assert len(body["pages"]) <= limit
            seen += [entry["path"] for entry in body["pages"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
            assert body["pages"], "a page with a next_cursor must not be empty"
            assert requests < 100, "paging does not end"
        assert requests <= math.ceil(len(seen) / limit) + 1
        return seen

    for limit in (1, 5, 7, 1000):
        seen = await walk(limit, None)
        assert set(seen) == everything, limit
        assert all(n == 1 for n in Counter(seen).values()), Counter(seen)
    under_p = await walk(4, "wiki/p/")
    assert sorted(under_p) == sorted(p for p in files if p.startswith("wiki/p/"))
    assert len(under_p) == len(set(under_p)) == 23
    assert set(await walk(2, "wiki/")) == {p for p in files if p.startswith("wiki/")}
    assert await walk(3, "raw/") == ["raw/src.txt"]
    assert await walk(3, "nothing/") == []


async def test_foreign_cursor_is_422(dep: Deployment) -> None:
    """A cursor the API did not give is refused with 422 INVALID_BATCH, not a 500."""
    wiki = await dep.new_wiki("cursor")
    answer = await dep.client.get(f"/v1/wikis/{wiki}/pages", params={"cursor": "%%%not-base64"})
    expect_error(answer, 422, "INVALID_BATCH")


@pytest.mark.parametrize("what", ["pages", "commits", "jobs", "search?q=x", "pages/index.md"])
async def test_reads_of_missing_wiki_are_404(dep: Deployment, what: str) -> None:
    """Every read of a wiki that does not exist answers 404 WIKI_NOT_FOUND."""
    expect_error(await dep.client.get(f"/v1/wikis/no-such-wiki/{what}"), 404, "WIKI_NOT_FOUND")


async def test_read_utf8_page_is_byte_exact(dep: Deployment) -> None:
    """A UTF-8 page reads back byte-exact with its git version, size, head commit and version ETag."""
    wiki = await dep.new_wiki("read")
    text = "# Ünïcødé 😀\r\nline two\twith tab\n\x00nul and no newline at the end  "
    path = "wiki/dossier été/page one.md"
    await dep.seed(wiki, {path: text})
    answer = await dep.client.get(f"/v1/wikis/{wiki}/pages/{path}")
    assert answer.status_code == 200, answer.text
    page = answer.json()
    data = text.encode("utf-8")
    assert page == {
        "path": path,
        "version": blob_id(data),
        "content": text,
        "encoding": "utf-8",
        "size": len(data),
        "commit": await dep.head(wiki),
    }
    assert answer.headers["etag"] == f'"{page["version"]}"'
    assert git_text(dep.repo(wiki), "rev-parse", f"main:{path}").strip() == page["version"]


async def test_read_binary_page_is_base64(dep: Deployment) -> None:
    """Bytes that are not UTF-8, created with encoding base64, read back as base64 with their git version."""
    wiki = await dep.new_wiki("binary")
    blobs = {
        "raw/all-bytes.bin": bytes(range(256)),
        "raw/latin1.txt": "café\n".encode("latin-1"),
        "wiki/utf8-sent-as-base64.md": "plain é\n".encode(),
    }
    edits = [
        {"op": "create", "path": p, "content": base64.b64encode(d).decode(), "encoding": "base64"}
        for p, d in blobs.items()
    ]
    job = await dep.apply(wiki, {"message": "bytes", "edits": edits})
    assert job["status"] == "succeeded", job
    for path, data in blobs.items():
        answer = await dep.client.get(f"/v1/wikis/{wiki}/pages/{path}")
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert page["version"] == blob_id(data)
        assert page["size"] == len(data)
        assert answer.headers["etag"] == f'"{page["version"]}"'
        if path.endswith(".md"):
            assert page["encoding"] == "utf-8"
            assert page["content"].encode() == data
        else:
            assert page["encoding"] == "base64"
            assert base64.b64decode(page["content"]) == data


async def test_read_missing_page_and_folder(dep: Deployment) -> None:
    """A missing page, and a folder read as a page, answer 404 NOT_FOUND (not WIKI_NOT_FOUND)."""
    wiki = await dep.new_wiki("missing")
    await dep.seed(wiki, {"wiki/dir/x.md": "x\n"})
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/wiki/nope.md"), 404, "NOT_FOUND")
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/wiki/dir"), 404, "NOT_FOUND")
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/wiki"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("wiki/%2E%2E/index.md", 422, "INVALID_PATH"),  # httpx would resolve a literal ../
        ("wiki/%2E/a.md", 422, "INVALID_PATH"),
        ("wiki//a.md", 422, "INVALID_PATH"),
        (".git/config", 422, "INVALID_PATH"),
        ("wiki/%01.md", 422, "INVALID_PATH"),
        ("wiki/%C2%85.md", 422, "INVALID_PATH"),
    ],
)
async def test_read_invalid_path_is_refused(dep: Deployment, path: str, status: int, code: str) -> None:
    """A page path the contract forbids (dot segments, empty segments, .git, control characters) is 422."""
    wiki = await dep.new_wiki("badpath")
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/{path}"), status, code)


# -- search ----------------------------------------------------------------------------------------------


async def test_search_is_literal_and_case_insensitive(dep: Deployment) -> None:
    """GET /search finds a literal string case-insensitively at the head, naming path, line and text."""
    wiki = await dep.new_wiki("search")
    await dep.seed(
        wiki,
        {
            "wiki/redis.md": "# Redis\nkeys live in memory\nREDIS persists with AOF\n",
            "wiki/other.md": "nothing here\nsee redis.md for more\n",
            "wiki/regex.md": "a.b is literal\naxb is not a match\n",
            "raw/notes.txt": "Redis notes\n",
        },
    )
    url = f"/v1/wikis/{wiki}/search"
    answer = await dep.client.get(url, params={"q": "redis"})
    assert answer.status_code == 200, answer.text
    found = {(m["path"], m["line"], m["text"]) for m in answer.json()["matches"]}
    assert found == {
        ("wiki/redis.md", 1, "# Redis"),
        ("wiki/redis.md", 3, "REDIS persists with AOF"),
        ("wiki/other.md", 2, "see redis.md for more"),
        ("raw/notes.txt", 1, "Redis notes"),
    }
    literal = (await dep.client.get(url, params={"q": "a.b"})).json()["matches"]
    assert [(m["path"], m["line"]) for m in literal] == [("wiki/regex.md", 1)]
    limited = (await dep.client.get(url, params={"q": "REDIS", "limit": 2})).json()["matches"]
    assert len(limited) == 2
    assert {(m["path"], m["line"], m["text"]) for m in limited} <= found
    assert (await dep.client.get(url, params={"q": "absent"})).json() == {"matches": []}


@pytest.mark.parametrize("q", ["", "two\nlines", "carriage\rreturn", "nul\x00"])
async def test_search_query_must_be_one_line(dep: Deployment, q: str) -> None:
    """An empty or multi-line q is refused with 422 and the error object."""
    wiki = await dep.new_wiki("searchq")
    expect_error_shape(await dep.client.get(f"/v1/wikis/{wiki}/search", params={"q": q}), 422)


async def test_search_sees_only_the_head(dep: Deployment) -> None:
    """A line that was replaced is no longer found; its replacement is."""
    wiki = await dep.new_wiki("searchhead")
    versions = await dep.seed(wiki, {"wiki/a.md": "needle one\n"})
    edit = {
        "op": "overwrite",
        "path": "wiki/a.md",
        "content": "hay\n",
        "expected_version": versions["wiki/a.md"],
    }
    assert (await dep.apply(wiki, {"message": "m", "edits": [edit]}))["status"] == "succeeded"
    url = f"/v1/wikis/{wiki}/search"
    assert (await dep.client.get(url, params={"q": "needle"})).json() == {"matches": []}
    hay = (await dep.client.get(url, params={"q": "HAY"})).json()["matches"]
    assert [(m["path"], m["line"], m["text"]) for m in hay] == [("wiki/a.md", 1, "hay")]


# -- commits ---------------------------------------------------------------------------------------------


async def test_commits_newest_first_with_author_time_job(dep: Deployment) -> None:
    """/commits lists commits newest first, each with message, author, time and the job that made it."""
    wiki = await dep.new_wiki("history")
    job_ids = []
    for i in range(3):
        job = await dep.apply(wiki, {"message": f"step {i}", "edits": [create(f"wiki/s{i}.md")]})
        assert job["status"] == "succeeded", job
        job_ids.append(job["job_id"])
    history = await dep.commits(wiki)
    assert len(history) == 4
    assert [c["job_id"] for c in history] == [*reversed(job_ids), None]
    for i, entry in enumerate(history[:3]):
        assert set(entry) == {"commit", "message", "author", "time", "job_id"}
        assert entry["message"].startswith(f"step {2 - i}")
        assert entry["message"].rstrip().endswith(f"Wikiq-Job: {entry['job_id']}")
        assert entry["author"] == {"name": "wikiq user", "email": "user@localhost"}
    times = [datetime.fromisoformat(c["time"]) for c in history]
    assert times == sorted(times, reverse=True)
    assert await dep.commits(wiki, 2) == history[:2]
    parents = git_text(dep.repo(wiki), "rev-list", "--parents", "-n", "1", history[0]["commit"]).split()
    assert parents == [history[0]["commit"], history[1]["commit"]]


async def test_commit_author_is_the_configured_single_user(dep: Deployment) -> None:
    """In single-user mode the author is the configured one and the committer is wikiq."""
    wiki = await dep.new_wiki("author")
    job = await dep.apply(wiki, {"message": "m", "edits": [create("wiki/a.md")]})
    line = git_text(dep.repo(wiki), "log", "-1", "--format=%an <%ae>|%cn <%ce>", job["result"]["commit"])
    assert line.strip() == "wikiq user <user@localhost>|wikiq <wikiq@localhost>"


async def test_answers_are_json_without_extra_envelope(dep: Deployment) -> None:
    """Lists answer their one documented key: wikis, pages + next_cursor, commits, matches, jobs."""
    wiki = await dep.new_wiki("envelope")
    expected = {
        "/v1/wikis": {"wikis"},
        f"/v1/wikis/{wiki}/pages": {"pages", "next_cursor"},
        f"/v1/wikis/{wiki}/commits": {"commits"},
        f"/v1/wikis/{wiki}/search?q=index": {"matches"},
        f"/v1/wikis/{wiki}/jobs": {"jobs"},
    }
    for url, keys in expected.items():
        answer = await dep.client.get(url)
        assert answer.status_code == 200, (url, answer.text)
        assert answer.headers["content-type"] == "application/json", url
        assert set(json.loads(answer.content)) == keys, url


async def test_backlinks_paging_walks_every_link_once(dep: Deployment) -> None:
    """Following next_cursor with a small limit answers every link once, in order, even when a cut
    falls between two links of one line; truncated is set exactly when a next_cursor is; a made-up
    cursor resumes after the path its text names, and one that is not base64url is 422 INVALID_BATCH."""
    wiki = await dep.new_wiki("backlinks-paging")
    files = {"wiki/target.md": "# Target\n"}
    files |= {f"wiki/p{i}.md": "[[target]] and [[target|again]] and [t](target.md)\n" for i in range(4)}
    files["wiki/q.md"] = "one [[target]]\n\ntwo [[target#Top]]\n"
    await dep.seed(wiki, files)
    url = f"/v1/wikis/{wiki}/backlinks"
    whole = (await dep.client.get(url, params={"path": "wiki/target.md"})).json()
    assert whole["truncated"] is False and "next_cursor" not in whole
    assert len(whole["backlinks"]) == 14
    for limit in (1, 2, 4, 13):
        seen: list[dict[str, Any]] = []
        params: dict[str, Any] = {"path": "wiki/target.md", "limit": limit}
        for _ in range(20):
            body = (await dep.client.get(url, params=params)).json()
            assert len(body["backlinks"]) <= limit
            seen += body["backlinks"]
            assert body["truncated"] is ("next_cursor" in body)
            if not body["truncated"]:
                break
            params["cursor"] = body["next_cursor"]
        assert seen == whole["backlinks"], limit
    made_up = await dep.client.get(url, params={"path": "wiki/target.md", "cursor": "enp6"})  # "zzz"
    assert made_up.status_code == 200 and made_up.json()["backlinks"] == []
    foreign = await dep.client.get(url, params={"path": "wiki/target.md", "cursor": "not base64!"})
    expect_error(foreign, 422, "INVALID_BATCH")
