"""The MCP server through the SDK's own client, over Streamable HTTP (``/mcp`` on the API) and over stdio
(``wikiq mcp`` as a subprocess), against real processes: Redis, the API and a worker."""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests.e2e.service import Service
from worker.schema.edits import OPS

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "list_wikis",
    "list_pages",
    "read_page",
    "read_pages",
    "page_outline",
    "search_wiki",
    "find_backlinks",
    "check_batch",
    "write_batch",
    "get_job",
    "cancel_job",
}
_serial = itertools.count()


@asynccontextmanager
async def connect(svc: Service, transport: str, token: str | None = None) -> AsyncIterator[Client]:
    """An MCP client session with the service: Streamable HTTP at /mcp, or ``wikiq mcp`` over stdio."""
    if transport == "http":
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=90) as http,
            Client(streamable_http_client(f"{svc.url}/mcp", http_client=http)) as client,
        ):
            yield client
        return
    env = {"WIKIQ_URL": svc.url, **({"WIKIQ_TOKEN": token} if token else {})}
    server = StdioServerParameters(command=sys.executable, args=["-m", "api.cli", "mcp"], env=env, cwd=ROOT)
    async with Client(server) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> CallToolResult:
    """Call a tool and return its result."""
    return await client.call_tool(tool, arguments)


def data(result: CallToolResult) -> dict[str, Any]:
    """A successful result's structured content."""
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error(result: CallToolResult) -> dict[str, Any]:
    """A refusal's error object (and the hint beside it)."""
    assert result.is_error, result.structured_content
    assert isinstance(result.structured_content, dict)
    return {**result.structured_content["error"], "hint": result.structured_content["hint"]}


