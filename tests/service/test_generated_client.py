"""A Python client generated from the running app's ``/openapi.json`` (openapi-python-client) round-trips
batches against the in-process app, with typed answers.

The spec is fetched from the app, the client generated into a temporary package once per module and
imported from there; its ``httpx.AsyncClient`` is pointed at the app through ``ASGITransport``. Anything
the generator warns about (an empty schema, an operation without an id, ...) fails the first test.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.gitutil import blob_id
from tests.service.harness import BASE_URL, CEILING, Deployment

PACKAGE = "wikiq_generated_client"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
# every operation of the contract, by operationId, under the tag the spec files it in
OPERATIONS = {
    "health": {"healthz", "readyz"},
    "wikis": {
        "create_wiki",
        "list_wikis",
        "list_pages",
        "read_page",
        "list_commits",
        "search",
        "submit_batch",
        "read_pages",
        "backlinks",
    },
    "jobs": {"get_job", "cancel_job", "redeliver_webhook", "list_jobs"},
    "proposals": {
        "list_proposals",
        "get_proposal",
        "approve_proposal",
        "reject_proposal",
        "recheck_proposal",
    },
    "mcp": {"mcp"},
}


@dataclass
class Generated:
    """The generated package, what the generator printed, and a client of the in-process app."""

    package: ModuleType
    output: str
    spec: dict[str, Any]
    client: Any

    def op(self, tag: str, operation: str) -> Any:
        """The module of one operation (``api/<tag>/<operationId>.py``)."""
        return importlib.import_module(f"{PACKAGE}.api.{tag}.{operation}")

    def model(self, name: str) -> Any:
        """A generated model class by its schema name."""
        return getattr(importlib.import_module(f"{PACKAGE}.models"), name)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def generated(dep: Deployment, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Generated]:
    """Generate the client from /openapi.json, import it, and hand out a client bound to the app."""
    answer = await dep.client.get("/openapi.json")
    assert answer.status_code == 200
    root = tmp_path_factory.mktemp("generated")
    (root / "openapi.json").write_bytes(answer.content)
    (root / "config.json").write_text(
        json.dumps({"post_hooks": []})
    )  # no formatter: nothing outside the venv
    done = await asyncio.to_thread(
        subprocess.run,
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(root / "openapi.json"),
            "--output-path",
            str(root / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(root / "config.json"),
        ],
        capture_output=True,
        text=True,
        timeout=CEILING * 2,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(root))
    try:
        package = importlib.import_module(PACKAGE)
        transport = httpx.ASGITransport(app=dep.app)
        timeout = httpx.Timeout(CEILING * 2)
        client = package.Client(base_url=BASE_URL, timeout=timeout, httpx_args={"transport": transport})
        async with client:
            yield Generated(package, done.stdout + done.stderr, answer.json(), client)
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


async def test_generation_is_clean_and_covers_every_operation(generated: Generated) -> None:
    """The generator warns about nothing, and every operation of the spec became a typed module."""
    assert "Warning" not in generated.output and "Error" not in generated.output, generated.output
    for tag, operations in OPERATIONS.items():
        for operation in operations:
            module = generated.op(tag, operation)
            assert callable(module.asyncio_detailed) and callable(module.asyncio), operation
    in_spec = {op["operationId"] for path in generated.spec["paths"].values() for op in path.values()}
    assert in_spec == set().union(*OPERATIONS.values())


async def test_every_2xx_answer_has_a_schema(generated: Generated) -> None:
    """Every 2xx of every operation has a schema with properties (a component, or inline for /mcp)."""
    schemas = generated.spec["components"]["schemas"]
    for path, operations in generated.spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if not status.startswith("2"):
                    continue
                if "content" not in response:  # only a notification to /mcp has no answer at all
                    assert (operation["operationId"], status) == ("mcp", "202"), (method, path, status)
                    continue
                schema = response["content"]["application/json"]["schema"]
                if "$ref" in schema:
                    schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
                assert schema.get("properties"), (method, path, status)


async def _finished(generated: Generated, job_id: str) -> Any:
    """The job once finished, long-polled through the generated get_job."""
    get_job = generated.op("jobs", "get_job")
    status = generated.model("JobStatus")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CEILING
    while True:
        job = await get_job.asyncio(job_id, client=generated.client, wait=30)
        assert isinstance(job, generated.model("Job")), job
        if job.status in (status.SUCCEEDED, status.FAILED, status.CANCELLED):
            return job
        assert loop.time() < deadline, job


async def test_round_trip_of_a_batch(dep: Deployment, generated: Generated) -> None:
    """create wiki → read index → submit create + replace → long-poll the job → read the pages: all typed."""
    m = generated.model
    created = await generated.op("wikis", "create_wiki").asyncio_detailed(
        client=generated.client, body=m("NewWiki")(id="generated")
    )
    assert created.status_code == 201
    assert isinstance(created.parsed, m("WikiInfo")) and created.parsed.id == "generated"
    head = created.parsed.head
    assert isinstance(head, str) and len(head) == 40

    read_page = generated.op("wikis", "read_page")
    index = await read_page.asyncio("generated", "index.md", client=generated.client)
    assert isinstance(index, m("Page")) and index.commit == head
    assert index.version == blob_id(index.content.encode())

    batch = m("Batch")(
        message="Generated client",
        edits=[
            m("Create")(op="create", path="wiki/redis.md", content="# Redis\n"),
            m("Replace")(
                op="replace",
                path="index.md",
                old=index.content,
                new=index.content + "\n- [[redis]]\n",
                expected_version=index.version,
            ),
        ],
    )
    submitted = await generated.op("wikis", "submit_batch").asyncio_detailed(
        "generated", client=generated.client, body=batch
    )
    assert submitted.status_code == 202
    assert isinstance(submitted.parsed, m("Submitted"))
    assert submitted.parsed.status == m("SubmittedStatus").QUEUED
    assert submitted.parsed.status_url == f"/v1/jobs/{submitted.parsed.job_id}"

    job = await _finished(generated, submitted.parsed.job_id)
    assert job.status == m("JobStatus").SUCCEEDED
    assert job.wiki == "generated" and job.dry_run is False and job.error is None
    assert isinstance(job.result, m("JobResult"))
    applied = job.result.applied
    assert all(isinstance(a, m("Applied")) for a in applied)
    assert [(a.index, a.op, a.path) for a in applied] == [
        (0, "create", "wiki/redis.md"),
        (1, "replace", "index.md"),
    ]
    assert applied[0].version == blob_id(b"# Redis\n")

    page = await read_page.asyncio("generated", "wiki/redis.md", client=generated.client)
    assert isinstance(page, m("Page"))
    assert (page.content, page.version, page.commit) == ("# Redis\n", applied[0].version, job.result.commit)
    assert page.encoding == m("PageEncoding").UTF_8
    index_after = await read_page.asyncio("generated", "index.md", client=generated.client)
    assert index_after.content.endswith("- [[redis]]\n") and index_after.version == applied[1].version

    commits = await generated.op("wikis", "list_commits").asyncio("generated", client=generated.client)
    assert isinstance(commits, m("CommitList"))
    latest = commits.commits[0]
    assert isinstance(latest, m("CommitInfo")) and isinstance(latest.author, m("Author"))
    assert (latest.commit, latest.job_id) == (job.result.commit, job.job_id)
    assert (await dep.head("generated")) == job.result.commit


async def test_refusals_parse_as_the_error_object(generated: Generated) -> None:
    """A refused submission and an unknown job parse into ErrorBody with typed code and index."""
    m = generated.model
    await generated.op("wikis", "create_wiki").asyncio(
        client=generated.client, body=m("NewWiki")(id="refusals")
    )
    bad = m("Batch")(message="m", edits=[m("Create")(op="create", path="wiki/../x.md", content="x")])
    refused = await generated.op("wikis", "submit_batch").asyncio_detailed(
        "refusals", client=generated.client, body=bad
    )
    assert refused.status_code == 422
    assert isinstance(refused.parsed, m("ErrorBody")) and isinstance(refused.parsed.error, m("ErrorInfo"))
    assert (refused.parsed.error.code, refused.parsed.error.index) == ("INVALID_PATH", 0)
    missing = await generated.op("jobs", "get_job").asyncio_detailed(
        "01HZZZZZZZZZZZZZZZZZZZZZZZ", client=generated.client
    )
    assert missing.status_code == 404
    assert isinstance(missing.parsed, m("ErrorBody")) and missing.parsed.error.code == "JOB_NOT_FOUND"
    nowhere = await generated.op("wikis", "list_pages").asyncio_detailed(
        "no-such-wiki", client=generated.client
    )
    assert nowhere.status_code == 404 and nowhere.parsed.error.code == "WIKI_NOT_FOUND"


async def test_idempotent_replay_cancel_and_job_list(dep: Deployment, generated: Generated) -> None:
    """An idempotent replay parses as a Job (200), a cancel answers a cancelled Job, the job list filters."""
    m = generated.model
    submit = generated.op("wikis", "submit_batch")
    await generated.op("wikis", "create_wiki").asyncio(
        client=generated.client, body=m("NewWiki")(id="jobs-gen")
    )
    batch = m("Batch")(message="m", edits=[m("Create")(op="create", path="wiki/a.md", content="a")])
    async with dep.worker.paused():
        first = await submit.asyncio_detailed(
            "jobs-gen", client=generated.client, body=batch, idempotency_key="k1"
        )
        again = await submit.asyncio_detailed(
            "jobs-gen", client=generated.client, body=batch, idempotency_key="k1"
        )
        assert (first.status_code, again.status_code) == (202, 200)
        assert isinstance(again.parsed, m("ReplayedJob")) and again.parsed.job_id == first.parsed.job_id
        assert again.parsed.status_url == f"/v1/jobs/{first.parsed.job_id}"  # typed, not an extra
        assert again.parsed.status == m("JobStatus").QUEUED
        cancelled = await generated.op("jobs", "cancel_job").asyncio(
            first.parsed.job_id, client=generated.client
        )
        assert isinstance(cancelled, m("Job")) and cancelled.status == m("JobStatus").CANCELLED
    listed = await generated.op("jobs", "list_jobs").asyncio(
        "jobs-gen", client=generated.client, status=m("ListJobsStatusType0").CANCELLED
    )
    assert isinstance(listed, m("JobList"))
    assert [j.job_id for j in listed.jobs] == [first.parsed.job_id]


async def test_paging_and_search_through_the_generated_client(dep: Deployment, generated: Generated) -> None:
    """list_pages follows next_cursor to every file once; search returns typed matches."""
    m = generated.model
    await generated.op("wikis", "create_wiki").asyncio(
        client=generated.client, body=m("NewWiki")(id="pages-gen")
    )
    await dep.seed("pages-gen", {f"wiki/p{i}.md": f"needle {i}\n" for i in range(5)})
    list_pages = generated.op("wikis", "list_pages")
    seen: list[str] = []
    cursor: Any = None
    while True:
        kwargs = {} if cursor is None else {"cursor": cursor}
        listed = await list_pages.asyncio("pages-gen", client=generated.client, limit=3, **kwargs)
        assert isinstance(listed, m("PageList"))
        assert all(isinstance(p, m("PageInfo")) for p in listed.pages)
        seen += [p.path for p in listed.pages]
        cursor = listed.next_cursor
        if not isinstance(cursor, str):
            break
        assert len(seen) < 100
    assert sorted(seen) == seen and len(seen) == 8
    found = await generated.op("wikis", "search").asyncio("pages-gen", client=generated.client, q="NEEDLE")
    assert isinstance(found, m("MatchList"))
    assert sorted((x.path, x.line, x.text) for x in found.matches) == [
        (f"wiki/p{i}.md", 1, f"needle {i}") for i in range(5)
    ]
