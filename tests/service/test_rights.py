"""Many principals, one service, in process: tokens, rights per wiki, path prefixes, hidden-vs-missing 404s,
job rights, identities, webhook URL redaction and rate limits.

The module's deployment reads a tokens file (TOML) naming these principals (tokens are the dict's values):

- ``root``: admin on every wiki;  ``alice``: write on ``wa``;  ``bob``: read on ``wb``;
- ``carol``: write on ``wa`` limited to ``wiki/team-a/``;
- ``twin-a`` and ``twin-b``: write on ``wa``, both named "Twin".
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.gitutil import git_text
from tests.principals import tokens_toml
from tests.service.harness import Deployment, create, expect_error

TOKENS = {
    "root": "tok-root",
    "alice": "tok-alice",
    "bob": "tok-bob",
    "carol": "tok-carol",
    "twin-a": "tok-twin-a",
    "twin-b": "tok-twin-b",
}
ENTRIES = {
    "root": ("Root Admin", '{ "*" = "admin" }', ""),
    "alice": ("Alice Agent", '{ "wa" = "write" }', ""),
    "bob": ("Bob Reader", '{ "wb" = "read" }', ""),
    "carol": ("Carol Team", '{ "wa" = "write" }', 'prefixes = { "wa" = ["wiki/team-a/"] }'),
    "twin-a": ("Twin", '{ "wa" = "write" }', ""),
    "twin-b": ("Twin", '{ "wa" = "write" }', ""),
}


def SETTINGS(root: Path) -> dict[str, Any]:  # the module attribute conftest.py reads
    """The deployment reads a tokens file; redelivery is limited to once a minute per job."""
    tokens = root / "tokens.toml"
    tokens.write_text(tokens_toml(TOKENS, ENTRIES))
    return {"tokens_file": tokens, "redeliver_interval_seconds": 60}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def wikis(dep: Deployment) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """The wikis ``wa`` and ``wb`` (made by root); a client per principal, plus ``none`` and ``nobody``."""
    clients: dict[str, httpx.AsyncClient] = {who: dep.as_(token) for who, token in TOKENS.items()}
    clients["none"] = dep.as_(None)
    clients["nobody"] = dep.as_("tok-unknown")
    dep.client = clients["root"]
    for wiki in ("wa", "wb"):
        assert (await clients["root"].post("/v1/wikis", json={"id": wiki})).status_code == 201
    yield clients


def dry(path: str = "wiki/x.md") -> dict[str, Any]:
    """A dry-run batch creating ``path``."""
    return {"message": "m", "edits": [create(path)], "dry_run": True}


READS = [
    "/v1/wikis/{w}/pages",
    "/v1/wikis/{w}/pages/index.md",
    "/v1/wikis/{w}/commits",
    "/v1/wikis/{w}/jobs",
    "/v1/wikis/{w}/search?q=index",
]
TABLE: list[tuple[str, str, str, str, int]] = []
for _path in READS:
    TABLE += [
        ("none", "wa", "GET", _path, 401),
        ("nobody", "wa", "GET", _path, 401),
        ("root", "wa", "GET", _path, 200),
        ("root", "missing", "GET", _path, 404),
        ("alice", "wa", "GET", _path, 200),
        ("alice", "wb", "GET", _path, 404),
        ("alice", "missing", "GET", _path, 404),
        ("bob", "wb", "GET", _path, 200),
        ("bob", "wa", "GET", _path, 404),
        ("carol", "wa", "GET", _path, 200),
    ]
TABLE += [
    ("none", "wa", "POST", "/v1/wikis/{w}/batches", 401),
    ("nobody", "wa", "POST", "/v1/wikis/{w}/batches", 401),
    ("root", "wa", "POST", "/v1/wikis/{w}/batches", 202),
    ("alice", "wa", "POST", "/v1/wikis/{w}/batches", 202),
    ("alice", "wb", "POST", "/v1/wikis/{w}/batches", 404),
    ("bob", "wb", "POST", "/v1/wikis/{w}/batches", 403),
    ("bob", "wa", "POST", "/v1/wikis/{w}/batches", 404),
    ("carol", "wa", "POST", "/v1/wikis/{w}/batches", 403),
    ("root", "missing", "POST", "/v1/wikis/{w}/batches", 404),
    ("none", "-", "GET", "/v1/wikis", 401),
    ("none", "-", "POST", "/v1/wikis", 401),
]
CODES = {401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "WIKI_NOT_FOUND"}


@pytest.mark.both  # bearer tokens over a socket, the tokens file read by the API process
@pytest.mark.parametrize(("who", "wiki", "method", "path", "status"), TABLE)
async def test_access_table(
    wikis: dict[str, httpx.AsyncClient], who: str, wiki: str, method: str, path: str, status: int
) -> None:
    """Each principal x wiki x endpoint answers the expected 200/202/401/403/404 with the error object."""
    body = (dry() if "batches" in path else {"id": "nope-new"}) if method == "POST" else None
    answer = await wikis[who].request(method, path.format(w=wiki), json=body)
    assert answer.status_code == status, answer.text
    if status >= 400:
        expect_error(answer, status, CODES[status])
    if status == 401:
        assert answer.headers["www-authenticate"] == "Bearer"


async def test_denied_wiki_answers_like_a_missing_one(wikis: dict[str, httpx.AsyncClient]) -> None:
    """For a caller who may not read it, an existing wiki gets the same answer as a missing one."""
    alice = wikis["alice"]
    for suffix in ("pages/index.md", "pages", "commits", "jobs", "search?q=x"):
        existing = await alice.get(f"/v1/wikis/wb/{suffix}")
        missing = await alice.get(f"/v1/wikis/nope/{suffix}")
        assert existing.status_code == missing.status_code == 404
        assert existing.json()["error"]["code"] == missing.json()["error"]["code"] == "WIKI_NOT_FOUND"
        assert existing.json()["error"]["message"].replace("wb", "nope") == missing.json()["error"]["message"]
    hidden = await alice.post("/v1/wikis/wb/batches", json=dry())
    absent = await alice.post("/v1/wikis/nope/batches", json=dry())
    assert hidden.status_code == absent.status_code == 404
    assert hidden.json()["error"]["message"].replace("wb", "nope") == absent.json()["error"]["message"]


async def test_wiki_list_shows_only_readable_wikis(wikis: dict[str, httpx.AsyncClient]) -> None:
    """GET /v1/wikis lists only the wikis the caller may read."""
    assert [w["id"] for w in (await wikis["alice"].get("/v1/wikis")).json()["wikis"]] == ["wa"]
    assert [w["id"] for w in (await wikis["bob"].get("/v1/wikis")).json()["wikis"]] == ["wb"]
    assert {"wa", "wb"} <= {w["id"] for w in (await wikis["root"].get("/v1/wikis")).json()["wikis"]}


async def test_creating_a_wiki_needs_admin(wikis: dict[str, httpx.AsyncClient]) -> None:
    """Only a principal with admin may create a wiki; others get 403 whether or not it exists."""
    expect_error(await wikis["alice"].post("/v1/wikis", json={"id": "by-alice"}), 403, "FORBIDDEN")
    expect_error(await wikis["alice"].post("/v1/wikis", json={"id": "wa"}), 403, "FORBIDDEN")
    assert (await wikis["root"].post("/v1/wikis", json={"id": "by-root"})).status_code == 201
    assert "by-alice" not in {w["id"] for w in (await wikis["root"].get("/v1/wikis")).json()["wikis"]}


async def test_jobs_of_an_unreadable_wiki_are_invisible(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """A job of wb is 404 JOB_NOT_FOUND to a token that may not read wb: for GET, DELETE and redeliver."""
    job_id = await dep.submit_ok("wb", {"message": "m", "edits": [create("wiki/j.md")]}, wikis["root"])
    await dep.wait(job_id, wikis["root"])
    for method, path in [
        ("GET", f"/v1/jobs/{job_id}"),
        ("DELETE", f"/v1/jobs/{job_id}"),
        ("POST", f"/v1/jobs/{job_id}/webhook/redeliver"),
    ]:
        expect_error(await wikis["alice"].request(method, path), 404, "JOB_NOT_FOUND")
    assert (await wikis["bob"].get(f"/v1/jobs/{job_id}")).status_code == 200
    expect_error(await wikis["bob"].delete(f"/v1/jobs/{job_id}"), 403, "FORBIDDEN")


async def test_each_principal_is_the_author_of_its_commits(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Two principals writing to one wiki: each commit carries its submitter as author; wikiq commits."""
    jobs = {}
    for who, path in [("alice", "wiki/by-alice.md"), ("carol", "wiki/team-a/by-carol.md")]:
        batch = {"message": f"by {who}", "edits": [create(path, who)]}
        jobs[who] = await dep.submit_ok("wa", batch, wikis[who])
    for job_id in jobs.values():
        assert (await dep.wait(job_id, wikis["root"]))["status"] == "succeeded"
    commits = {c["job_id"]: c for c in (await wikis["root"].get("/v1/wikis/wa/commits")).json()["commits"]}
    assert commits[jobs["alice"]]["author"] == {"name": "Alice Agent", "email": "alice@example.org"}
    assert commits[jobs["carol"]]["author"] == {"name": "Carol Team", "email": "carol@example.org"}
    committer = git_text(dep.repo("wa"), "log", "-1", "--format=%cn <%ce>", commits[jobs["carol"]]["commit"])
    assert committer.strip() == "wikiq <wikiq@localhost>"


