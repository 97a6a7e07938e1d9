"""Refactor-grade edits and reads over HTTP against real processes (Redis, the API, workers): the new routes,
dry runs with diff and warnings, refusals at submission, and twenty agents appending to log.md at once."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import httpx

from tests.e2e.service import Service
from tests.gitutil import blob_id

WORKERS = 2
_serial = itertools.count()
PAGES = {
    "wiki/db/redis.md": "# Redis\n\n## Persistence\n\nAOF.\n\n## Clients\n\nSee [[postgres]].\n",
    "wiki/db/postgres.md": "# Postgres\n\nLike [Redis](redis.md).\n```\n[[redis]]\n```\n",
    "wiki/notes.md": "Use [[redis]] and [[db/redis#Clients|clients]].\n",
}


def seeded(svc: Service) -> str:
    """A fresh wiki holding ``PAGES`` and an index linking to them."""
    wiki = f"refactor-{next(_serial)}"
    svc.create_wiki(wiki)
    index = svc.page(wiki, "index.md")
    edits: list[dict[str, Any]] = [{"op": "create", "path": p, "content": c} for p, c in PAGES.items()]
    edits.append(
        {"op": "append", "path": "index.md", "content": "- [[redis]]\n- [[postgres]]\n- [[notes]]\n"}
    )
    assert svc.apply(wiki, {"message": "seed", "edits": edits})["status"] == "succeeded"
    assert svc.page(wiki, "index.md")["version"] != index["version"]
    return wiki


def test_backlinks_many_pages_and_sections(svc: Service) -> None:
    """GET backlinks lists every link to a page outside code; POST pages:read answers pages in order
    with errors per path; ?sections=true answers the heading tree with addresses and versions."""
    wiki = seeded(svc)
    links = svc.client.get(f"/v1/wikis/{wiki}/backlinks", params={"path": "wiki/db/redis.md"})
    assert links.status_code == 200, links.text
    body = links.json()
    assert [(b["path"], b["line"], b["text"]) for b in body["backlinks"]] == [
        ("index.md", 4, "[[redis]]"),
        ("wiki/db/postgres.md", 3, "[Redis](redis.md)"),
        ("wiki/notes.md", 1, "[[redis]]"),
        ("wiki/notes.md", 1, "[[db/redis#Clients|clients]]"),
    ]
    assert body["version"] == blob_id(PAGES["wiki/db/redis.md"].encode()) and body["truncated"] is False
    missing = svc.client.get(f"/v1/wikis/{wiki}/backlinks", params={"path": "wiki/none.md"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"

    many = svc.client.post(
        f"/v1/wikis/{wiki}/pages:read", json={"paths": ["wiki/notes.md", "nope.md", "log.md"]}
    )
    assert many.status_code == 200, many.text
    found = many.json()
    assert [p["path"] for p in found["pages"]] == ["wiki/notes.md", "log.md"]
    assert found["errors"] == [
        {"path": "nope.md", "code": "NOT_FOUND", "message": found["errors"][0]["message"]}
    ]
    too_many = svc.client.post(f"/v1/wikis/{wiki}/pages:read", json={"paths": [f"p{n}" for n in range(101)]})
    assert too_many.status_code == 422 and too_many.json()["error"]["code"] == "INVALID_BATCH"

    page = svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/db/redis.md", params={"sections": "true"}).json()
    assert [(s["address"], s["line"], s["end_line"], s["level"]) for s in page["sections"]] == [
        ("Redis", 1, 9, 1),
        ("Persistence", 3, 6, 2),
        ("Clients", 7, 9, 2),
    ]
    assert "sections" not in svc.page(wiki, "wiki/db/redis.md")


def test_search_regex_prefix_case_cursor_and_versions(svc: Service) -> None:
    """Search takes an RE2 pattern, a prefix, letter case and a cursor; each match has its page version;
    an invalid pattern is 422 PATTERN_INVALID."""
    wiki = seeded(svc)

    def search(**params: Any) -> dict[str, Any]:
        answer = svc.client.get(f"/v1/wikis/{wiki}/search", params=params)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    hits = search(q=r"^## \w+$", regex="true")["matches"]
    assert [(m["path"], m["line"], m["text"]) for m in hits] == [
        ("wiki/db/redis.md", 3, "## Persistence"),
        ("wiki/db/redis.md", 7, "## Clients"),
    ]
    assert hits[0]["version"] == blob_id(PAGES["wiki/db/redis.md"].encode())
    assert [m["path"] for m in search(q="redis", prefix="wiki/db/")["matches"]] == [
        "wiki/db/postgres.md",
        "wiki/db/postgres.md",
        "wiki/db/redis.md",
    ]
    assert [m["line"] for m in search(q="Redis", case_sensitive="true", prefix="wiki/db/")["matches"]] == [
        3,
        1,
    ]
    first = search(q="redis", limit=2)
    assert len(first["matches"]) == 2 and first["next_cursor"]
    rest = search(q="redis", limit=100, cursor=first["next_cursor"])
    assert "next_cursor" not in rest
    everything = search(q="redis", limit=100)["matches"]
    assert first["matches"] + rest["matches"] == everything
    bad = svc.client.get(f"/v1/wikis/{wiki}/search", params={"q": "(x", "regex": "true"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "PATTERN_INVALID"


def test_dry_run_answers_diff_and_warnings_and_commits_nothing(svc: Service) -> None:
    """A dry run of a refactor answers applied, a unified diff per file and warnings; the head stays."""
    wiki = seeded(svc)
    head = svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"]
    batch = {
        "message": "Move db",
        "dry_run": True,
        "edits": [
            {"op": "rename", "path": "wiki/db", "new_path": "wiki/data", "rewrite_links": True},
            {"op": "create", "path": "wiki/new.md", "content": "# New\n\n[[nowhere]]\n"},
            {"op": "append", "path": "log.md", "content": "- moved db\n"},
        ],
    }
    job = svc.apply(wiki, batch)
    assert job["status"] == "succeeded", job
    result = job["result"]
    assert result["commit"] is None
    ops = [(a["op"], a["path"]) for a in result["applied"]]
    assert ("rename", "wiki/db/redis.md") in ops and ("rewrite_links", "wiki/notes.md") in ops
    diffs = {d["path"]: d for d in result["diff"]}
    assert diffs["wiki/data/redis.md"]["old_path"] == "wiki/db/redis.md"
    notes = diffs["wiki/notes.md"]["diff"]
    assert "-Use [[redis]] and [[db/redis#Clients|clients]].\n" in notes
    assert "+Use [[redis]] and [[data/redis#Clients|clients]].\n" in notes
    assert diffs["wiki/new.md"]["diff"].startswith("--- /dev/null\n+++ b/wiki/new.md\n")
    assert sorted((w["code"], w["path"]) for w in result["warnings"]) == [
        ("LINK_BROKEN", "wiki/new.md"),
        ("NOT_IN_INDEX", "wiki/new.md"),
    ]
    assert svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"] == head


def test_static_refusals_of_the_new_ops(svc: Service) -> None:
    """Shape, zone and pattern refusals of the new ops are answered at submission with the edit's index."""
    wiki = seeded(svc)
    cases = [
        ({"op": "append", "path": "raw/x.md", "content": "x"}, 422, "ZONE_FORBIDDEN"),
        (
            {"op": "replace_across", "prefix": "wiki/", "pattern": "(?<=a)b", "new": "c"},
            422,
            "PATTERN_INVALID",
        ),
        ({"op": "replace_across", "prefix": "wiki/", "new": "c"}, 422, "INVALID_BATCH"),
        ({"op": "remove_section", "path": "wiki/notes.md", "heading": " "}, 422, "INVALID_BATCH"),
        ({"op": "frontmatter", "path": "wiki/notes.md"}, 422, "INVALID_BATCH"),
        ({"op": "rename", "path": "wiki/db", "new_path": "elsewhere/db"}, 422, "ZONE_FORBIDDEN"),
    ]
    for edit, status, code in cases:
        body = {"message": "m", "edits": [{"op": "create", "path": "wiki/ok.md", "content": ""}, edit]}
        answer = svc.submit(wiki, body)
        assert answer.status_code == status, (edit, answer.text)
        assert (answer.json()["error"]["code"], answer.json()["error"]["index"]) == (code, 1), edit