def seed(svc: Service) -> str:
    """A wiki with a page and another page linking to it twice."""
    wiki = f"mcp-{next(_serial)}"
    svc.create_wiki(wiki)
    edits = [
        {"op": "create", "path": "wiki/old.md", "content": "# Old\n"},
        {"op": "create", "path": "wiki/links.md", "content": "See [[old]].\r\nAnd [[old]] again.\n"},
    ]
    assert svc.apply(wiki, {"message": "seed", "edits": edits})["status"] == "succeeded"
    return wiki


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_tools_listed_with_honest_annotations(svc: Service, transport: str) -> None:
    """The tools are listed with descriptions, output schemas and annotations true to what they do."""
    async with connect(svc, transport) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 200, name
        assert tool.output_schema is not None, name
        hints = tool.annotations
        assert hints is not None and hints.open_world_hint is False, name
        assert hints.read_only_hint is (name not in {"write_batch", "cancel_job"}), name
    write = tools["write_batch"]
    assert write.annotations is not None
    assert (write.annotations.destructive_hint, write.annotations.idempotent_hint) == (True, False)
    families = write.input_schema["properties"]["edits"]["items"]["anyOf"]
    assert {op for family in families for op in family["properties"]["op"]["enum"]} == set(OPS)
    assert write.input_schema["required"] == ["wiki", "message"]  # and edits, or check_batch's plan
    assert {"edits", "plan"} <= set(write.input_schema["properties"])


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_read_rename_with_links_and_stale_version(svc: Service, transport: str) -> None:
    """Read a page, rename it and fix its links in one commit; a stale expected_version names its edit."""
    wiki = seed(svc)
    head_before = svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"]
    async with connect(svc, transport) as client:
        assert wiki in [w["id"] for w in data(await call(client, "list_wikis"))["wikis"]]
        exact = await call(client, "read_page", wiki=wiki, path="wiki/links.md")
        links = data(exact)
        head, content = exact.content[0].text.split("\n---\n", 1)  # type: ignore[union-attr]
        assert content == "See [[old]].\r\nAnd [[old]] again.\n" == links["content"]
        assert head == f"wiki/links.md version={links['version']} size=33 commit={links['commit']}"
        shown = await call(client, "read_page", wiki=wiki, path="wiki/links.md", line_numbers=True)
        assert "1| See [[old]]." in shown.content[0].text  # type: ignore[union-attr]
        many = await call(client, "read_pages", wiki=wiki, paths=["wiki/links.md", "wiki/none.md"])
        assert json.loads(many.content[0].text) == data(many)  # type: ignore[union-attr]
        assert data(many)["pages"][0]["content"] == links["content"]
        assert [e["code"] for e in data(many)["errors"]] == ["NOT_FOUND"]
        numbered = await call(client, "read_pages", wiki=wiki, paths=["wiki/links.md"], line_numbers=True)
        assert "2| And [[old]] again." in numbered.content[0].text  # type: ignore[union-attr]
        first = data(await call(client, "find_backlinks", wiki=wiki, path="wiki/old.md", limit=1))
        assert first["next_cursor"] and [b["line"] for b in first["backlinks"]] == [1]
        rest = await call(
            client, "find_backlinks", wiki=wiki, path="wiki/old.md", cursor=first["next_cursor"]
        )
        assert data(rest)["next_cursor"] is None and [b["line"] for b in data(rest)["backlinks"]] == [2]
        gone = error(await call(client, "read_page", wiki=wiki, path="wiki/links.md", raw=True))
        assert gone["code"] == "INVALID_BATCH" and gone["message"].startswith("raw: unknown argument")
        assert data(await call(client, "list_pages", wiki=wiki, prefix="wiki/"))["folders"] == {
            "wiki/": ["links.md", "old.md"]
        }
        listing = data(await call(client, "list_pages", wiki=wiki, prefix="wiki/", versions=True))
        versions = {p["path"]: p["version"] for p in listing["pages"]}
        hits = data(await call(client, "search_wiki", wiki=wiki, query="[[OLD"))["matches"]
        assert {(m["path"], m["line"]) for m in hits} == {("wiki/links.md", 1), ("wiki/links.md", 2)}

        rename = {"op": "rename", "path": "wiki/old.md", "new_path": "wiki/new.md"}
        fix = {
            "op": "replace",
            "path": "wiki/links.md",
            "old": "[[old]]",
            "new": "[[new]]",
            "replace_all": True,
        }
        edits = [
            rename | {"expected_version": versions["wiki/old.md"]},
            fix | {"expected_version": links["version"]},
        ]
        outcome = data(await call(client, "write_batch", wiki=wiki, message="Rename old to new", edits=edits))
        assert outcome["status"] == "succeeded" and len(outcome["commit"]) == 40
        assert outcome["edits"] == ["0 rename wiki/old.md -> wiki/new.md", "1 replace wiki/links.md"]

        fresh = {"op": "create", "path": "wiki/fresh.md", "content": "new\n"}
        stale = [fresh, fix | {"old": "[[new]]", "new": "[[newer]]", "expected_version": links["version"]}]
        refused = error(await call(client, "write_batch", wiki=wiki, message="Stale", edits=stale))
        assert (refused["code"], refused["index"]) == ("VERSION_MISMATCH", 1)
        assert "current_version" in refused["hint"]
        current = svc.page(wiki, "wiki/links.md")["version"]
        assert refused["details"] == {"path": "wiki/links.md", "current_version": current}
        assert current != links["version"]

    commits = svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"]
    assert [c["commit"] for c in commits[:2]] == [outcome["commit"], head_before]
    assert commits[0]["message"].startswith("Rename old to new")
    assert svc.page(wiki, "wiki/links.md")["content"] == "See [[new]].\r\nAnd [[new]] again.\n"
    assert svc.page(wiki, "wiki/new.md")["content"] == "# Old\n"
    assert svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/old.md").status_code == 404
    assert svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/fresh.md").status_code == 404


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_jobs_without_waiting_and_errors(svc: Service, transport: str) -> None:
    """wait=false gives a job id for get_job; a late cancel, unknown pages and bad edits are refused."""
    wiki = seed(svc)
    async with connect(svc, transport) as client:
        edit = {"op": "create", "path": "wiki/later.md", "content": "later\n"}
        queued = data(await call(client, "write_batch", wiki=wiki, message="Later", edits=[edit], wait=False))
        assert queued["commit"] is None and queued["status"] in ("queued", "running", "succeeded")
        job = data(await call(client, "get_job", job_id=queued["job_id"], wait_seconds=30))
        assert job["status"] == "succeeded" and not job["dry_run"]
        assert job["edits"] == ["0 create wiki/later.md"]
        late = error(await call(client, "cancel_job", job_id=queued["job_id"]))
        assert late["code"] == "NOT_CANCELLABLE"
        missing = error(await call(client, "read_page", wiki=wiki, path="wiki/none.md"))
        assert missing["code"] == "NOT_FOUND" and "list_pages" in missing["hint"]
        zone = [edit, {"op": "create", "path": "elsewhere/x.md", "content": ""}]
        forbidden = error(await call(client, "write_batch", wiki=wiki, message="Zone", edits=zone))
        assert (forbidden["code"], forbidden["index"]) == ("ZONE_FORBIDDEN", 1)
        trial = [edit | {"path": "wiki/d.md"}]
        dry = data(await call(client, "check_batch", wiki=wiki, message="Dry", edits=trial))
        assert dry["status"] == "succeeded" and dry["edits"] == ["0 create wiki/d.md"]
        assert dry["files"] == ["wiki/d.md created +1 -0"] and "diff" not in dry
        job = data(await call(client, "get_job", job_id=dry["job_id"], diff=["wiki/"]))
        assert [d["diff"] for d in job["diff"]] == ["--- /dev/null\n+++ b/wiki/d.md\n@@ -0,0 +1 @@\n+later\n"]
        assert (job["dry_run"], job["edits"], job["files"]) == (True, dry["edits"], dry["files"])
        no_dry_run = error(
            await call(client, "write_batch", wiki=wiki, message="D", edits=trial, dry_run=True)
        )
        assert no_dry_run["code"] == "INVALID_BATCH" and "check_batch" in no_dry_run["message"]
        assert svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/d.md").status_code == 404  # nothing written
        unknown = await call(
            client, "write_batch", wiki=wiki, message="Bad", edits=[{"op": "move", "path": "x"}]
        )
        assert unknown.is_error
        nowiki = error(await call(client, "list_pages", wiki="no-such-wiki"))
        assert nowiki["code"] == "WIKI_NOT_FOUND"


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_check_batch_then_commit_its_plan(svc: Service, transport: str) -> None:
    """check_batch answers a plan; write_batch with only that plan commits exactly what was checked, once;
    write_batch needs edits or a plan, not both."""
    wiki = seed(svc)
    async with connect(svc, transport) as client:
        edits = [{"op": "create", "path": "wiki/planned.md", "content": "# Planned\n"}]
        checked = data(await call(client, "check_batch", wiki=wiki, edits=edits))
        assert checked["status"] == "succeeded" and checked["plan"]
        both = error(
            await call(client, "write_batch", wiki=wiki, message="M", edits=edits, plan=checked["plan"])
        )
        neither = error(await call(client, "write_batch", wiki=wiki, message="M"))
        assert both["code"] == neither["code"] == "INVALID_BATCH"
        landed = data(await call(client, "write_batch", wiki=wiki, message="Planned", plan=checked["plan"]))
        assert landed["status"] == "succeeded" and landed["edits"] == checked["edits"]
        assert (landed["files"], landed["checks"]) == (checked["files"], checked["checks"])  # as checked
        again = error(await call(client, "write_batch", wiki=wiki, message="Again", plan=checked["plan"]))
        assert again["code"] == "PLAN_NOT_FOUND" and "check_batch" in again["hint"]
    assert svc.client.get(f"/v1/wikis/{wiki}/pages/wiki/planned.md").json()["content"] == "# Planned\n"


