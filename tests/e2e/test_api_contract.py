"""Contract section 3 through HTTP, against real processes: Redis, one API process and worker processes.

One deployment serves the whole module; every test works on wikis of its own (``new_wiki``), so tests do
not see each other's pages, commits or jobs.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.service import Service
from tests.gitutil import blob_id as git_version

MIB = 1024 * 1024
JOB_KEYS = {
    "job_id",
    "wiki",
    "status",
    "submitted_at",
    "started_at",
    "finished_at",
    "result",
    "error",
    "webhook",
}
INITIAL_FILES = {"index.md", "log.md", "schema.md"}
_serial = itertools.count()


WORKERS = 2  # for the module-scoped `svc` fixture of conftest.py


# -- helpers ---------------------------------------------------------------------------------------------


def new_wiki(svc: Service, stem: str) -> str:
    """Create a wiki with an id no other test uses; its id."""
    wiki = f"{stem}-{next(_serial)}"
    svc.create_wiki(wiki)
    return wiki


def expect_error(answer: httpx.Response, status: int, code: str, index: int | None = None) -> dict[str, Any]:
    """Assert ``answer`` is the contract's error object with this status, code and index; the error."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    body = answer.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "index"}, body
    assert isinstance(error["message"], str) and error["message"], body
    assert "Traceback" not in error["message"], body
    assert error["code"] == code, body
    assert error["index"] == index, body
    return dict(error)


def expect_error_shape(answer: httpx.Response, status: int) -> dict[str, Any]:
    """Assert ``answer`` has this status and exactly the contract's error object; the error."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    body = answer.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "index"}, body
    assert isinstance(body["error"]["code"], str) and body["error"]["code"], body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    assert body["error"]["index"] is None or isinstance(body["error"]["index"], int), body
    return dict(body["error"])


def commits(svc: Service, wiki: str, limit: int = 1000) -> list[dict[str, Any]]:
    """The wiki's commits, newest first."""
    answer = svc.client.get(f"/v1/wikis/{wiki}/commits", params={"limit": limit})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["commits"])


def head(svc: Service, wiki: str) -> str:
    """The wiki's head commit."""
    return str(commits(svc, wiki, 1)[0]["commit"])


def pages(svc: Service, wiki: str, **params: Any) -> dict[str, dict[str, Any]]:
    """Every file at the head (one unpaged listing), by path."""
    answer = svc.client.get(f"/v1/wikis/{wiki}/pages", params={"limit": 10_000, **params})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["next_cursor"] is None, body
    return {entry["path"]: entry for entry in body["pages"]}


def jobs(svc: Service, wiki: str, **params: Any) -> list[dict[str, Any]]:
    """The wiki's recent jobs, newest first."""
    answer = svc.client.get(f"/v1/wikis/{wiki}/jobs", params=params)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["jobs"])


def seed(svc: Service, wiki: str, files: dict[str, str]) -> dict[str, str]:
    """Create ``files`` in one batch; their versions by path."""
    job = svc.apply(
        wiki,
        {"message": "seed", "edits": [{"op": "create", "path": p, "content": c} for p, c in files.items()]},
    )
    assert job["status"] == "succeeded", job
    return {path: git_version(content.encode()) for path, content in files.items()}


def check_job(job: dict[str, Any], wiki: str, status: str) -> None:
    """Assert the job object has the contract's fields, this wiki and status, and ordered timestamps."""
    assert set(job) >= JOB_KEYS, job
    assert job["wiki"] == wiki, job
    assert job["status"] == status, job
    submitted = datetime.fromisoformat(job["submitted_at"])
    if status in ("succeeded", "failed"):
        assert job["started_at"] is not None and job["finished_at"] is not None, job
        started = datetime.fromisoformat(job["started_at"])
        finished = datetime.fromisoformat(job["finished_at"])
        assert submitted <= started <= finished, job
    if status == "succeeded":
        assert job["error"] is None, job
        # a dry run also answers a diff per changed file, warnings and (to its submitter) a plan
        dry = {"diff", "warnings", "plan"} if job.get("dry_run") else set()
        assert (
            {"commit", "applied"} | (dry - {"plan"}) <= set(job["result"]) <= {"commit", "applied"} | dry
        ), job
    if status == "failed":
        assert job["result"] is None, job
        assert set(job["error"]) - {"details"} == {"code", "message", "index"}, job  # details: some only


def submit_ok(svc: Service, wiki: str, batch: dict[str, Any]) -> str:
    """Submit a batch that must be accepted; its job id."""
    answer = svc.submit(wiki, batch)
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["status"] == "queued", body
    assert body["status_url"].endswith(f"/v1/jobs/{body['job_id']}"), body
    return str(body["job_id"])


def create(path: str, content: str = "x\n") -> dict[str, Any]:
    """A create edit."""
    return {"op": "create", "path": path, "content": content}


# -- health ----------------------------------------------------------------------------------------------


def test_healthz_and_readyz(svc: Service) -> None:
    """/healthz answers exactly {"status": "ok"} and /readyz answers 200 while Redis is up."""
    health = svc.client.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    assert svc.client.get("/readyz").status_code == 200


# -- wikis -----------------------------------------------------------------------------------------------


def test_create_wiki_makes_one_initial_commit(svc: Service) -> None:
    """POST /v1/wikis answers 201 and the wiki has one commit holding exactly index.md, log.md, schema.md."""
    wiki = f"fresh-{next(_serial)}"
    answer = svc.client.post("/v1/wikis", json={"id": wiki})
    assert answer.status_code == 201, answer.text
    created_head = answer.json()["head"]
    history = commits(svc, wiki)
    assert len(history) == 1
    assert history[0]["commit"] == created_head
    assert history[0]["job_id"] is None
    files = pages(svc, wiki)
    assert set(files) == INITIAL_FILES
    for path, entry in files.items():
        page = svc.page(wiki, path)
        assert page["commit"] == created_head
        assert page["encoding"] == "utf-8"
        assert entry["version"] == page["version"] == git_version(page["content"].encode())
        assert entry["size"] == page["size"] == len(page["content"].encode())
    assert jobs(svc, wiki) == []


def test_create_existing_wiki_is_409(svc: Service) -> None:
    """Creating a wiki twice answers 409 WIKI_EXISTS and leaves the first one as it was."""
    wiki = new_wiki(svc, "twice")
    before = head(svc, wiki)
    expect_error(svc.client.post("/v1/wikis", json={"id": wiki}), 409, "WIKI_EXISTS")
    assert head(svc, wiki) == before
    assert len(commits(svc, wiki)) == 1


@pytest.mark.parametrize(
    "wiki_id",
    ["Upper", "-dash-first", ".dot-first", "_under", "a" * 64, "has/slash", "has space", "", "é"],
)
def test_create_wiki_with_invalid_id_is_422(svc: Service, wiki_id: str) -> None:
    """A wiki id outside ^[a-z0-9][a-z0-9._-]{0,62}$ is refused with 422 and creates nothing."""
    expect_error(svc.client.post("/v1/wikis", json={"id": wiki_id}), 422, "INVALID_BATCH")
    assert wiki_id not in {w["id"] for w in svc.client.get("/v1/wikis").json()["wikis"]}


@pytest.mark.parametrize(
    "body", [b"{}", b'{"id": 5}', b'{"id": "ok-id", "extra": 1}', b"not json", b"[]"], ids=str
)
def test_create_wiki_with_bad_body_is_422(svc: Service, body: bytes) -> None:
    """A POST /v1/wikis body that is not {"id": "<string>"} is refused with 422 INVALID_BATCH."""
    answer = svc.client.post("/v1/wikis", content=body, headers={"content-type": "application/json"})
    expect_error(answer, 422, "INVALID_BATCH")
    assert "ok-id" not in {w["id"] for w in svc.client.get("/v1/wikis").json()["wikis"]}