def test_chained_versions_and_worker_refusals_name_the_edit(svc: Service) -> None:
    """A batch may chain the versions its own edits produce; a section that is missing fails the job with
    SECTION_NOT_FOUND at its index and nothing is committed."""
    wiki = seeded(svc)
    notes = svc.page(wiki, "wiki/notes.md")
    first = "Use [[redis]] and [[db/redis#Clients|clients]].\nMore.\n"
    chained = {
        "message": "chain",
        "edits": [
            {
                "op": "append",
                "path": "wiki/notes.md",
                "content": "More.\n",
                "expected_version": notes["version"],
            },
            {
                "op": "append",
                "path": "wiki/notes.md",
                "content": "Again.\n",
                "expected_version": blob_id(first.encode()),
            },
        ],
    }
    job = svc.apply(wiki, chained)
    assert job["status"] == "succeeded", job
    assert svc.page(wiki, "wiki/notes.md")["content"] == first + "Again.\n"
    redis = svc.page(wiki, "wiki/db/redis.md")
    log = svc.page(wiki, "log.md")
    missing = {
        "message": "m",
        "edits": [
            {"op": "append", "path": "log.md", "content": "- x\n"},
            {
                "op": "remove_section",
                "path": "wiki/db/redis.md",
                "heading": "Backups",
                "expected_version": redis["version"],
            },
        ],
    }
    job = svc.apply(wiki, missing)
    assert job["status"] == "failed" and (job["error"]["code"], job["error"]["index"]) == (
        "SECTION_NOT_FOUND",
        1,
    )
    assert "Persistence" in job["error"]["message"]
    assert svc.page(wiki, "log.md") == log


