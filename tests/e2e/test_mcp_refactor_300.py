"""A 300-page refactor stated as intent over MCP stdio (``wikiq mcp`` against real processes), counting
every character that crosses the tool interface, tool list included.

The refactor: two team pages merged into one (``merge_pages``), a heading that 38 links name renamed with
its links (``rename_section`` with ``rewrite_links``), the 25 project pages whose front matter says
``status: archived`` moved to ``wiki/archive/`` with their links (``each`` ... ``rename``), a front matter
key set on the 50 service pages, 37 of them without front matter (``each`` ... ``frontmatter``), a typo
fixed in the prose of 39 pages but not in the 549 code blocks that quote it (``replace_across`` with
``outside_code``, its count taken from ``search_wiki`` in count mode), the index and the log. Four calls:
a count, an outline, a check, the commit of its plan. Afterwards, read with plain git: one commit on the
old head, no broken link (an independent scanner), every code block as it was, the typo gone from prose.
"""

from __future__ import annotations

import itertools
import json
import re

from tests.e2e.service import Service
from tests.e2e.test_mcp import connect
from tests.e2e.test_mcp_refactor import head_files
from tests.e2e.test_mcp_refactor_200 import Counted, broken, seed_wiki
from tests.gitutil import git_text
from tests.unit.engine.markdown.test_rewrite_properties import code_and_links

_serial = itertools.count()
BUDGET = 40_000  # characters of the whole conversation with the tools (about 10 000 tokens)
PROJECTS, ARCHIVED = 60, 25
SERVICES, WITH_FRONT = 50, 13
NOTES = 183  # pages quoting the typo in code, three blocks each
TYPO_IN_PROSE = 39
POLICY_LINKS = 38
FORMS = (
    "[[incident-response#Paging policy]]",
    "[[incident-response#Paging policy|the paging policy]]",
    "[paging](../incident-response.md#paging-policy)",
)


def generated_wiki() -> dict[str, str]:
    """300 files: the root files, two team pages, the incident response page, 60 projects (25 archived),
    50 services (13 with front matter), 183 notes quoting the typo in code (39 also in prose, 38 linking
    to the paging policy), and a raw source."""
    files = {
        "log.md": "# Log\n\n- created\n",
        "schema.md": "# Schema\n\nPages under wiki/.\n",
        "wiki/teams/infra.md": (
            "---\nowner: infra\n---\n# Infra\n\nWe run the hosts.\n\n## Oncall\n\nWeekly.\n"
        ),
        "wiki/teams/sre.md": "# SRE\n\nWe keep it up; see [[infra#Oncall]].\n\n## Tools\n\nDashboards.\n",
        "wiki/incident-response.md": (
            "# Incident response\n\n## Paging policy\n\nPage the oncall of [[infra]].\n\n"
            "## Review\n\nWithin a week; follow [[#Paging policy]].\n"
        ),
        "raw/source.md": "Notes from the postmortems, as received.\n",
    }
    for n in range(PROJECTS):
        status = "archived" if n < ARCHIVED else "active"
        files[f"wiki/projects/project-{n:02d}.md"] = (
            f"---\nstatus: {status}\n---\n# Project {n}\n\nOwned by [[sre]]. "
            f"Next: [[project-{(n + 1) % PROJECTS:02d}]].\n"
        )
    for n in range(SERVICES):
        front = f"---\nowner: team-{n}\n---\n" if n < WITH_FRONT else ""
        files[f"wiki/services/service-{n:02d}.md"] = front + f"# Service {n}\n\nRuns on [[infra]].\n"
    for n in range(NOTES):
        prose = "We recieve alerts by mail.\n\n" if n < TYPO_IN_PROSE else ""
        link = f"See {FORMS[n % len(FORMS)]}.\n\n" if n < POLICY_LINKS else ""
        code = "".join(f"```\nrecieve(queue, {k})  # [[infra]]\n```\n\n" for k in range(3))
        about = f"About [[project-{n % PROJECTS:02d}]].\n\n"
        files[f"wiki/notes/note-{n:03d}.md"] = (
            f"# Note {n}\n\n{prose}{link}{about}{code}Inline `recieve()` too.\n"
        )
    names = sorted(path.rsplit("/", 1)[-1].removesuffix(".md") for path in files if path.startswith("wiki/"))
    files["index.md"] = "# Index\n\n" + "".join(f"- [[{name}]]\n" for name in names)
    assert len(files) == 300
    return files


def code_blocks(files: dict[str, bytes]) -> dict[str, list[str]]:
    """Each page's code pieces (fences, indented lines, inline spans) by its file name."""
    return {
        path.rsplit("/", 1)[-1]: code_and_links(raw.decode())[0]
        for path, raw in files.items()
        if path.endswith(".md")
    }


