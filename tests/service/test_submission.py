"""Contract section 3 in process, submission: refusals before queueing, limits, dry runs, idempotency.

A refusal at submission answers its status, code and failing index at once and leaves nothing behind: no job
on the wiki's list, no commit. Most tests here share one wiki, since nothing may land on it.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.gitutil import blob_id
from tests.service.harness import Deployment, check_job, create, expect_error
from worker import keys
from worker.jobs.payloads import loads
from worker.service.caller import SINGLE_USER_ID

MIB = 1024 * 1024
SETTINGS = {"max_body_bytes": 24 * MIB}  # room for the 8 MiB content limits to be reached before the body's


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def static_wiki(dep: Deployment) -> AsyncIterator[str]:
    """A wiki no accepted batch ever reaches: its jobs and head must stay as they were."""
    wiki = await dep.new_wiki("static")
    head = await dep.head(wiki)
    yield wiki
    assert await dep.jobs(wiki) == []
    assert await dep.head(wiki) == head


def batch_of(*edits: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A batch whose edit 0 is a valid create, followed by ``edits``."""
    return {"message": "static", "edits": [create("wiki/ok.md"), *edits], **extra}


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


def replace(path: str, **extra: Any) -> dict[str, Any]:
    """A replace edit of ``a`` by ``b``."""
    return {"op": "replace", "path": path, "old": "a", "new": "b", **extra}


Body = dict[str, Any] | bytes | Callable[[], dict[str, Any]]
STATIC_FAILURES: list[tuple[str, Body, int, str, int | None]] = [
    ("unknown-batch-field", batch_of(colour="red"), 422, "INVALID_BATCH", None),
    ("unknown-edit-field", batch_of({**create("wiki/x.md"), "colour": "red"}), 422, "INVALID_BATCH", 1),
    ("unknown-op", batch_of({"op": "move", "path": "wiki/x.md"}), 422, "INVALID_BATCH", 1),
    ("missing-op", batch_of({"path": "wiki/x.md", "content": "x"}), 422, "INVALID_BATCH", 1),
    ("missing-message", {"edits": [create("wiki/x.md")]}, 422, "INVALID_BATCH", None),
    ("empty-message", {"message": "", "edits": [create("wiki/x.md")]}, 422, "INVALID_BATCH", None),
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
    ("replace-all-not-bool", batch_of(replace("wiki/x.md", replace_all="some")), 422, "INVALID_BATCH", 1),
    ("expected-count-zero", batch_of(replace("wiki/x.md", expected_count=0)), 422, "INVALID_BATCH", 1),
    (
        "version-not-hex",
        batch_of({"op": "delete", "path": "wiki/x.md", "expected_version": "abc"}),
        422,
        "INVALID_BATCH",
        1,
    ),
    (
        "version-upper-hex",
        batch_of({"op": "delete", "path": "wiki/x.md", "expected_version": "A" * 40}),
        422,
        "INVALID_BATCH",
        1,
    ),
    ("encoding-unknown", batch_of({**create("wiki/x.md"), "encoding": "latin-1"}), 422, "INVALID_BATCH", 1),
    ("dry-run-not-bool", batch_of(dry_run=[1]), 422, "INVALID_BATCH", None),
    ("webhook-not-object", batch_of(webhook="http://example.org/"), 422, "INVALID_BATCH", None),
    ("body-is-list", b"[]", 422, "INVALID_BATCH", None),
    ("body-is-null", b"null", 422, "INVALID_BATCH", None),
    ("body-malformed", b'{"message": "m", "edits": [', 422, "INVALID_BATCH", None),
    ("body-empty", b"", 422, "INVALID_BATCH", None),
    ("body-not-utf8", b'{"message": "\xff\xfe", "edits": []}', 422, "INVALID_BATCH", None),
    ("body-deep-array", b"[" * 100_000 + b"]" * 100_000, 422, "INVALID_BATCH", None),
    ("body-deep-object", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, 422, "INVALID_BATCH", None),
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
    ("path-nul", batch_of(create("wiki/x\x00.md")), 422, "INVALID_PATH", 1),
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
    ("zone-raw-replace", batch_of(replace("raw/x")), 422, "ZONE_FORBIDDEN", 1),
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
        b'{"message": "m", "edits": [{"op": "create", "path": "wiki/x.md", "content": "a\\ud800b"}]}',
        422,
        "INVALID_ENCODING",
        0,
    ),
    (
        "lone-surrogate-new",
        b'{"message": "m", "edits": [{"op": "replace", "path": "wiki/x.md", "old": "a", "new": "\\udfff"}]}',
        422,
        "INVALID_ENCODING",
        0,
    ),
    ("webhook-not-http", batch_of(webhook={"url": "ftp://example.org/hook"}), 422, "WEBHOOK_REFUSED", None),
    (
        "webhook-credentials",
        batch_of(webhook={"url": "http://user:pw@example.org/"}),
        422,
        "WEBHOOK_REFUSED",
        None,
    ),
    ("webhook-no-host", batch_of(webhook={"url": "http:///path"}), 422, "WEBHOOK_REFUSED", None),
]