@pytest.mark.parametrize("path", ["wiki/team-b/x.md", "index.md", "wiki/team-ab/x.md", "wiki/team-a"])
async def test_path_prefix_refuses_the_whole_batch_without_naming_the_path(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient], path: str
) -> None:
    """A writer limited to wiki/team-a/ is refused (403) a batch touching another path, which is not named."""
    carol = wikis["carol"]
    batch = {"message": "m", "edits": [create("wiki/team-a/fine.md"), create(path)]}
    before = (await carol.get("/v1/wikis/wa/jobs")).json()["jobs"]
    answer = await carol.post("/v1/wikis/wa/batches", json=batch)
    error = expect_error(answer, 403, "FORBIDDEN", None)
    assert path not in answer.text and "team" not in error["message"]
    assert (await carol.get("/v1/wikis/wa/jobs")).json()["jobs"] == before


async def test_inside_the_prefix_a_limited_writer_writes(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Every path of the batch under the writer's prefix: accepted and committed."""
    batch = {"message": "m", "edits": [create("wiki/team-a/one.md"), create("wiki/team-a/deep/two.md")]}
    job = await dep.wait(await dep.submit_ok("wa", batch, wikis["carol"]), wikis["carol"])
    assert job["status"] == "succeeded", job


async def test_rename_target_outside_prefix_is_refused(wikis: dict[str, httpx.AsyncClient]) -> None:
    """A rename whose new_path leaves the caller's prefix is refused like any other denied path."""
    edit = {"op": "rename", "path": "wiki/team-a/a.md", "new_path": "wiki/b.md", "expected_version": "0" * 40}
    answer = await wikis["carol"].post("/v1/wikis/wa/batches", json={"message": "m", "edits": [edit]})
    expect_error(answer, 403, "FORBIDDEN")


async def test_a_writer_cancels_its_own_job_but_not_anothers(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Alice's queued job: carol and a twin get 403, bob (who cannot read wa) 404; Alice cancels it."""
    async with dep.worker.paused():
        job_id = await dep.submit_ok(
            "wa", {"message": "m", "edits": [create("wiki/alice.md")]}, wikis["alice"]
        )
        for who in ("carol", "twin-a"):
            expect_error(await wikis[who].delete(f"/v1/jobs/{job_id}"), 403, "FORBIDDEN")
        expect_error(await wikis["bob"].delete(f"/v1/jobs/{job_id}"), 404, "JOB_NOT_FOUND")
        assert (await wikis["alice"].get(f"/v1/jobs/{job_id}")).json()["status"] == "queued"
        cancelled = await wikis["alice"].delete(f"/v1/jobs/{job_id}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


async def test_an_admin_cancels_anyones_job(dep: Deployment, wikis: dict[str, httpx.AsyncClient]) -> None:
    """The wiki's admin may cancel a writer's queued job."""
    async with dep.worker.paused():
        job_id = await dep.submit_ok(
            "wa", {"message": "m", "edits": [create("wiki/x-admin.md")]}, wikis["alice"]
        )
        answer = await wikis["root"].delete(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200 and answer.json()["status"] == "cancelled"


async def test_webhook_urls_are_redacted_for_other_readers(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Another writer sees only the URL's origin; the submitter and an admin see it whole."""
    url = "http://127.0.0.1:9/redact/capability-123;p=capability-789?token=capability-456"
    batch = {"message": "m", "edits": [create("wiki/redact.md")], "webhook": {"url": url}}
    job_id = await dep.submit_ok("wa", batch, wikis["alice"])
    seen = await dep.wait(job_id, wikis["twin-a"])
    assert seen["webhook"]["url"] == "http://127.0.0.1:9/"
    assert "capability" not in (await wikis["twin-a"].get("/v1/wikis/wa/jobs")).text
    assert (await wikis["alice"].get(f"/v1/jobs/{job_id}")).json()["webhook"]["url"] == url
    assert (await wikis["root"].get(f"/v1/jobs/{job_id}")).json()["webhook"]["url"] == url


async def test_redelivery_is_the_submitters_and_once_per_interval(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Only the submitter or an admin redelivers (others 403); a second one within the interval is 429."""
    batch = {"message": "m", "edits": [create("wiki/hooked.md")], "webhook": {"url": "http://127.0.0.1:9/h"}}
    job_id = await dep.submit_ok("wa", batch, wikis["alice"])
    assert (await dep.wait(job_id, wikis["alice"]))["status"] == "succeeded"
    expect_error(await wikis["twin-a"].post(f"/v1/jobs/{job_id}/webhook/redeliver"), 403, "FORBIDDEN")
    assert (await wikis["alice"].post(f"/v1/jobs/{job_id}/webhook/redeliver")).status_code == 202
    again = await wikis["alice"].post(f"/v1/jobs/{job_id}/webhook/redeliver")
    expect_error(again, 429, "RATE_LIMITED")
    assert int(again.headers["retry-after"]) >= 1
    by_admin = await wikis["root"].post(f"/v1/jobs/{job_id}/webhook/redeliver")
    expect_error(by_admin, 429, "RATE_LIMITED")  # per job, not per caller


async def test_only_a_checks_submitter_amends_it(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Alice's failed check: a twin who learns its token cannot amend it (PLAN_NOT_FOUND, as an unknown
    plan), nor see the token when it reads that check; nothing is written. Alice amends it."""
    bad = {"op": "delete", "path": "wiki/absent.md", "expected_version": "0" * 40}
    job_id = await dep.submit_ok("wa", {"message": "m", "edits": [bad], "dry_run": True}, wikis["alice"])
    failed = await dep.wait(job_id, wikis["alice"])
    token = failed["error"]["plan"]
    assert "plan" not in (await dep.wait(job_id, wikis["twin-a"]))["error"]
    amend = {"plan": token, "amend": {"0": create("wiki/amended.md")}}
    for who in ("twin-a", "root"):
        expect_error(await dep.submit("wa", amend, wikis[who]), 404, "PLAN_NOT_FOUND")
    assert "wiki/amended.md" not in (await wikis["alice"].get("/v1/wikis/wa/pages")).text
    mine = await dep.wait(await dep.submit_ok("wa", amend, wikis["alice"]), wikis["alice"])
    assert mine["status"] == "succeeded", mine
    assert (await wikis["alice"].get("/v1/wikis/wa/pages/wiki/amended.md")).status_code == 200


async def test_principals_sharing_a_name_share_no_idempotency_key(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Two tokens named "Twin": one Idempotency-Key with different batches makes two jobs, no conflict."""
    jobs = []
    for who in ("twin-a", "twin-b"):
        answer = await dep.submit("wa", dry(f"wiki/{who}.md"), wikis[who], {"Idempotency-Key": "shared"})
        assert answer.status_code == 202, answer.text
        jobs.append(answer.json()["job_id"])
    assert jobs[0] != jobs[1]


async def test_a_tokens_file_that_breaks_or_disappears_fails_closed(
    dep: Deployment, wikis: dict[str, httpx.AsyncClient]
) -> None:
    """Broken syntax: every token is refused; fixed: they work again; moved away: refused; back: accepted."""
    tokens = Path(str(dep.settings.tokens_file))
    alice = wikis["alice"]
    try:
        tokens.write_text(tokens_toml(TOKENS, ENTRIES) + "\n[[principals]\nbroken = ")
        os.utime(tokens, (1, 1))  # a different mtime even within the same clock tick
        expect_error(await alice.get("/v1/wikis"), 401, "UNAUTHORIZED")
        tokens.write_text(tokens_toml(TOKENS, ENTRIES))
        assert (await alice.get("/v1/wikis")).status_code == 200
        away = tokens.with_suffix(".away")
        tokens.rename(away)
        expect_error(await alice.get("/v1/wikis"), 401, "UNAUTHORIZED")
        away.rename(tokens)
        assert (await alice.get("/v1/wikis")).status_code == 200
    finally:
        tokens.write_text(tokens_toml(TOKENS, ENTRIES))


async def test_rate_limit_answers_429_with_retry_after(fresh: Any) -> None:
    """Past the per-principal submission limit the API answers 429 RATE_LIMITED with Retry-After."""
    async with fresh(rate_limit_submissions=3, rate_limit_window_seconds=30) as limited:
        wiki = await limited.new_wiki("rl")
        statuses = [(await limited.submit(wiki, dry(f"wiki/r{i}.md"))).status_code for i in range(3)]
        assert statuses == [202, 202, 202]
        answer = await limited.submit(wiki, dry("wiki/r9.md"))
        expect_error(answer, 429, "RATE_LIMITED")
        assert 1 <= int(answer.headers["retry-after"]) <= 30
        assert len(await limited.jobs(wiki)) == 3