def test_twenty_agents_append_to_the_log_at_once(svc: Service) -> None:
    """Twenty agents each submit an append to log.md at the same moment, without versions: every batch
    succeeds (no conflict), every line lands exactly once, one commit each."""
    wiki = seeded(svc)
    before = svc.page(wiki, "log.md")["content"]
    commits_before = len(
        svc.client.get(f"/v1/wikis/{wiki}/commits", params={"limit": 1000}).json()["commits"]
    )
    agents = 20
    start = threading.Barrier(agents)
    jobs: dict[int, dict[str, Any]] = {}

    def agent(number: int) -> None:
        with httpx.Client(base_url=svc.url, timeout=70) as http:
            batch = {
                "message": f"agent {number} logs",
                "edits": [{"op": "append", "path": "log.md", "content": f"- agent {number} was here\n"}],
            }
            start.wait()
            answer = http.post(f"/v1/wikis/{wiki}/batches", json=batch)
            assert answer.status_code == 202, answer.text
            job_id = answer.json()["job_id"]
            while True:
                job = http.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    jobs[number] = job
                    return

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(agents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(jobs) == list(range(agents))
    assert [n for n, job in jobs.items() if job["status"] != "succeeded"] == [], jobs
    log = svc.page(wiki, "log.md")["content"]
    assert log.startswith(before)
    added = log[len(before) :].splitlines()
    assert sorted(added) == sorted(f"- agent {n} was here" for n in range(agents))
    commits = svc.client.get(f"/v1/wikis/{wiki}/commits", params={"limit": 1000}).json()["commits"]
    assert len(commits) == commits_before + agents
    assert {c["job_id"] for c in commits[:agents]} == {job["job_id"] for job in jobs.values()}