@pytest.mark.both  # bodies through uvicorn's request limits
@pytest.mark.parametrize(
    ("body", "status", "code", "index"), [pytest.param(b, s, c, i, id=n) for n, b, s, c, i in STATIC_FAILURES]
)
async def test_static_failure_answers_at_submission(
    dep: Deployment, static_wiki: str, body: Body, status: int, code: str, index: int | None
) -> None:
    """A batch refused without the repository answers at submission with its code and queues nothing."""
    url = f"/v1/wikis/{static_wiki}/batches"
    if isinstance(body, bytes):
        answer = await dep.client.post(url, content=body, headers={"content-type": "application/json"})
    else:
        answer = await dep.client.post(url, json=body() if callable(body) else body)
    expect_error(answer, status, code, index)
    assert await dep.jobs(static_wiki) == []


@pytest.mark.both  # 8 MiB bodies over a socket, within the server's limits
async def test_limits_are_inclusive(dep: Deployment) -> None:
    """Exactly 1000 edits, and exactly 8 MiB of decoded content, are accepted (as dry runs)."""
    wiki = await dep.new_wiki("limits")
    many = {"message": "many", "dry_run": True, "edits": [create(f"wiki/m{i}.md") for i in range(1000)]}
    job = await dep.apply(wiki, many)
    check_job(job, wiki, "succeeded")
    assert len(job["result"]["applied"]) == 1000
    data = base64.b64encode(b"\x00" * (8 * MIB)).decode()
    big = {
        "message": "big",
        "dry_run": True,
        "edits": [{"op": "create", "path": "raw/big.bin", "content": data, "encoding": "base64"}],
    }
    job = await dep.apply(wiki, big)
    check_job(job, wiki, "succeeded")
    assert job["result"]["applied"][0]["version"] == blob_id(b"\x00" * (8 * MIB))
    assert len(await dep.commits(wiki)) == 1


async def test_batch_to_missing_wiki_is_404(dep: Deployment) -> None:
    """A batch to a wiki that does not exist (or to an id that cannot exist) is 404 WIKI_NOT_FOUND."""
    wiki = "later-made"
    expect_error(await dep.submit(wiki, batch_of()), 404, "WIKI_NOT_FOUND")
    expect_error(await dep.submit("Not_An_Id", batch_of()), 404, "WIKI_NOT_FOUND")
    await dep.create_wiki(wiki)
    assert await dep.jobs(wiki) == []
    assert len(await dep.commits(wiki)) == 1


async def test_missing_wiki_is_judged_before_the_body(dep: Deployment) -> None:
    """A malformed batch to a missing wiki answers 404 WIKI_NOT_FOUND or 422, never 500 or 202."""
    answer = await dep.client.post(
        "/v1/wikis/no-such-wiki/batches", content=b"{", headers={"content-type": "application/json"}
    )
    assert answer.status_code in (404, 422), answer.text
    expect_error(
        answer, answer.status_code, "WIKI_NOT_FOUND" if answer.status_code == 404 else "INVALID_BATCH"
    )