def test_concurrent_creates_of_one_wiki(svc: Service) -> None:
    """Of eight simultaneous creates of one wiki exactly one answers 201 and the others 409 WIKI_EXISTS."""
    wiki = f"race-{next(_serial)}"

    def post(_: int) -> httpx.Response:
        with httpx.Client(base_url=svc.url, timeout=30) as client:
            return client.post("/v1/wikis", json={"id": wiki})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, range(8)))
    assert sorted(a.status_code for a in answers) == [201] + [409] * 7, [a.text for a in answers]
    for answer in answers:
        if answer.status_code == 409:
            expect_error(answer, 409, "WIKI_EXISTS")
    created = next(a for a in answers if a.status_code == 201).json()["head"]
    assert commits(svc, wiki) == commits(svc, wiki, 1)
    assert head(svc, wiki) == created
    assert [w["id"] for w in svc.client.get("/v1/wikis").json()["wikis"]].count(wiki) == 1


def test_create_wiki_longest_valid_id(svc: Service) -> None:
    """A 63-character id made of every allowed kind of character is accepted."""
    wiki = f"z{next(_serial)}.a_b-c".ljust(63, "9")
    assert len(wiki) == 63
    answer = svc.client.post("/v1/wikis", json={"id": wiki})
    assert answer.status_code == 201, answer.text


def test_list_wikis_gives_id_and_head(svc: Service) -> None:
    """GET /v1/wikis lists every wiki once with its current head."""
    one = new_wiki(svc, "listed")
    two = new_wiki(svc, "listed")
    seed(svc, two, {"wiki/a.md": "a\n"})
    answer = svc.client.get("/v1/wikis")
    assert answer.status_code == 200
    listed = answer.json()["wikis"]
    ids = [w["id"] for w in listed]
    assert len(ids) == len(set(ids))
    heads = {w["id"]: w["head"] for w in listed}
    assert heads[one] == head(svc, one)
    assert heads[two] == head(svc, two)
    assert all(set(w) >= {"id", "head"} for w in listed)


# -- pages -----------------------------------------------------------------------------------------------


def test_pages_listing_entries_match_files(svc: Service) -> None:
    """The pages listing names every file at the head with its git blob version and byte size."""
    wiki = new_wiki(svc, "listing")
    files = {"wiki/a.md": "a\n", "wiki/deep/er/b.md": "béé\n", "raw/src.txt": ""}
    seed(svc, wiki, files)
    listed = pages(svc, wiki)
    assert set(listed) == INITIAL_FILES | set(files)
    for path, content in files.items():
        assert listed[path] == {
            "path": path,
            "version": git_version(content.encode()),
            "size": len(content.encode()),
        }


def test_pages_paging_walks_every_file_once(svc: Service) -> None:
    """Following next_cursor with a small limit returns every file exactly once, with and without prefix."""
    wiki = new_wiki(svc, "paging")
    files = {f"wiki/p/{i:02d}.md": f"page {i}\n" for i in range(23)}
    files |= {"wiki/pa.md": "pa\n", "wiki/q.md": "q\n", "raw/src.txt": "src\n"}
    seed(svc, wiki, files)
    everything = INITIAL_FILES | set(files)

    def walk(limit: int, prefix: str | None) -> list[str]:
        seen: list[str] = []
        cursor: str | None = None
        requests = 0
        while True:
            params: dict[str, Any] = {"limit": limit}
            if prefix is not None:
                params["prefix"] = prefix
            if cursor is not None:
                params["cursor"] = cursor
            answer = svc.client.get(f"/v1/wikis/{wiki}/pages", params=params)
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
        seen = walk(limit, None)
        assert set(seen) == everything, limit
        assert all(n == 1 for n in Counter(seen).values()), Counter(seen)
    under_p = walk(4, "wiki/p/")
    assert sorted(under_p) == sorted(p for p in files if p.startswith("wiki/p/"))
    assert len(under_p) == len(set(under_p)) == 23
    assert set(walk(2, "wiki/")) == {p for p in files if p.startswith("wiki/")}
    assert walk(3, "raw/") == ["raw/src.txt"]
    assert walk(3, "nothing/") == []


def test_pages_of_missing_wiki_is_404(svc: Service) -> None:
    """Listing pages, commits or jobs of a wiki that does not exist answers 404 WIKI_NOT_FOUND."""
    for url in (
        "/v1/wikis/no-such-wiki/pages",
        "/v1/wikis/no-such-wiki/commits",
        "/v1/wikis/no-such-wiki/jobs",
    ):
        expect_error(svc.client.get(url), 404, "WIKI_NOT_FOUND")


def test_read_utf8_page_is_byte_exact(svc: Service) -> None:
    """A UTF-8 page reads back byte-exact with its git version, size, head commit and version ETag."""
    wiki = new_wiki(svc, "read")
    text = "# Ünïcødé 😀\r\nline two\twith tab\n\x00nul and no newline at the end  "
    path = "wiki/dossier été/page one.md"
    seed(svc, wiki, {path: text})
    answer = svc.client.get(f"/v1/wikis/{wiki}/pages/{path}")
    assert answer.status_code == 200, answer.text
    page = answer.json()
    data = text.encode("utf-8")
    assert page == {
        "path": path,
        "version": git_version(data),
        "content": text,
        "encoding": "utf-8",
        "size": len(data),
        "commit": head(svc, wiki),
    }
    assert answer.headers["etag"].strip('"') == page["version"]
    real_git = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True)
    assert real_git.stdout.decode().strip() == page["version"]


def test_read_binary_page_is_base64(svc: Service) -> None:
    """Bytes that are not UTF-8, created with encoding base64, read back as base64 with their git version."""
    wiki = new_wiki(svc, "binary")
    blobs = {
        "raw/all-bytes.bin": bytes(range(256)),
        "raw/latin1.txt": "café\n".encode("latin-1"),
        "wiki/utf8-sent-as-base64.md": "plain é\n".encode(),
    }
    job = svc.apply(
        wiki,
        {
            "message": "bytes",
            "edits": [
                {"op": "create", "path": p, "content": base64.b64encode(d).decode(), "encoding": "base64"}
                for p, d in blobs.items()
            ],
        },
    )
    assert job["status"] == "succeeded", job
    for path, data in blobs.items():
        answer = svc.client.get(f"/v1/wikis/{wiki}/pages/{path}")
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert page["version"] == git_version(data)
        assert page["size"] == len(data)
        assert answer.headers["etag"].strip('"') == page["version"]
        if path.endswith(".md"):
            assert page["encoding"] == "utf-8"
            assert page["content"].encode() == data
        else:
            assert page["encoding"] == "base64"
            assert base64.b64decode(page["content"]) == data