async def test_a_300_page_refactor_as_intent_in_four_calls_within_40k_characters(svc: Service) -> None:
    """One commit, no broken link, code untouched, every intent carried out, and the whole conversation
    with the tools, tool list included, within the budget."""
    wiki = f"refactor-300-{next(_serial)}"
    seed_wiki(svc, wiki, generated_wiki())
    before, start = head_files(svc, wiki)
    assert broken(start) == []

    async with connect(svc, "stdio") as client:
        agent = Counted(client)
        await agent.list_tools()
        counted = await agent.call(
            "search_wiki", wiki=wiki, query="recieve", prefix="wiki/", outside_code=True, count=True
        )
        assert counted["total"] == TYPO_IN_PROSE
        outline = await agent.call("page_outline", wiki=wiki, path="wiki/incident-response.md")
        edits = [
            {"op": "replace_across", "prefix": "index.md", "old": "- [[infra]]\n", "new": "- [[platform]]\n"},
            {"op": "replace_across", "prefix": "index.md", "old": "- [[sre]]\n", "new": ""},
            {
                "op": "merge_pages",
                "path": "wiki/teams/platform.md",
                "pages": ["wiki/teams/infra.md", "wiki/teams/sre.md"],
                "title": "Platform",
            },
            {
                "op": "rename_section",
                "path": "wiki/incident-response.md",
                "heading": "Paging policy",
                "new_heading": "Escalation policy",
                "rewrite_links": True,
                "expected_version": outline["version"],
            },
            {
                "op": "each",
                "select": {"prefix": "wiki/projects/", "frontmatter": {"status": "archived"}},
                "expected_count": ARCHIVED,
                "do": "rename",
                "new_path": "wiki/archive",
                "rewrite_links": True,
            },
            {
                "op": "each",
                "select": {"prefix": "wiki/services/"},
                "expected_count": SERVICES,
                "do": "frontmatter",
                "set": {"tier": 2},
            },
            {
                "op": "replace_across",
                "prefix": "wiki/",
                "old": "recieve",
                "new": "receive",
                "outside_code": True,
                "expected_count": counted["total"],
            },
            {"op": "append", "path": "log.md", "content": "- merged the teams, archived 25 projects\n"},
        ]
        checked = await agent.call("check_batch", wiki=wiki, message="Refactor by intent", edits=edits)
        assert checked["status"] == "succeeded", checked
        assert checked["warnings"] == [], checked["warnings"]
        done = await agent.call("write_batch", wiki=wiki, message="Refactor by intent", plan=checked["plan"])
        assert done["status"] == "succeeded", done

    print("characters per tool:", json.dumps(agent.chars), "total", agent.total)
    after, end = head_files(svc, wiki)
    assert after == done["commit"]
    repo = svc.data / "wikis" / f"{wiki}.git"
    assert git_text(repo, "rev-list", f"{before}..{after}").split() == [after]  # one commit on the old head
    assert broken(end) == []
    assert code_blocks(end) == {
        name: pieces for name, pieces in code_blocks(start).items() if name not in ("infra.md", "sre.md")
    } | {"platform.md": code_blocks(start)["infra.md"] + code_blocks(start)["sre.md"]}
    platform = end["wiki/teams/platform.md"].decode()
    assert (
        platform.startswith("# Platform\n\n## Infra\n")
        and "\n## SRE\n" in platform
        and "### Tools" in platform
    )
    assert "wiki/teams/infra.md" not in end and "wiki/teams/sre.md" not in end
    archived = sorted(p for p in end if p.startswith("wiki/archive/"))
    assert len(archived) == ARCHIVED and all(b"status: archived" in end[p] for p in archived)
    assert not any(b"status: archived" in end[p] for p in end if p.startswith("wiki/projects/"))
    services = [p for p in end if p.startswith("wiki/services/")]
    assert len(services) == SERVICES and all(b"tier: 2\n" in end[p] for p in services)
    prose = [code_and_links(end[p].decode()) for p in end if p.startswith("wiki/notes/")]
    assert sum(len(re.findall("receive", end[p].decode())) for p in end if p.startswith("wiki/notes/")) == 39
    assert sum(piece.count("recieve") for code, _ in prose for piece in code) == NOTES * 4
    notes = "".join(end[p].decode() for p in end if p.startswith("wiki/notes/"))
    assert "Paging policy" not in notes and "paging-policy" not in notes
    assert notes.count("#Escalation policy") + notes.count("#escalation-policy") == POLICY_LINKS
    index = end["index.md"].decode()
    assert "- [[platform]]\n" in index and "[[infra]]" not in index and "[[sre]]" not in index
    assert end["raw/source.md"] == start["raw/source.md"]
    assert agent.total <= BUDGET, agent.chars