async def test_body_over_the_request_limit_is_413(dep: Deployment, static_wiki: str) -> None:
    """A body over WIKIQ_MAX_BODY_BYTES is refused with 413 BATCH_TOO_LARGE, streamed or not."""
    filler = b"x" * (dep.settings.max_body_bytes + 1)
    url = f"/v1/wikis/{static_wiki}/batches"
    json_type = {"content-type": "application/json"}
    answer = await dep.client.post(url, content=filler, headers=json_type)
    expect_error(answer, 413, "BATCH_TOO_LARGE")

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"message": "m", "edits": [{"op": "create", "path": "wiki/a.md", "content": "'
        for _ in range(dep.settings.max_body_bytes // 65536 + 2):
            yield b"x" * 65536
        yield b'"}]}'

    streamed = await dep.client.post(url, content=chunks(), headers=json_type)
    expect_error(streamed, 413, "BATCH_TOO_LARGE")


async def test_long_query_and_huge_headers_are_refused(dep: Deployment, static_wiki: str) -> None:
    """A query string over 48 KiB is 414 and headers over 32 KiB are 431, both INVALID_BATCH."""
    long_query = await dep.client.get(f"/v1/wikis/{static_wiki}/pages", params={"prefix": "x" * 60_000})
    expect_error(long_query, 414, "INVALID_BATCH")
    headers = {f"x-filler-{i}": "y" * 4000 for i in range(10)}
    expect_error(await dep.client.get("/healthz", headers=headers), 431, "INVALID_BATCH")


async def test_webhook_without_a_secret_is_refused(fresh: Any) -> None:
    """A server without WIKIQ_WEBHOOK_SECRET refuses a batch naming a webhook (422 WEBHOOK_REFUSED)."""
    async with fresh(webhook_secret=None) as alone:
        wiki = await alone.new_wiki("nosecret")
        answer = await alone.submit(wiki, batch_of(webhook={"url": "http://127.0.0.1:9/hook"}))
        expect_error(answer, 422, "WEBHOOK_REFUSED")
        assert await alone.jobs(wiki) == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/x",
        "http://[::1]/",
        "http://100.64.0.1/",
    ],
)
async def test_private_webhook_hosts_are_refused_unless_allowed(fresh: Any, url: str) -> None:
    """Without WIKIQ_WEBHOOK_ALLOW_PRIVATE, loopback/private/link-local/CGNAT URLs are 422 WEBHOOK_REFUSED."""
    async with fresh(webhook_allow_private=False) as guarded:
        wiki = await guarded.new_wiki("guard")
        expect_error(await guarded.submit(wiki, batch_of(webhook={"url": url})), 422, "WEBHOOK_REFUSED")
        assert await guarded.jobs(wiki) == []


# -- dry runs --------------------------------------------------------------------------------------------


async def test_dry_run_reports_without_committing(dep: Deployment) -> None:
    """dry_run: true reports the applied list with commit null and makes no commit."""
    wiki = await dep.new_wiki("dry")
    v = await dep.seed(wiki, {"wiki/a.md": "a\n"})
    before = await dep.commits(wiki)
    before_pages = await dep.pages(wiki)
    batch = {
        "message": "try",
        "dry_run": True,
        "edits": [
            create("wiki/new.md", "n\n"),
            {"op": "overwrite", "path": "wiki/a.md", "content": "b\n", "expected_version": v["wiki/a.md"]},
            {
                "op": "rename",
                "path": "wiki/a.md",
                "new_path": "wiki/c.md",
                "expected_version": v["wiki/a.md"],
            },
        ],
    }
    job = await dep.apply(wiki, batch)
    check_job(job, wiki, "succeeded")
    assert job["dry_run"] is True
    assert job["result"]["commit"] is None
    assert job["result"]["applied"] == [
        {"index": 0, "op": "create", "path": "wiki/new.md", "version": blob_id(b"n\n")},
        {"index": 1, "op": "overwrite", "path": "wiki/a.md", "version": blob_id(b"b\n")},
        {
            "index": 2,
            "op": "rename",
            "path": "wiki/a.md",
            "new_path": "wiki/c.md",
            "version": blob_id(b"b\n"),
        },
    ]
    assert await dep.commits(wiki) == before
    assert await dep.pages(wiki) == before_pages


async def test_dry_run_that_would_fail_reports_the_failure(dep: Deployment) -> None:
    """A dry run that breaks a rule is a failed job with the error, and nothing is committed."""
    wiki = await dep.new_wiki("dryfail")
    v = await dep.seed(wiki, {"wiki/a.md": "a\n"})
    before = await dep.commits(wiki)
    edits = [
        create("wiki/new.md"),
        {"op": "replace", "path": "wiki/a.md", "old": "zzz", "new": "b", "expected_version": v["wiki/a.md"]},
    ]
    job = await dep.apply(wiki, {"message": "try", "dry_run": True, "edits": edits})
    check_job(job, wiki, "failed")
    assert job["dry_run"] is True
    assert (job["error"]["code"], job["error"]["index"]) == ("OLD_NOT_FOUND", 1)
    assert await dep.commits(wiki) == before


# -- idempotency -----------------------------------------------------------------------------------------


async def test_idempotency_key_same_body_same_job(dep: Deployment) -> None:
    """The same Idempotency-Key with the same body answers 200 with the same job, and makes one commit."""
    wiki = await dep.new_wiki("idem")
    key = {"Idempotency-Key": f"key-{wiki}"}
    batch = {"message": "once", "edits": [create("wiki/once.md")]}
    async with dep.worker.paused():
        first = await dep.submit(wiki, batch, headers=key)
        assert first.status_code == 202, first.text
        job_id = first.json()["job_id"]
        again = await dep.submit(wiki, batch, headers=key)
        assert again.status_code == 200, again.text
        assert again.json()["job_id"] == job_id
        assert again.json()["status"] == "queued"
        assert again.json()["status_url"] == f"/v1/jobs/{job_id}"
    job = await dep.wait(job_id)
    check_job(job, wiki, "succeeded")
    reordered = {"edits": batch["edits"], "message": "once"}
    after = await dep.submit(wiki, reordered, headers=key)
    assert after.status_code == 200, after.text
    assert after.json()["job_id"] == job_id
    assert after.json()["status"] == "succeeded"
    assert after.json()["result"] == job["result"]
    history = await dep.commits(wiki)
    assert len(history) == 2
    assert history[0]["job_id"] == job_id
    assert [j["job_id"] for j in await dep.jobs(wiki)] == [job_id]


async def test_idempotency_key_of_refused_submission_is_not_kept(dep: Deployment) -> None:
    """A submission refused at submission does not bind its Idempotency-Key; a valid body may use it next."""
    wiki = await dep.new_wiki("idemr")
    key = {"Idempotency-Key": f"key-{wiki}"}
    expect_error(await dep.submit(wiki, {"message": "bad", "edits": []}, headers=key), 422, "BATCH_EMPTY")
    answer = await dep.submit(wiki, {"message": "good", "edits": [create("wiki/g.md")]}, headers=key)
    assert answer.status_code == 202, answer.text
    assert (await dep.wait(answer.json()["job_id"]))["status"] == "succeeded"


async def test_idempotency_key_other_body_is_conflict(dep: Deployment) -> None:
    """The same Idempotency-Key with another body answers 422 IDEMPOTENCY_CONFLICT and queues nothing."""
    wiki = await dep.new_wiki("idemx")
    key = {"Idempotency-Key": f"key-{wiki}"}
    job_id = await dep.submit_ok(wiki, {"message": "one", "edits": [create("wiki/one.md")]})
    await dep.wait(job_id)
    first = await dep.submit(wiki, {"message": "one", "edits": [create("wiki/one2.md")]}, headers=key)
    assert first.status_code == 202, first.text
    await dep.wait(first.json()["job_id"])
    other = {"message": "two", "edits": [create("wiki/two.md")]}
    expect_error(await dep.submit(wiki, other, headers=key), 422, "IDEMPOTENCY_CONFLICT")
    expect_error(await dep.submit(wiki, {**other, "dry_run": True}, headers=key), 422, "IDEMPOTENCY_CONFLICT")
    assert [j["job_id"] for j in await dep.jobs(wiki)] == [first.json()["job_id"], job_id]
    assert len(await dep.commits(wiki)) == 3
    fresh_key = await dep.submit(wiki, other, headers={"Idempotency-Key": f"other-{wiki}"})
    assert fresh_key.status_code == 202, fresh_key.text
    assert (await dep.wait(fresh_key.json()["job_id"]))["status"] == "succeeded"


async def test_idempotency_keys_are_per_wiki(dep: Deployment) -> None:
    """One Idempotency-Key on two wikis names two jobs: the key is scoped to the wiki."""
    one, two = await dep.new_wiki("idemw"), await dep.new_wiki("idemw")
    key = {"Idempotency-Key": "shared-key"}
    batch = {"message": "m", "edits": [create("wiki/a.md")]}
    first = await dep.submit(one, batch, headers=key)
    second = await dep.submit(two, batch, headers=key)
    assert (first.status_code, second.status_code) == (202, 202), (first.text, second.text)
    assert first.json()["job_id"] != second.json()["job_id"]
    for answer, wiki in ((first, one), (second, two)):
        check_job(await dep.wait(answer.json()["job_id"]), wiki, "succeeded")


async def test_concurrent_submissions_with_one_key_make_one_job(dep: Deployment) -> None:
    """Eight simultaneous submissions with one key and body all name one job, which commits once.

    The first answers 202; the others 200 with the job, or 202 with its id when they arrive between the
    first one's claim of the key and its record being written.
    """
    wiki = await dep.new_wiki("idemrace")
    key = {"Idempotency-Key": "race"}
    batch = {"message": "m", "edits": [create("wiki/a.md")]}
    answers: list[httpx.Response] = await asyncio.gather(
        *(dep.submit(wiki, batch, headers=key) for _ in range(8))
    )
    assert {a.status_code for a in answers} <= {200, 202}, [a.text for a in answers]
    assert [a.status_code for a in answers].count(202) >= 1
    assert len({a.json()["job_id"] for a in answers}) == 1
    job_id = answers[0].json()["job_id"]
    check_job(await dep.wait(job_id), wiki, "succeeded")
    assert [j["job_id"] for j in await dep.jobs(wiki)] == [job_id]
    assert len(await dep.commits(wiki)) == 2


async def _command_calls(redis: Any) -> dict[str, int]:
    """Calls per command since the server started (``INFO commandstats``; commands run by scripts count)."""
    stats = await redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


async def test_acceptance_is_one_script_and_the_durability_wait(fresh: Any) -> None:
    """A submission stores its record, queued bytes, arq job and doorbell in ONE atomic script, sent with
    ``WAITAOF`` in one round trip (no arq ``WATCH``/``MULTI`` transaction); what it stores is a job arq
    runs once the worker is back."""
    async with fresh(max_queued_bytes=10 * MIB) as dep:
        wiki = await dep.new_wiki("onestep")
        await dep.apply(
            wiki, {"message": "first", "edits": [create("wiki/first.md")]}
        )  # Redis knows the script
        async with dep.worker.paused():
            before = await _command_calls(dep.redis)
            answer = await dep.submit(wiki, {"message": "one step", "edits": [create("wiki/one.md")]})
            after = await _command_calls(dep.redis)
            assert answer.status_code == 202, answer.text
            job_id = answer.json()["job_id"]
            spent = {
                name: after[name] - before.get(name, 0) for name in after if after[name] > before.get(name, 0)
            }
            assert spent.get("evalsha") == 1 and spent.get("waitaof") == 1, spent
            assert not {"watch", "multi", "exec", "eval"} & set(spent), spent
            queued = [raw.decode() for p in range(2) for raw in await dep.redis.zrange(keys.queue(p), 0, -1)]
            assert queued == [job_id]
            entry = loads(await dep.redis.get(f"arq:job:{job_id}"))
            assert (entry["f"], entry["a"]) == ("apply_batch", [job_id])
            assert int(await dep.redis.get(keys.queued(SINGLE_USER_ID)[1]) or 0) > 0
            assert sum([await dep.redis.llen(keys.bell(p)) for p in range(2)]) == 1
        job = await dep.wait(job_id)
        assert job["status"] == "succeeded", job
