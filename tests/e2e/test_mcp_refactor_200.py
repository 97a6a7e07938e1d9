"""A 200-page refactor as an agent would script it over MCP stdio (``wikiq mcp`` against real processes),
counting every character that crosses the tool interface, tool list included.

The refactor: two sections become pages of their own (``extract_section``, their ``[[page#Section]]`` links
follow), a folder of 40 pages moves one level down with one page renamed (``rename`` with rewrite_links),
two pages are deleted with their links sent elsewhere (``redirect_links_to``), ``index.md`` is fixed (one
edit written against the page as the batch left it, ``expected_version: "batch"``) and ``log.md`` appended.
The first dry run carries a deliberate broken link and must warn about it; the second is clean and its plan
is committed. Afterwards, read with plain git: one commit on the old head, no broken link and no link left
on an extracted section's old place (an independent scanner), code untouched.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from mcp import Client
from mcp.types import CallToolResult, TextContent

from tests.e2e.service import Service
from tests.e2e.test_mcp import connect
from tests.e2e.test_mcp_refactor import head_files
from tests.gitutil import git_text
from tests.unit.engine.markdown.test_rewrite_properties import code_and_links, ref_resolve

_serial = itertools.count()
QUEUE = 40
TOPICS = 152
BUDGET = 80_000  # characters of the whole conversation with the tools (about 20 000 tokens)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
CODE = "```\n[[old-queue]] and [[operations#Redis failover]] in code are not links\n```\n"


def generated_wiki() -> dict[str, str]:
    """200 files: the root files, two pages with sections to extract, two pages to delete, a folder of 40
    queue pages, 152 topics linking to all of them in every form (and in code), and a raw source."""
    queue = [f"queue-{n:02d}" for n in range(1, QUEUE + 1)]
    topics = [f"t-{n:03d}" for n in range(1, TOPICS + 1)]
    names = ["operations", "runbook", "legacy", "old-queue", *queue, *topics]
    files = {
        "index.md": "# Index\n\n" + "".join(f"- [[{name}]]\n" for name in names),
        "log.md": "# Log\n\n- created\n",
        "schema.md": "# Schema\n\nPages under wiki/.\n",
        "wiki/operations.md": (
            "# Operations\n\nHow we run it.\n\n## Redis failover\n\nPromote a replica, then see [[queue-01]] "
            "and [backups](#backups).\n\n### Steps\n\n1. Stop writes.\n2. Promote.\n\n## Backups\n\n"
            "Nightly; during a failover see [[#Redis failover]].\n"
        ),
        "wiki/runbook.md": (
            "# Runbook\n\n## Deploy\n\nShip it.\n\n## Rollback\n\n"
            "Revert, as [operations](operations.md#backups) says.\n"
        ),
        "wiki/legacy.md": "# Legacy\n\nSuperseded by the runbook.\n",
        "wiki/old-queue.md": "# Old queue\n\nSuperseded by the queue pages.\n",
        "raw/source.md": "Source notes, cited by [[runbook]].\n",
    }
    for number, name in enumerate(queue):
        files[f"wiki/queue/{name}.md"] = (
            f"# {name}\n\nNext: [[{queue[(number + 1) % QUEUE]}]]. On failure see "
            f"[ops](../operations.md#redis-failover).\n"
        )
    forms = [
        "See [[operations#Redis failover]].",
        "See [[operations#Steps|the steps]].",
        "See [failover](../operations.md#Redis%20failover).",
        "See [[runbook#Rollback]] and [[legacy|the old page]].",
        "See [[old-queue]] and [[queue-07]].",
        "See [the queue](../queue/queue-07.md) and ![[legacy]].",
        "See [[queue/queue-{q:02d}]].",
    ]
    for number, name in enumerate(topics):
        form = forms[number % len(forms)].format(q=number % QUEUE + 1)
        files[f"wiki/topics/{name}.md"] = f"# {name}\n\n{form}\n\n{CODE}\nInline `[[legacy]]` neither.\n"
    assert len(files) == 200
    return files


class Counted:
    """The characters an agent's context receives and sends: the tool list, each call's arguments and each
    answer's text, per tool."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.chars: dict[str, int] = {}

    def add(self, what: str, size: int) -> None:
        self.chars[what] = self.chars.get(what, 0) + size

    async def list_tools(self) -> None:
        tools = (await self.client.list_tools()).tools
        listing = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
        self.add("tools/list", len(json.dumps({"tools": listing}, separators=(",", ":"))))

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call ``tool``; its structured answer (a refusal fails the test)."""
        result: CallToolResult = await self.client.call_tool(tool, arguments)
        self.add(tool, len(json.dumps(arguments, separators=(",", ":"))))
        self.add(tool, sum(len(part.text) for part in result.content if isinstance(part, TextContent)))
        assert not result.is_error, result.content
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    @property
    def total(self) -> int:
        return sum(self.chars.values())


def seed_wiki(svc: Service, wiki: str, files: dict[str, str]) -> None:
    """Create ``wiki`` holding ``files`` in one batch (the files a new wiki starts with overwritten)."""
    svc.create_wiki(wiki)
    seed = []
    for path, text in files.items():
        edit = {"op": "create", "path": path, "content": text}
        if path in ("index.md", "log.md", "schema.md"):
            edit = {**edit, "op": "overwrite", "expected_version": svc.page(wiki, path)["version"]}
        seed.append(edit)
    assert svc.apply(wiki, {"message": "seed", "edits": seed})["status"] == "succeeded"


async def plan_refactor(agent: Counted, wiki: str, broken: bool) -> list[dict[str, Any]]:
    """The agent's part: read only what the edits need (outlines for versions and headings, the index)."""
    versions = {}
    for page in ("operations", "runbook", "legacy", "old-queue"):
        outline = await agent.call("page_outline", wiki=wiki, path=f"wiki/{page}.md")
        versions[page] = outline["version"]
    index = await agent.call("read_page", wiki=wiki, path="index.md")
    assert "- [[legacy]]\n- [[old-queue]]\n" in index["content"]
    edits: list[dict[str, Any]] = [
        {
            "op": "replace",
            "path": "index.md",
            "old": "- [[legacy]]\n- [[old-queue]]\n",
            "new": "- [[redis-failover]]\n- [[rollback]]\n",
            "expected_version": index["version"],
        },
        {
            "op": "extract_section",
            "path": "wiki/operations.md",
            "heading": "Redis failover",
            "new_path": "wiki/operations/redis-failover.md",
            "leave_link": True,
            "expected_version": versions["operations"],
        },
        {
            "op": "extract_section",
            "path": "wiki/runbook.md",
            "heading": "Rollback",
            "new_path": "wiki/runbook/rollback.md",
            "expected_version": versions["runbook"],
        },
        {"op": "rename", "path": "wiki/queue", "new_path": "wiki/platform/queue", "rewrite_links": True},
        {
            "op": "rename",
            "path": "wiki/platform/queue/queue-07.md",
            "new_path": "wiki/platform/queue/intake.md",
            "rewrite_links": True,
        },
        {
            "op": "delete",
            "path": "wiki/old-queue.md",
            "expected_version": versions["old-queue"],
            "redirect_links_to": "wiki/platform/queue/queue-01.md",
        },
        {
            "op": "delete",
            "path": "wiki/legacy.md",
            "expected_version": versions["legacy"],
            "redirect_links_to": "wiki/runbook.md",
        },
        {
            "op": "replace",
            "path": "index.md",
            "old": "# Index\n",
            "new": "# Index\n\nQueue pages live under platform/.\n",
            "expected_version": "batch",
        },
    ]
    line = "- extracted failover and rollback, moved the queue under platform/"
    edits.append(
        {"op": "append", "path": "log.md", "content": line + (" [[no-such-page]]\n" if broken else "\n")}
    )
    return edits


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, blanks as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def broken(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """Links (outside code) to no file, and same-page links (``[[#X]]``, ``[t](#x)``) to no heading of
    their own page, by the independent scanner."""
    paths = set(files)
    found = []
    for path, raw in sorted(files.items()):
        if not path.endswith(".md"):
            continue
        text = raw.decode()
        headings = {h for title in HEADING.findall(text) for h in (title, slug(title))}
        for link in code_and_links(text)[1]:
            if link.target:
                dangling = ref_resolve(link, path, paths) is None
            else:
                dangling = (link.fragment or "").removeprefix("#") not in headings
            if dangling:
                found.append((path, text[link.start : link.end]))
    return found


def section_links_left(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """Links (outside code) still pointing at an extracted section's old place."""
    gone = {
        ("wiki/operations.md", "#" + f)
        for f in ("Redis failover", "redis-failover", "Redis%20failover", "Steps")
    }
    gone.add(("wiki/runbook.md", "#Rollback"))
    paths = set(files)
    found = []
    for path, raw in files.items():
        if path.endswith(".md"):
            text = raw.decode()
            for link in code_and_links(text)[1]:
                if (ref_resolve(link, path, paths), link.fragment) in gone:
                    found.append((path, text[link.start : link.end]))
    return found


async def test_a_200_page_refactor_through_mcp_in_one_commit_within_80k_characters(svc: Service) -> None:
    """One commit, no broken link, no link left on an extracted section, the deliberate broken link warned
    about first, and the whole conversation with the tools within the budget."""
    wiki = f"refactor-200-{next(_serial)}"
    seed_wiki(svc, wiki, generated_wiki())
    before, start = head_files(svc, wiki)
    assert broken(start) == []

    async with connect(svc, "stdio") as client:
        agent = Counted(client)
        await agent.list_tools()
        first = await agent.call(
            "check_batch", wiki=wiki, message="Refactor", edits=await plan_refactor(agent, wiki, broken=True)
        )
        assert first["status"] == "succeeded"
        assert [(w["code"], w["path"], w["link"]) for w in first["warnings"]] == [
            ("LINK_BROKEN", "log.md", "[[no-such-page]]")
        ]
        edits = await plan_refactor(agent, wiki, broken=False)
        checked = await agent.call(
            "check_batch", wiki=wiki, message="Refactor the platform docs", edits=edits
        )
        assert checked["status"] == "succeeded" and checked["warnings"] == []
        done = await agent.call(
            "write_batch", wiki=wiki, message="Refactor the platform docs", plan=checked["plan"]
        )
        assert done["status"] == "succeeded"

    print("characters per tool:", json.dumps(agent.chars), "total", agent.total)
    after, end = head_files(svc, wiki)
    assert after == done["commit"]
    repo = svc.data / "wikis" / f"{wiki}.git"
    assert git_text(repo, "rev-list", f"{before}..{after}").split() == [after]  # one commit on the old head
    assert broken(end) == []
    assert section_links_left(end) == []
    assert not any(path.startswith("wiki/queue/") for path in end)
    moved = sorted(path for path in end if path.startswith("wiki/platform/queue/"))
    assert len(moved) == QUEUE and "wiki/platform/queue/intake.md" in moved
    assert "wiki/legacy.md" not in end and "wiki/old-queue.md" not in end
    failover = end["wiki/operations/redis-failover.md"].decode()
    assert failover.startswith("# Redis failover\n") and "\n## Steps\n" in failover
    assert "## Redis failover" not in end["wiki/operations.md"].decode()
    assert end["wiki/runbook/rollback.md"].decode().startswith("# Rollback\n")
    for number in range(1, TOPICS + 1):
        assert CODE in end[f"wiki/topics/t-{number:03d}.md"].decode()  # code keeps its text
    assert end["raw/source.md"] == start["raw/source.md"]
    index = end["index.md"].decode()
    assert index.startswith("# Index\n\nQueue pages live under platform/.\n") and "[[intake]]" in index
    assert agent.total <= BUDGET, agent.chars