def test_read_missing_page_and_missing_wiki(svc: Service) -> None:
    """A missing page answers 404 NOT_FOUND; a page of a missing wiki answers 404 WIKI_NOT_FOUND."""
    wiki = new_wiki(svc, "missing")
    expect_error(svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/nope.md"), 404, "NOT_FOUND")
    expect_error(svc.client.get(f"/v1/wikis/{wiki}/pages/wiki"), 404, "NOT_FOUND")
    expect_error(svc.client.get("/v1/wikis/no-such-wiki/pages/index.md"), 404, "WIKI_NOT_FOUND")


# -- search ----------------------------------------------------------------------------------------------


def test_search_is_literal_and_case_insensitive(svc: Service) -> None:
    """GET /search finds a literal string case-insensitively at the head, naming path, line and text."""
    wiki = new_wiki(svc, "search")
    seed(
        svc,
        wiki,
        {
            "wiki/redis.md": "# Redis\nkeys live in memory\nREDIS persists with AOF\n",
            "wiki/other.md": "nothing here\nsee redis.md for more\n",
            "wiki/regex.md": "a.b is literal\naxb is not a match\n",
            "raw/notes.txt": "Redis notes\n",
        },
    )
    answer = svc.client.get(f"/v1/wikis/{wiki}/search", params={"q": "redis"})
    assert answer.status_code == 200, answer.text
    found = {(m["path"], m["line"], m["text"]) for m in answer.json()["matches"]}
    assert found == {
        ("wiki/redis.md", 1, "# Redis"),
        ("wiki/redis.md", 3, "REDIS persists with AOF"),
        ("wiki/other.md", 2, "see redis.md for more"),
        ("raw/notes.txt", 1, "Redis notes"),
    }
    literal = svc.client.get(f"/v1/wikis/{wiki}/search", params={"q": "a.b"}).json()["matches"]
    assert [(m["path"], m["line"]) for m in literal] == [("wiki/regex.md", 1)]
    limited = svc.client.get(f"/v1/wikis/{wiki}/search", params={"q": "REDIS", "limit": 2}).json()["matches"]
    assert len(limited) == 2
    assert {(m["path"], m["line"], m["text"]) for m in limited} <= found
    assert svc.client.get(f"/v1/wikis/{wiki}/search", params={"q": "absent"}).json() == {"matches": []}
    expect_error(svc.client.get("/v1/wikis/no-such-wiki/search", params={"q": "x"}), 404, "WIKI_NOT_FOUND")


# -- commits ---------------------------------------------------------------------------------------------


def test_commits_newest_first_with_author_time_job(svc: Service) -> None:
    """/commits lists commits newest first, each with message, author, time and the job that made it."""
    wiki = new_wiki(svc, "history")
    job_ids = []
    for i in range(3):
        job = svc.apply(wiki, {"message": f"step {i}", "edits": [create(f"wiki/s{i}.md")]})
        assert job["status"] == "succeeded", job
        job_ids.append(job["job_id"])
    history = commits(svc, wiki)
    assert len(history) == 4
    assert [c["job_id"] for c in history] == [*reversed(job_ids), None]
    for i, entry in enumerate(history[:3]):
        assert set(entry) >= {"commit", "message", "author", "time", "job_id"}
        assert entry["message"].startswith(f"step {2 - i}")
        assert f"Wikiq-Job: {entry['job_id']}" in entry["message"]
        assert "wikiq user" in json.dumps(entry["author"])
    times = [datetime.fromisoformat(c["time"]) for c in history]
    assert times == sorted(times, reverse=True)
    assert commits(svc, wiki, 2) == history[:2]


# -- batches: success ------------------------------------------------------------------------------------


def test_every_op_in_one_batch(svc: Service) -> None:
    """create, overwrite, replace, delete and rename succeed together: one commit, one applied entry each."""
    wiki = new_wiki(svc, "ops")
    v = seed(svc, wiki, {"wiki/over.md": "old\n", "wiki/rep.md": "a b b b\n", "wiki/del.md": "bye\n"})
    v |= seed(svc, wiki, {"wiki/ren.md": "moving\n", "wiki/rep2.md": "x y\n"})
    index = svc.page(wiki, "index.md")
    log = svc.page(wiki, "log.md")
    before = head(svc, wiki)
    binary = b"\x89PNG\r\n\x1a\n\xff\x00"
    batch = {
        "message": "all ops\n\nwith a body",
        "edits": [
            create("wiki/new.md", "# New\n"),
            {
                "op": "overwrite",
                "path": "wiki/over.md",
                "content": "new\n",
                "expected_version": v["wiki/over.md"],
            },
            {
                "op": "replace",
                "path": "wiki/rep.md",
                "old": "b",
                "new": "c",
                "replace_all": True,
                "expected_count": 3,
                "expected_version": v["wiki/rep.md"],
            },
            {"op": "delete", "path": "wiki/del.md", "expected_version": v["wiki/del.md"]},
            {
                "op": "rename",
                "path": "wiki/ren.md",
                "new_path": "wiki/moved/ren.md",
                "expected_version": v["wiki/ren.md"],
            },
            {
                "op": "replace",
                "path": "wiki/rep2.md",
                "old": "y",
                "new": "why",
                "expected_version": v["wiki/rep2.md"],
            },
            {
                "op": "create",
                "path": "raw/img.png",
                "content": base64.b64encode(binary).decode(),
                "encoding": "base64",
            },
            {
                "op": "overwrite",
                "path": "index.md",
                "content": "# Index\n- new\n",
                "expected_version": index["version"],
            },
            {
                "op": "replace",
                "path": "log.md",
                "old": "\n",
                "new": "\n- all ops\n",
                "expected_count": log["content"].count("\n"),
                "replace_all": True,
                "expected_version": log["version"],
            },
            {
                "op": "create",
                "path": "wiki/encoded.md",
                "content": base64.b64encode(b"text\n").decode(),
                "encoding": "base64",
            },
        ],
    }
    new_log = log["content"].replace("\n", "\n- all ops\n")
    job = svc.apply(wiki, batch)
    check_job(job, wiki, "succeeded")
    assert job["webhook"] is None
    expected = [
        {"index": 0, "op": "create", "path": "wiki/new.md", "version": git_version(b"# New\n")},
        {"index": 1, "op": "overwrite", "path": "wiki/over.md", "version": git_version(b"new\n")},
        {"index": 2, "op": "replace", "path": "wiki/rep.md", "version": git_version(b"a c c c\n")},
        {"index": 3, "op": "delete", "path": "wiki/del.md", "version": None},
        {
            "index": 4,
            "op": "rename",
            "path": "wiki/ren.md",
            "new_path": "wiki/moved/ren.md",
            "version": v["wiki/ren.md"],
        },
        {"index": 5, "op": "replace", "path": "wiki/rep2.md", "version": git_version(b"x why\n")},
        {"index": 6, "op": "create", "path": "raw/img.png", "version": git_version(binary)},
        {"index": 7, "op": "overwrite", "path": "index.md", "version": git_version(b"# Index\n- new\n")},
        {"index": 8, "op": "replace", "path": "log.md", "version": git_version(new_log.encode())},
        {"index": 9, "op": "create", "path": "wiki/encoded.md", "version": git_version(b"text\n")},
    ]
    assert job["result"]["applied"] == expected
    history = commits(svc, wiki, 2)
    assert history[0]["commit"] == job["result"]["commit"]
    assert history[1]["commit"] == before
    assert history[0]["job_id"] == job["job_id"]
    assert history[0]["message"].startswith("all ops\n\nwith a body")
    assert history[0]["message"].rstrip().endswith(f"Wikiq-Job: {job['job_id']}")
    listed = pages(svc, wiki)
    assert "wiki/del.md" not in listed and "wiki/ren.md" not in listed
    for entry in expected:
        path = entry.get("new_path", entry["path"])
        if entry["version"] is not None:
            page = svc.page(wiki, str(path))
            assert page["version"] == entry["version"] == listed[str(path)]["version"]
            assert page["commit"] == job["result"]["commit"]
    assert svc.page(wiki, "wiki/moved/ren.md")["content"] == "moving\n"
    assert base64.b64decode(svc.page(wiki, "raw/img.png")["content"]) == binary
    assert svc.page(wiki, "log.md")["content"] == new_log
    expect_error(svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/del.md"), 404, "NOT_FOUND")
    expect_error(svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/ren.md"), 404, "NOT_FOUND")


def test_chained_edits_on_one_path(svc: Service) -> None:
    """Edits chain on one path; expected_version is ignored for a path created earlier in the batch."""
    wiki = new_wiki(svc, "chain")
    v = seed(svc, wiki, {"wiki/base.md": "one\n"})
    job = svc.apply(
        wiki,
        {
            "message": "chain",
            "edits": [
                create("wiki/c.md", "1\n"),
                {"op": "replace", "path": "wiki/c.md", "old": "1", "new": "2"},
                {"op": "overwrite", "path": "wiki/c.md", "content": "3\n", "expected_version": "0" * 40},
                {"op": "rename", "path": "wiki/c.md", "new_path": "wiki/d.md"},
                {"op": "replace", "path": "wiki/d.md", "old": "3", "new": "4"},
                {
                    "op": "replace",
                    "path": "wiki/base.md",
                    "old": "one",
                    "new": "two",
                    "expected_version": v["wiki/base.md"],
                },
                {
                    "op": "replace",
                    "path": "wiki/base.md",
                    "old": "two",
                    "new": "three",
                    "expected_version": v["wiki/base.md"],
                },
                create("wiki/gone.md"),
                {"op": "delete", "path": "wiki/gone.md"},
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    applied = job["result"]["applied"]
    assert [a["index"] for a in applied] == list(range(9))
    assert [a["version"] for a in applied] == [
        git_version(b"1\n"),
        git_version(b"2\n"),
        git_version(b"3\n"),
        git_version(b"3\n"),
        git_version(b"4\n"),
        git_version(b"two\n"),
        git_version(b"three\n"),
        git_version(b"x\n"),
        None,
    ]
    assert svc.page(wiki, "wiki/d.md")["content"] == "4\n"
    assert svc.page(wiki, "wiki/base.md")["content"] == "three\n"
    listed = pages(svc, wiki)
    assert "wiki/c.md" not in listed and "wiki/gone.md" not in listed
    assert len(commits(svc, wiki)) == 3


def test_rename_with_link_fixes_is_one_commit(svc: Service) -> None:
    """A rename plus the replaces that fix links to it land as exactly one commit on the previous head."""
    wiki = new_wiki(svc, "links")
    v = seed(
        svc,
        wiki,
        {
            "wiki/redis.md": "# Redis\n",
            "wiki/a.md": "see [[redis]] and [[redis]]\n",
            "wiki/b.md": "also [[redis]]\n",
        },
    )
    before = commits(svc, wiki)
    job = svc.apply(
        wiki,
        {
            "message": "Rename redis to valkey",
            "edits": [
                {
                    "op": "rename",
                    "path": "wiki/redis.md",
                    "new_path": "wiki/valkey.md",
                    "expected_version": v["wiki/redis.md"],
                },
                {
                    "op": "replace",
                    "path": "wiki/a.md",
                    "old": "[[redis]]",
                    "new": "[[valkey]]",
                    "replace_all": True,
                    "expected_count": 2,
                    "expected_version": v["wiki/a.md"],
                },
                {
                    "op": "replace",
                    "path": "wiki/b.md",
                    "old": "[[redis]]",
                    "new": "[[valkey]]",
                    "expected_version": v["wiki/b.md"],
                },
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    after = commits(svc, wiki)
    assert len(after) == len(before) + 1
    assert after[1:] == before
    assert after[0]["commit"] == job["result"]["commit"]
    assert svc.page(wiki, "wiki/a.md")["content"] == "see [[valkey]] and [[valkey]]\n"
    assert svc.page(wiki, "wiki/b.md")["content"] == "also [[valkey]]\n"
    assert svc.page(wiki, "wiki/valkey.md")["content"] == "# Redis\n"
    assert "wiki/redis.md" not in pages(svc, wiki)


def test_file_where_a_folder_was(svc: Service) -> None:
    """Deleting a folder's last file and creating a file of the folder's name in one batch succeeds."""
    wiki = new_wiki(svc, "refold")
    v = seed(svc, wiki, {"wiki/dir/x.md": "x\n"})
    job = svc.apply(
        wiki,
        {
            "message": "fold",
            "edits": [
                {"op": "delete", "path": "wiki/dir/x.md", "expected_version": v["wiki/dir/x.md"]},
                create("wiki/dir", "now a file\n"),
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    assert svc.page(wiki, "wiki/dir")["content"] == "now a file\n"
    assert not any(p.startswith("wiki/dir/") for p in pages(svc, wiki))


def test_longest_paths_are_accepted(svc: Service) -> None:
    """A 255-byte segment and a 4096-byte path are accepted, committed and readable."""
    wiki = new_wiki(svc, "long")
    segment = "wiki/" + "s" * 255
    deep = "wiki/" + "/".join(["d" * 200] * 20)
    deep += "/" + "e" * (4096 - len(deep) - 1)
    assert len(deep.encode()) == 4096
    job = svc.apply(wiki, {"message": "long", "edits": [create(segment, "s\n"), create(deep, "d\n")]})
    check_job(job, wiki, "succeeded")
    assert svc.page(wiki, segment)["content"] == "s\n"
    assert svc.page(wiki, deep)["content"] == "d\n"


def test_commit_job_id_is_the_real_job_even_if_message_names_another(svc: Service) -> None:
    """A batch message containing a Wikiq-Job line does not change which job /commits says made the commit."""
    wiki = new_wiki(svc, "trailer")
    job = svc.apply(
        wiki,
        {"message": "sneaky\n\nWikiq-Job: 01FAKEFAKEFAKEFAKEFAKEFAKE", "edits": [create("wiki/t.md")]},
    )
    check_job(job, wiki, "succeeded")
    latest = commits(svc, wiki, 1)[0]
    assert latest["commit"] == job["result"]["commit"]
    assert latest["message"].startswith("sneaky\n\nWikiq-Job: 01FAKEFAKEFAKEFAKEFAKEFAKE")
    assert latest["message"].rstrip().endswith(f"Wikiq-Job: {job['job_id']}")
    assert latest["job_id"] == job["job_id"], latest


# -- batches: failures in the worker ---------------------------------------------------------------------

SEED = {"wiki/a.md": "alpha beta beta\n", "wiki/b.md": "bee\n", "wiki/dir/x.md": "x\n"}
Edits = Callable[[dict[str, str]], list[dict[str, Any]]]
WORKER_FAILURES: list[tuple[str, Edits, str, int | tuple[int, int]]] = [
    ("create-existing", lambda v: [create("wiki/a.md")], "PATH_EXISTS", 1),
    (
        "rename-onto-existing",
        lambda v: [
            {"op": "rename", "path": "wiki/b.md", "new_path": "wiki/a.md", "expected_version": v["wiki/b.md"]}
        ],
        "PATH_EXISTS",
        1,
    ),
    ("create-created", lambda v: [create("wiki/fresh.md")], "PATH_EXISTS", 1),
    (
        "overwrite-missing",
        lambda v: [{"op": "overwrite", "path": "wiki/none.md", "content": "x", "expected_version": "1" * 40}],
        "NOT_FOUND",
        1,
    ),
    (
        "delete-missing",
        lambda v: [{"op": "delete", "path": "wiki/none.md", "expected_version": "1" * 40}],
        "NOT_FOUND",
        1,
    ),
    (
        "rename-missing",
        lambda v: [
            {"op": "rename", "path": "wiki/none.md", "new_path": "wiki/n2.md", "expected_version": "1" * 40}
        ],
        "NOT_FOUND",
        1,
    ),
    (
        "replace-missing",
        lambda v: [{"op": "replace", "path": "wiki/none.md", "old": "a", "new": "b"}],
        "NOT_FOUND",
        1,
    ),
    (
        "replace-after-delete",
        lambda v: [
            {"op": "delete", "path": "wiki/b.md", "expected_version": v["wiki/b.md"]},
            {"op": "replace", "path": "wiki/b.md", "old": "bee", "new": "b"},
        ],
        "NOT_FOUND",
        2,
    ),
    (
        "replace-renamed-away",
        lambda v: [
            {
                "op": "rename",
                "path": "wiki/b.md",
                "new_path": "wiki/c.md",
                "expected_version": v["wiki/b.md"],
            },
            {"op": "delete", "path": "wiki/b.md", "expected_version": v["wiki/b.md"]},
        ],
        "NOT_FOUND",
        2,
    ),
    (
        "overwrite-no-version",
        lambda v: [{"op": "overwrite", "path": "wiki/a.md", "content": "x"}],
        "VERSION_REQUIRED",
        1,
    ),
    (
        "replace-no-version",
        lambda v: [{"op": "replace", "path": "wiki/a.md", "old": "alpha", "new": "x"}],
        "VERSION_REQUIRED",
        1,
    ),
    ("delete-no-version", lambda v: [{"op": "delete", "path": "wiki/a.md"}], "VERSION_REQUIRED", 1),
    (
        "rename-no-version",
        lambda v: [{"op": "rename", "path": "wiki/a.md", "new_path": "wiki/z.md"}],
        "VERSION_REQUIRED",
        1,
    ),
    (
        "overwrite-wrong-version",
        lambda v: [
            {"op": "overwrite", "path": "wiki/a.md", "content": "x", "expected_version": v["wiki/b.md"]}
        ],
        "VERSION_MISMATCH",
        1,
    ),
    (
        "delete-wrong-version",
        lambda v: [{"op": "delete", "path": "wiki/a.md", "expected_version": "0" * 40}],
        "VERSION_MISMATCH",
        1,
    ),
    (
        "replace-old-missing",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "gamma",
                "new": "x",
                "expected_version": v["wiki/a.md"],
            }
        ],
        "OLD_NOT_FOUND",
        1,
    ),
    (
        "replace-old-wrong-case",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "ALPHA",
                "new": "x",
                "expected_version": v["wiki/a.md"],
            }
        ],
        "OLD_NOT_FOUND",
        1,
    ),
    (
        "replace-old-twice",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "beta",
                "new": "x",
                "expected_version": v["wiki/a.md"],
            }
        ],
        "OLD_NOT_UNIQUE",
        1,
    ),
    (
        "replace-count-wrong",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "beta",
                "new": "x",
                "replace_all": True,
                "expected_count": 3,
                "expected_version": v["wiki/a.md"],
            }
        ],
        "COUNT_MISMATCH",
        1,
    ),
    (
        "replace-count-unique-wrong",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "alpha",
                "new": "x",
                "expected_count": 2,
                "expected_version": v["wiki/a.md"],
            }
        ],
        "COUNT_MISMATCH",
        1,
    ),
    ("file-under-file", lambda v: [create("wiki/a.md/under.md")], "PATH_CONFLICT", 1),
    ("file-where-folder-is", lambda v: [create("wiki/dir")], "PATH_CONFLICT", 1),
    (
        "rename-onto-folder",
        lambda v: [
            {"op": "rename", "path": "wiki/b.md", "new_path": "wiki/dir", "expected_version": v["wiki/b.md"]}
        ],
        "PATH_CONFLICT",
        1,
    ),
    (
        "file-and-file-under-it-in-one-batch",
        lambda v: [create("wiki/n.md"), create("wiki/n.md/y.md")],
        "PATH_CONFLICT",
        (1, 2),
    ),
]


@pytest.mark.parametrize(
    ("edits", "code", "index"), [pytest.param(e, c, i, id=n) for n, e, c, i in WORKER_FAILURES]
)
def test_worker_failure_is_failed_job_and_commits_nothing(
    svc: Service, edits: Edits, code: str, index: int | tuple[int, int]
) -> None:
    """A batch breaking a repository rule is a failed job with {code, message, index}; nothing is written."""
    wiki = new_wiki(svc, "fail")
    versions = seed(svc, wiki, SEED)
    before_head = head(svc, wiki)
    before_pages = pages(svc, wiki)
    batch = {"message": "doomed", "edits": [create("wiki/fresh.md", "fresh\n"), *edits(versions)]}
    job_id = submit_ok(svc, wiki, batch)
    job = svc.wait(job_id)
    check_job(job, wiki, "failed")
    assert job["result"] is None
    assert job["error"]["code"] == code, job
    assert job["error"]["index"] in (index if isinstance(index, tuple) else (index,)), job
    assert isinstance(job["error"]["message"], str) and job["error"]["message"], job
    assert head(svc, wiki) == before_head
    assert pages(svc, wiki) == before_pages
    assert len(commits(svc, wiki)) == 2
    assert jobs(svc, wiki)[0]["job_id"] == job_id
    assert jobs(svc, wiki)[0]["status"] == "failed"


# -- batches: refused at submission ----------------------------------------------------------------------


def batch_of(*edits: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A batch whose edit 0 is a valid create, followed by ``edits``."""
    return {"message": "static", "edits": [create("wiki/ok.md"), *edits], **extra}


def raw_json(text: str) -> bytes:
    """A JSON body given as its exact text (for bodies the JSON encoder would not produce)."""
    return text.encode("utf-8")


def too_many_edits() -> dict[str, Any]:
    """1001 edits."""
    return {"message": "many", "edits": [create(f"wiki/m{i}.md") for i in range(1001)]}


def too_much_content() -> dict[str, Any]:
    """One byte over 8 MiB of content, split across two edits."""
    return {
        "message": "big",
        "edits": [create("wiki/big1.md", "x" * (4 * MIB)), create("wiki/big2.md", "y" * (4 * MIB + 1))],
    }


def too_much_base64() -> dict[str, Any]:
    """One byte over 8 MiB of decoded content, sent as base64."""
    data = base64.b64encode(b"\x00" * (8 * MIB + 1)).decode()
    return {
        "message": "big",
        "edits": [{"op": "create", "path": "raw/big.bin", "content": data, "encoding": "base64"}],
    }


Body = dict[str, Any] | bytes | Callable[[], dict[str, Any]]
STATIC_FAILURES: list[tuple[str, Body, int, str, int | None]] = [
    ("unknown-batch-field", batch_of(colour="red"), 422, "INVALID_BATCH", None),
    ("unknown-edit-field", batch_of({**create("wiki/x.md"), "colour": "red"}), 422, "INVALID_BATCH", 1),
    ("unknown-op", batch_of({"op": "move", "path": "wiki/x.md"}), 422, "INVALID_BATCH", 1),
    ("missing-op", batch_of({"path": "wiki/x.md", "content": "x"}), 422, "INVALID_BATCH", 1),
    ("missing-message", {"edits": [create("wiki/x.md")]}, 422, "INVALID_BATCH", None),
    ("missing-edits", {"message": "m"}, 422, "INVALID_BATCH", None),
    ("missing-content", batch_of({"op": "create", "path": "wiki/x.md"}), 422, "INVALID_BATCH", 1),
    ("missing-new", batch_of({"op": "replace", "path": "wiki/x.md", "old": "a"}), 422, "INVALID_BATCH", 1),
    ("missing-new-path", batch_of({"op": "rename", "path": "wiki/x.md"}), 422, "INVALID_BATCH", 1),
    ("missing-path", batch_of({"op": "delete"}), 422, "INVALID_BATCH", 1),
    (
        "content-not-string",
        batch_of({"op": "create", "path": "wiki/x.md", "content": 5}),
        422,
        "INVALID_BATCH",
        1,
    ),
    (
        "path-not-string",
        batch_of({"op": "create", "path": ["wiki/x.md"], "content": "x"}),
        422,
        "INVALID_BATCH",
        1,
    ),
    ("edits-not-list", {"message": "m", "edits": {"op": "create"}}, 422, "INVALID_BATCH", None),
    ("edit-not-object", batch_of("create"), 422, "INVALID_BATCH", 1),  # type: ignore[arg-type]
    (
        "replace-all-not-bool",
        batch_of({"op": "replace", "path": "wiki/x.md", "old": "a", "new": "b", "replace_all": "some"}),
        422,
        "INVALID_BATCH",
        1,
    ),
    (
        "expected-count-zero",
        batch_of({"op": "replace", "path": "wiki/x.md", "old": "a", "new": "b", "expected_count": 0}),
        422,
        "INVALID_BATCH",
        1,
    ),
    (
        "version-not-hex",
        batch_of({"op": "delete", "path": "wiki/x.md", "expected_version": "abc"}),
        422,
        "INVALID_BATCH",
        1,
    ),
    ("encoding-unknown", batch_of({**create("wiki/x.md"), "encoding": "latin-1"}), 422, "INVALID_BATCH", 1),
    ("dry-run-not-bool", batch_of(dry_run=[1]), 422, "INVALID_BATCH", None),
    ("body-is-list", b"[]", 422, "INVALID_BATCH", None),
    ("body-malformed", b'{"message": "m", "edits": [', 422, "INVALID_BATCH", None),
    ("body-empty", b"", 422, "INVALID_BATCH", None),
    (
        "empty-old",
        batch_of({"op": "replace", "path": "wiki/x.md", "old": "", "new": "b"}),
        422,
        "INVALID_BATCH",
        1,
    ),
    ("no-edits", {"message": "m", "edits": []}, 422, "BATCH_EMPTY", None),
    ("1001-edits", too_many_edits, 413, "TOO_MANY_EDITS", None),
    ("8MiB-plus-one", too_much_content, 413, "BATCH_TOO_LARGE", None),
    ("8MiB-plus-one-base64", too_much_base64, 413, "BATCH_TOO_LARGE", None),
    ("path-empty", batch_of(create("")), 422, "INVALID_PATH", 1),
    ("path-absolute", batch_of(create("/wiki/x.md")), 422, "INVALID_PATH", 1),
    ("path-dotdot", batch_of(create("wiki/../x.md")), 422, "INVALID_PATH", 1),
    ("path-dot", batch_of(create("wiki/./x.md")), 422, "INVALID_PATH", 1),
    ("path-backslash", batch_of(create("wiki\\x.md")), 422, "INVALID_PATH", 1),
    ("path-control", batch_of(create("wiki/x\x01.md")), 422, "INVALID_PATH", 1),
    ("path-newline", batch_of(create("wiki/x\n.md")), 422, "INVALID_PATH", 1),
    ("path-trailing-slash", batch_of(create("wiki/x/")), 422, "INVALID_PATH", 1),
    ("path-double-slash", batch_of(create("wiki//x.md")), 422, "INVALID_PATH", 1),
    ("path-dot-git", batch_of(create("wiki/.git/config")), 422, "INVALID_PATH", 1),
    ("path-dot-git-case", batch_of(create("wiki/.GiT/config")), 422, "INVALID_PATH", 1),
    ("path-too-long", batch_of(create("wiki/" + "/".join(["d" * 200] * 21))), 422, "INVALID_PATH", 1),
    ("segment-too-long", batch_of(create("wiki/" + "s" * 256)), 422, "INVALID_PATH", 1),
    (
        "rename-target-invalid",
        batch_of({"op": "rename", "path": "wiki/ok.md", "new_path": "../x.md"}),
        422,
        "INVALID_PATH",
        1,
    ),
    ("zone-outside", batch_of(create("other/x.md")), 422, "ZONE_FORBIDDEN", 1),
    ("zone-root-file", batch_of(create("README.md")), 422, "ZONE_FORBIDDEN", 1),
    (
        "zone-raw-overwrite",
        batch_of({"op": "overwrite", "path": "raw/x", "content": "x", "expected_version": "1" * 40}),
        422,
        "ZONE_FORBIDDEN",
        1,
    ),
    (
        "zone-raw-replace",
        batch_of({"op": "replace", "path": "raw/x", "old": "a", "new": "b"}),
        422,
        "ZONE_FORBIDDEN",
        1,
    ),
    (
        "zone-raw-delete",
        batch_of({"op": "delete", "path": "raw/x", "expected_version": "1" * 40}),
        422,
        "ZONE_FORBIDDEN",
        1,
    ),
    (
        "zone-rename-from-raw",
        batch_of({"op": "rename", "path": "raw/x", "new_path": "wiki/x"}),
        422,
        "ZONE_FORBIDDEN",
        1,
    ),
    (
        "zone-rename-into-raw",
        batch_of({"op": "rename", "path": "wiki/ok.md", "new_path": "raw/ok.md"}),
        422,
        "ZONE_FORBIDDEN",
        1,
    ),
    (
        "zone-rename-outside",
        batch_of({"op": "rename", "path": "wiki/ok.md", "new_path": "ok.md"}),
        422,
        "ZONE_FORBIDDEN",
        1,
    ),
    (
        "protected-delete-index",
        batch_of({"op": "delete", "path": "index.md", "expected_version": "1" * 40}),
        422,
        "PROTECTED_PATH",
        1,
    ),
    ("protected-delete-schema", batch_of({"op": "delete", "path": "schema.md"}), 422, "PROTECTED_PATH", 1),
    (
        "protected-rename-log",
        batch_of({"op": "rename", "path": "log.md", "new_path": "wiki/log.md"}),
        422,
        "PROTECTED_PATH",
        1,
    ),
    (
        "bad-base64",
        batch_of({**create("raw/x.bin", "not base64!!"), "encoding": "base64"}),
        422,
        "INVALID_ENCODING",
        1,
    ),
    (
        "bad-base64-padding",
        batch_of({**create("raw/x.bin", "abc"), "encoding": "base64"}),
        422,
        "INVALID_ENCODING",
        1,
    ),
    (
        "lone-surrogate-content",
        raw_json(
            '{"message": "m", "edits": [{"op": "create", "path": "wiki/x.md", "content": "a\\ud800b"}]}'
        ),
        422,
        "INVALID_ENCODING",
        0,
    ),
    (
        "lone-surrogate-new",
        raw_json(
            '{"message": "m", "edits": [{"op": "replace", "path": "wiki/x.md", "old": "a", "new": "\\udfff"}]'
            "}"
        ),
        422,
        "INVALID_ENCODING",
        0,
    ),
    ("webhook-not-http", batch_of(webhook={"url": "ftp://example.org/hook"}), 422, "WEBHOOK_REFUSED", None),
]


@pytest.mark.parametrize(
    ("body", "status", "code", "index"), [pytest.param(b, s, c, i, id=n) for n, b, s, c, i in STATIC_FAILURES]
)
def test_static_failure_answers_at_submission(
    svc: Service, body: Body, status: int, code: str, index: int | None
) -> None:
    """A batch refused without the repository answers at submission with its code and queues nothing."""
    wiki = new_wiki(svc, "static")
    before = head(svc, wiki)
    url = f"/v1/wikis/{wiki}/batches"
    if isinstance(body, bytes):
        answer = svc.client.post(url, content=body, headers={"content-type": "application/json"})
    else:
        answer = svc.client.post(url, json=body() if callable(body) else body)
    expect_error(answer, status, code, index)
    assert jobs(svc, wiki) == []
    assert head(svc, wiki) == before


def test_limits_are_inclusive(svc: Service) -> None:
    """Exactly 1000 edits, and exactly 8 MiB of decoded content, are accepted (as dry runs)."""
    wiki = new_wiki(svc, "limits")
    many = {"message": "many", "dry_run": True, "edits": [create(f"wiki/m{i}.md") for i in range(1000)]}
    job = svc.wait(submit_ok(svc, wiki, many))
    check_job(job, wiki, "succeeded")
    assert len(job["result"]["applied"]) == 1000
    data = base64.b64encode(b"\x00" * (8 * MIB)).decode()
    big = {
        "message": "big",
        "dry_run": True,
        "edits": [{"op": "create", "path": "raw/big.bin", "content": data, "encoding": "base64"}],
    }
    job = svc.wait(submit_ok(svc, wiki, big))
    check_job(job, wiki, "succeeded")
    assert job["result"]["applied"][0]["version"] == git_version(b"\x00" * (8 * MIB))
    assert len(commits(svc, wiki)) == 1


def test_batch_to_missing_wiki_is_404(svc: Service) -> None:
    """A batch to a wiki that does not exist answers 404 WIKI_NOT_FOUND and queues nothing for that id."""
    wiki = f"later-{next(_serial)}"
    expect_error(svc.submit(wiki, batch_of()), 404, "WIKI_NOT_FOUND")
    expect_error(svc.submit("Not_An_Id", batch_of()), 404, "WIKI_NOT_FOUND")
    svc.create_wiki(wiki)
    assert jobs(svc, wiki) == []
    assert len(commits(svc, wiki)) == 1


# -- dry runs --------------------------------------------------------------------------------------------


def test_dry_run_reports_without_committing(svc: Service) -> None:
    """dry_run: true reports the applied list with commit null and makes no commit."""
    wiki = new_wiki(svc, "dry")
    v = seed(svc, wiki, {"wiki/a.md": "a\n"})
    before = commits(svc, wiki)
    before_pages = pages(svc, wiki)
    job = svc.apply(
        wiki,
        {
            "message": "try",
            "dry_run": True,
            "edits": [
                create("wiki/new.md", "n\n"),
                {
                    "op": "overwrite",
                    "path": "wiki/a.md",
                    "content": "b\n",
                    "expected_version": v["wiki/a.md"],
                },
                {
                    "op": "rename",
                    "path": "wiki/a.md",
                    "new_path": "wiki/c.md",
                    "expected_version": v["wiki/a.md"],
                },
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    assert job["result"]["commit"] is None
    assert job["result"]["applied"] == [
        {"index": 0, "op": "create", "path": "wiki/new.md", "version": git_version(b"n\n")},
        {"index": 1, "op": "overwrite", "path": "wiki/a.md", "version": git_version(b"b\n")},
        {
            "index": 2,
            "op": "rename",
            "path": "wiki/a.md",
            "new_path": "wiki/c.md",
            "version": git_version(b"b\n"),
        },
    ]
    assert commits(svc, wiki) == before
    assert pages(svc, wiki) == before_pages


def test_dry_run_that_would_fail_reports_the_failure(svc: Service) -> None:
    """A dry run that breaks a rule is a failed job with the error, and nothing is committed."""
    wiki = new_wiki(svc, "dryfail")
    v = seed(svc, wiki, {"wiki/a.md": "a\n"})
    before = commits(svc, wiki)
    job = svc.apply(
        wiki,
        {
            "message": "try",
            "dry_run": True,
            "edits": [
                create("wiki/new.md"),
                {
                    "op": "replace",
                    "path": "wiki/a.md",
                    "old": "zzz",
                    "new": "b",
                    "expected_version": v["wiki/a.md"],
                },
            ],
        },
    )
    check_job(job, wiki, "failed")
    assert job["error"]["code"] == "OLD_NOT_FOUND"
    assert job["error"]["index"] == 1
    assert commits(svc, wiki) == before


# -- idempotency -----------------------------------------------------------------------------------------


def test_idempotency_key_same_body_same_job(svc: Service) -> None:
    """The same Idempotency-Key with the same body answers 200 with the same job, and makes one commit."""
    wiki = new_wiki(svc, "idem")
    key = {"Idempotency-Key": f"key-{wiki}"}
    batch = {"message": "once", "edits": [create("wiki/once.md")]}
    first = svc.submit(wiki, batch, **key)
    assert first.status_code == 202, first.text
    job_id = first.json()["job_id"]
    again = svc.submit(wiki, batch, **key)
    assert again.status_code == 200, again.text
    assert again.json()["job_id"] == job_id
    job = svc.wait(job_id)
    check_job(job, wiki, "succeeded")
    reordered = {"edits": batch["edits"], "message": "once"}
    after = svc.submit(wiki, reordered, **key)
    assert after.status_code == 200, after.text
    assert after.json()["job_id"] == job_id
    assert after.json()["status"] == "succeeded"
    history = commits(svc, wiki)
    assert len(history) == 2
    assert history[0]["job_id"] == job_id
    assert [j["job_id"] for j in jobs(svc, wiki)] == [job_id]


def test_idempotency_key_of_refused_submission_is_not_kept(svc: Service) -> None:
    """A submission refused at submission does not bind its Idempotency-Key; a valid body may use it next."""
    wiki = new_wiki(svc, "idemr")
    key = {"Idempotency-Key": f"key-{wiki}"}
    expect_error(svc.submit(wiki, {"message": "bad", "edits": []}, **key), 422, "BATCH_EMPTY")
    answer = svc.submit(wiki, {"message": "good", "edits": [create("wiki/g.md")]}, **key)
    assert answer.status_code == 202, answer.text
    assert svc.wait(answer.json()["job_id"])["status"] == "succeeded"


def test_idempotency_key_other_body_is_conflict(svc: Service) -> None:
    """The same Idempotency-Key with another body answers 422 IDEMPOTENCY_CONFLICT and queues nothing."""
    wiki = new_wiki(svc, "idemx")
    key = {"Idempotency-Key": f"key-{wiki}"}
    job_id = svc.submit(wiki, {"message": "one", "edits": [create("wiki/one.md")]}, **key).json()["job_id"]
    svc.wait(job_id)
    other = {"message": "two", "edits": [create("wiki/two.md")]}
    expect_error(svc.submit(wiki, other, **key), 422, "IDEMPOTENCY_CONFLICT")
    expect_error(svc.submit(wiki, {**other, "dry_run": True}, **key), 422, "IDEMPOTENCY_CONFLICT")
    assert [j["job_id"] for j in jobs(svc, wiki)] == [job_id]
    assert len(commits(svc, wiki)) == 2
    fresh = svc.submit(wiki, other, **{"Idempotency-Key": f"other-{wiki}"})
    assert fresh.status_code == 202, fresh.text
    assert svc.wait(fresh.json()["job_id"])["status"] == "succeeded"


# -- jobs ------------------------------------------------------------------------------------------------


def test_long_poll_answers_when_the_job_finishes(svc: Service) -> None:
    """GET /v1/jobs/{id}?wait=60 on a quick job answers with the finished job, not after the wait.

    The client gives up after 30 s: answering only once the 60 s wait is over would fail the request.
    """
    wiki = new_wiki(svc, "poll")
    submitted = svc.submit(wiki, {"message": "quick", "edits": [create("wiki/q.md")]})
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["job_id"]
    answer = svc.client.get(submitted.json()["status_url"], params={"wait": 60}, timeout=30)
    assert answer.status_code == 200, answer.text
    check_job(answer.json(), wiki, "succeeded")
    assert answer.json()["job_id"] == job_id
    again = svc.client.get(f"/v1/jobs/{job_id}", params={"wait": 60}, timeout=30)
    assert svc.client.get(f"/v1/jobs/{job_id}").json() == answer.json()
    assert again.json() == answer.json()


def test_long_poll_wait_over_60_is_capped(svc: Service) -> None:
    """A wait of more than 60 s is capped at 60 (contract: "at most 60"), not refused."""
    wiki = new_wiki(svc, "cap")
    job = svc.apply(wiki, {"message": "quick", "edits": [create("wiki/q.md")]})
    answer = svc.client.get(f"/v1/jobs/{job['job_id']}", params={"wait": 120}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json() == job


def test_unknown_job_is_404(svc: Service) -> None:
    """GET or DELETE of a job that does not exist answers 404 JOB_NOT_FOUND."""
    for job_id in ("01HZZZZZZZZZZZZZZZZZZZZZZZ", "nope"):
        expect_error(svc.client.get(f"/v1/jobs/{job_id}"), 404, "JOB_NOT_FOUND")
        expect_error(svc.client.get(f"/v1/jobs/{job_id}", params={"wait": 1}), 404, "JOB_NOT_FOUND")
        expect_error(svc.client.delete(f"/v1/jobs/{job_id}"), 404, "JOB_NOT_FOUND")


def test_cancel_finished_job_is_409(svc: Service) -> None:
    """DELETE of a finished job answers 409 NOT_CANCELLABLE and leaves the job as it was."""
    wiki = new_wiki(svc, "late")
    ok = svc.apply(wiki, {"message": "ok", "edits": [create("wiki/x.md")]})
    failed = svc.apply(wiki, {"message": "bad", "edits": [create("wiki/x.md")]})
    for job in (ok, failed):
        expect_error(svc.client.delete(f"/v1/jobs/{job['job_id']}"), 409, "NOT_CANCELLABLE")
        assert svc.client.get(f"/v1/jobs/{job['job_id']}").json() == job


def test_cancel_queued_job_never_runs(svc: Service) -> None:
    """DELETE of a queued job answers 200 cancelled; it never runs, and the next job of its wiki does."""
    wiki = new_wiki(svc, "cancel")
    before = head(svc, wiki)
    workers = len(svc.workers)
    for process in list(svc.workers):
        svc.kill_worker(process)
    try:
        job_id = submit_ok(svc, wiki, {"message": "never", "edits": [create("wiki/never.md")]})
        started = time.monotonic()
        polled = svc.client.get(f"/v1/jobs/{job_id}", params={"wait": 0.5})
        assert time.monotonic() - started >= 0.4
        assert polled.status_code == 200
        check_job(polled.json(), wiki, "queued")
        assert polled.json()["started_at"] is None and polled.json()["result"] is None
        answer = svc.client.delete(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        cancelled = answer.json()
        check_job(cancelled, wiki, "cancelled")
        assert cancelled["job_id"] == job_id
        assert cancelled["result"] is None and cancelled["started_at"] is None
        repeated = svc.client.delete(f"/v1/jobs/{job_id}")
        assert repeated.status_code == 200, repeated.text
        assert repeated.json()["status"] == "cancelled"
    finally:
        for _ in range(workers):
            svc.start_worker()
    after = svc.apply(wiki, {"message": "after", "edits": [create("wiki/after.md")]})
    check_job(after, wiki, "succeeded")
    final = svc.client.get(f"/v1/jobs/{job_id}", params={"wait": 1}).json()
    assert final["status"] == "cancelled"
    assert final["started_at"] is None and final["result"] is None
    history = commits(svc, wiki)
    assert [c["commit"] for c in history] == [after["result"]["commit"], before]
    expect_error(svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/never.md"), 404, "NOT_FOUND")
    assert [j["job_id"] for j in jobs(svc, wiki, status="cancelled")] == [job_id]


def test_wiki_jobs_newest_first_with_status_filter(svc: Service) -> None:
    """GET /v1/wikis/{wiki}/jobs lists the wiki's jobs newest first, filtered by status and cut by limit."""
    wiki = new_wiki(svc, "joblist")
    other = new_wiki(svc, "joblist")
    outcomes = []
    for i, path in enumerate(["wiki/a.md", "wiki/a.md", "wiki/b.md", "wiki/b.md"]):
        job = svc.apply(wiki, {"message": f"j{i}", "edits": [create(path)]})
        outcomes.append((job["job_id"], job["status"]))
    svc.apply(other, {"message": "elsewhere", "edits": [create("wiki/a.md")]})
    assert [s for _, s in outcomes] == ["succeeded", "failed", "succeeded", "failed"]
    listed = jobs(svc, wiki)
    assert [j["job_id"] for j in listed] == [i for i, _ in reversed(outcomes)]
    for job in listed:
        check_job(job, wiki, job["status"])
    assert [j["job_id"] for j in jobs(svc, wiki, status="failed")] == [outcomes[3][0], outcomes[1][0]]
    assert [j["job_id"] for j in jobs(svc, wiki, status="succeeded")] == [outcomes[2][0], outcomes[0][0]]
    assert jobs(svc, wiki, status="queued") == []
    assert [j["job_id"] for j in jobs(svc, wiki, limit=1)] == [outcomes[3][0]]
    assert [j["job_id"] for j in jobs(svc, wiki, status="succeeded", limit=1)] == [outcomes[2][0]]
    expect_error_shape(svc.client.get(f"/v1/wikis/{wiki}/jobs", params={"status": "done"}), 422)


def test_batches_of_one_wiki_apply_in_submission_order(svc: Service) -> None:
    """30 batches submitted quickly to one wiki become 30 commits in submission order."""
    wiki = new_wiki(svc, "order")
    submitted = [
        submit_ok(svc, wiki, {"message": f"n{i}", "edits": [create(f"wiki/n{i}.md")]}) for i in range(30)
    ]
    for job_id in submitted:
        assert svc.wait(job_id)["status"] == "succeeded"
    history = commits(svc, wiki)
    assert len(history) == 31
    assert [c["job_id"] for c in reversed(history[:30])] == submitted
    assert [c["message"].split("\n")[0] for c in reversed(history[:30])] == [f"n{i}" for i in range(30)]
    assert [j["job_id"] for j in jobs(svc, wiki, limit=30)] == list(reversed(submitted))
    assert {f"wiki/n{i}.md" for i in range(30)} <= set(pages(svc, wiki))


# -- routing and error shape -----------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/nope", "/v1", "/v1/nope", "/v1/wikis/x/nope", "/v1/jobs"])
def test_unknown_route_is_404_error_object(svc: Service, url: str) -> None:
    """An unknown route answers 404 with the contract's error object."""
    expect_error_shape(svc.client.get(url), 404)


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("PUT", "/v1/wikis"),
        ("DELETE", "/v1/wikis"),
        ("POST", "/healthz"),
        ("GET", "/v1/wikis/x/batches"),
        ("POST", "/v1/jobs/x"),
        ("PATCH", "/v1/wikis/x/pages/index.md"),
    ],
)
def test_wrong_method_is_405_error_object(svc: Service, method: str, url: str) -> None:
    """A known route with the wrong method answers 405 with the contract's error object."""
    expect_error_shape(svc.client.request(method, url), 405)


def test_bad_query_parameters_answer_error_object(svc: Service) -> None:
    """Out-of-range query parameters answer 422 with the contract's error object."""
    wiki = new_wiki(svc, "query")
    cases: list[tuple[str, dict[str, str | int]]] = [
        (f"/v1/wikis/{wiki}/pages", {"limit": 0}),
        (f"/v1/wikis/{wiki}/pages", {"limit": "many"}),
        (f"/v1/wikis/{wiki}/commits", {"limit": -1}),
        (f"/v1/wikis/{wiki}/jobs", {"limit": 0}),
        ("/v1/jobs/x", {"wait": -1}),
    ]
    for url, params in cases:
        expect_error_shape(svc.client.get(url, params=params), 422)


# -- readiness without Redis (its own deployment: it stops Redis) ----------------------------------------


def test_readyz_is_503_without_redis(tmp_path: Path) -> None:
    """/readyz answers 503 while Redis is down and 200 again once it is back; /healthz stays 200."""
    service = Service(tmp_path).start(workers=0)
    try:
        service.redis.stop()
        assert service.client.get("/readyz").status_code == 503
        assert service.client.get("/healthz").json() == {"status": "ok"}
        service.redis.start()
        assert service.client.get("/readyz").status_code == 200
    finally:
        service.stop()