def tokens_file(root: Path, **tokens: str) -> Path:
    """A tokens file giving each named principal admin rights on every wiki."""
    lines = []
    for name, token in tokens.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        lines += ["[[principals]]", f'name = "{name}"', f'email = "{name}@example.org"']
        lines += [f'token_sha256 = "{digest}"', 'rights = { "*" = "admin" }', ""]
    path = root / "tokens.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_bearer_token_is_the_callers(tmp_path: Path, transport: str) -> None:
    """With a tokens file, /mcp wants a bearer token and tools act as its principal; a bad one is refused."""
    service = Service(tmp_path, WIKIQ_TOKENS_FILE=str(tokens_file(tmp_path, ada="ada-token"))).start()
    try:
        api = httpx.Client(base_url=service.url, headers={"Authorization": "Bearer ada-token"}, timeout=30)
        assert api.post("/v1/wikis", json={"id": "team"}).status_code == 201
        if transport == "http":
            bare = httpx.post(f"{service.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert bare.status_code == 401 and bare.headers["WWW-Authenticate"] == "Bearer"
            assert bare.json()["error"]["code"] == "UNAUTHORIZED"
        async with connect(service, transport, token="ada-token") as client:
            edit = {"op": "create", "path": "wiki/ada.md", "content": "by ada\n"}
            outcome = data(await call(client, "write_batch", wiki="team", message="Ada writes", edits=[edit]))
        author = api.get("/v1/wikis/team/commits").json()["commits"][0]
        assert author["commit"] == outcome["commit"] and author["author"]["name"] == "ada"
        if transport == "http":  # refused at /mcp itself, before any tool list: nothing to connect to
            wrong = {"Authorization": "Bearer wrong-token"}
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            refused = httpx.post(f"{service.url}/mcp", json=listing, headers=wrong)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED"
        else:  # over stdio the tools run locally and the API refuses each call
            async with connect(service, transport, token="wrong-token") as client:
                assert error(await call(client, "list_wikis"))["code"] == "UNAUTHORIZED"
        api.close()
    finally:
        service.stop()


async def test_search_count_is_what_replace_across_replaces(svc: Service) -> None:
    """search_wiki counts lines, ignoring case, with ^ at every line; count=true answers instead the count
    a replace_across of the same query applies (exact case, every occurrence, pattern over the whole
    page, raw/ left out), the same check_batch's applied counts give, and its total as expected_count."""
    wiki = f"mcp-count-{next(_serial)}"
    svc.create_wiki(wiki)
    edits = [
        {"op": "create", "path": "wiki/a.md", "content": "# Redis\n\nRedis and Redis.\n# Again\n"},
        {"op": "create", "path": "wiki/b.md", "content": "redis, lower case only\n"},
        {"op": "create", "path": "raw/r.md", "content": "# Redis in raw\n"},
    ]
    assert svc.apply(wiki, {"message": "seed", "edits": edits})["status"] == "succeeded"
    async with connect(svc, "stdio") as client:
        for query, regex in (("Redis", False), ("^# ", True), ("(?m)^# ", True)):
            found = data(await call(client, "search_wiki", wiki=wiki, query=query, regex=regex, count=True))
            edit = {"op": "replace_across", "prefix": "", "new": "X"} | (
                {"pattern": query} if regex else {"old": query}
            )
            checked = await call(
                client, "check_batch", wiki=wiki, edits=[edit | {"expected_count": found["total"]}]
            )
            job = svc.client.get(f"/v1/jobs/{data(checked)['job_id']}").json()
            counts = [{"path": a["path"], "count": a["count"]} for a in job["result"]["applied"]]
            assert found["pages"] == counts, query
            assert found["total"] == sum(c["count"] for c in counts) and found["next_cursor"] is None, query
        lines = data(await call(client, "search_wiki", wiki=wiki, query="Redis"))["matches"]
        assert len(lines) == 4  # a.md lines 1 and 3, b.md (case ignored), raw/r.md
        counted = data(await call(client, "search_wiki", wiki=wiki, query="Redis", count=True))
        assert (counted["total"], counted["pages"]) == (3, [{"path": "wiki/a.md", "count": 3}])
        none = data(await call(client, "search_wiki", wiki=wiki, query="absent", count=True))
        assert (none["matches"], none["total"], none["pages"]) == ([], 0, [])
    commits = svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"]
    assert commits[0]["message"].startswith("seed")  # counting commits nothing


async def test_delete_redirecting_links_and_replace_outside_code(svc: Service) -> None:
    """Over MCP: a delete with redirect_links_to repoints the links to the page it deletes (one
    rewrite_links entry per page), and replace_across with outside_code leaves code and link targets
    alone (a word fixed in prose never breaks a link)."""
    wiki = seed(svc)
    with_code = {"op": "create", "path": "wiki/code.md", "content": "other [[other]] and `other`\n"}
    async with connect(svc, "stdio") as client:
        old = data(await call(client, "read_page", wiki=wiki, path="wiki/old.md"))
        edits = [
            {"op": "create", "path": "wiki/other.md", "content": "# Other\n"},
            {
                "op": "delete",
                "path": "wiki/old.md",
                "expected_version": old["version"],
                "redirect_links_to": "wiki/other.md",
            },
            with_code,
            {"op": "replace_across", "prefix": "wiki/", "old": "other", "new": "Other"}
            | {"outside_code": True, "expected_count": 1},
        ]
        outcome = data(await call(client, "write_batch", wiki=wiki, message="Redirect", edits=edits))
    assert outcome["status"] == "succeeded"
    assert outcome["edits"][1:] == [
        "1 delete wiki/old.md, links 2 in 1 pages",
        "2 create wiki/code.md",
        "3 replace_across wiki/code.md 1 (1 replaced)",
    ]
    assert svc.page(wiki, "wiki/links.md")["content"] == "See [[other]].\r\nAnd [[other]] again.\n"
    assert svc.page(wiki, "wiki/code.md")["content"] == "Other [[other]] and `other`\n"


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_propose_only_token_writes_a_proposal_it_can_follow(tmp_path: Path, transport: str) -> None:
    """write_batch with a propose-only token answers the proposal (id, state, review link) and lands
    nothing; get_job on its check follows it to landed once a reviewer approved it."""
    tokens = tokens_file(tmp_path, rae="rae-token")
    digest = hashlib.sha256(b"pia-token").hexdigest()
    tokens.write_text(
        tokens.read_text()
        + f'[[principals]]\nname = "pia"\nemail = "pia@example.org"\ntoken_sha256 = "{digest}"\n'
        + 'rights = { "*" = "propose" }\n'
    )
    service = Service(tmp_path, WIKIQ_TOKENS_FILE=str(tokens)).start()
    try:
        rae = httpx.Client(base_url=service.url, headers={"Authorization": "Bearer rae-token"}, timeout=30)
        assert rae.post("/v1/wikis", json={"id": "team"}).status_code == 201
        head = rae.get("/v1/wikis/team/commits").json()["commits"][0]["commit"]
        async with connect(service, transport, token="pia-token") as client:
            edit = {"op": "create", "path": "wiki/pia.md", "content": "by pia\n"}
            outcome = data(
                await call(client, "write_batch", wiki="team", message="Pia proposes", edits=[edit])
            )
            proposal = outcome["proposal"]
            assert outcome["commit"] is None and proposal["state"] == "open", outcome
            assert proposal["review_url"] == f"/ui/wikis/team/proposals/{proposal['id']}"
            assert "approves it at review_url" in outcome["hint"]
            assert rae.get("/v1/wikis/team/commits").json()["commits"][0]["commit"] == head
            approved = rae.post(f"/v1/proposals/{proposal['id']}/approve")
            assert approved.status_code == 200, approved.text
            landing = rae.get(f"/v1/jobs/{approved.json()['job_id']}", params={"wait": 30}).json()
            assert landing["status"] == "succeeded"
            followed = data(await call(client, "get_job", job_id=outcome["job_id"]))
            assert followed["proposal"]["state"] == "landed", followed
        commit = rae.get("/v1/wikis/team/commits").json()["commits"][0]
        assert commit["commit"] == landing["result"]["commit"] and commit["author"]["name"] == "pia"
        rae.close()
    finally:
        service.stop()
