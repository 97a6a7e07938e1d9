"""A whole refactor scripted through the MCP tools over stdio (``wikiq mcp`` against real processes), on a
generated 30-page wiki: split a page into its sections, move a folder of five pages with rewrite_links,
fix the index, append to the log — ONE batch, one commit — and afterwards not one broken link, as an
independent link scanner (regexes over code-masked text, plain git to read the tree) finds. A dry run of
the same batch answers a summary (a line per edit and per changed file, no broken link, no code changed)
and no warnings, the diffs only when asked for; with a deliberate broken link it answers that warning.
"""

from __future__ import annotations

import itertools
from typing import Any

from mcp import Client

from tests.e2e.service import Service
from tests.e2e.test_mcp import call, connect, data, error
from tests.gitutil import git_text, tree_files
from tests.unit.engine.markdown.test_rewrite_properties import code_and_links, ref_resolve

_serial = itertools.count()
TOPICS = 20
LEGACY = 5
SECTIONS = ("Install", "Configure", "Operate")


def generated_wiki() -> dict[str, str]:
    """30 files: the three root files, a guide with three sections, 20 topics, five legacy pages that
    link to each other and are linked to in every form (bare, path-qualified, relative, embeds, in
    code), and a raw source."""
    files: dict[str, str] = {}
    topics = [f"topic-{n:02d}" for n in range(1, TOPICS + 1)]
    legacy = [f"legacy-{n}" for n in range(1, LEGACY + 1)]
    files["index.md"] = "# Index\n\n" + "".join(f"- [[{name}]]\n" for name in ["guide", *topics, *legacy])
    files["log.md"] = "# Log\n\n- created\n"
    files["schema.md"] = "# Schema\n\nPages under wiki/.\n"
    files["wiki/guide.md"] = (
        "# Guide\n\nRead [[topic-01]] first.\n\n"
        "## Install\n\nGet it, then see [[topic-02]] and [[legacy-1]].\n\n"
        "## Configure\n\nEdit [[topic-03]] as [the old notes](old/legacy-2.md) say.\n\n"
        "## Operate\n\nWatch [[old/legacy-3#Alerts|alerts]].\n"
    )
    forms = [
        "See [[{l}]].",
        "See [[old/{l}|the old page]].",
        "See [it](../old/{l}.md#top).",
        "Embed: ![[{l}]]",
        "See [[/wiki/old/{l}.md]].",
    ]
    for number, name in enumerate(topics):
        target = legacy[number % LEGACY]
        nxt = topics[(number + 1) % TOPICS]
        files[f"wiki/topics/{name}.md"] = (
            f"# {name}\n\nNext: [[{nxt}]]. {forms[number % len(forms)].format(l=target)}\n\n"
            f"```\n[[{target}]] in code is not a link\n```\n\nInline `[[{target}]]` neither.\n"
        )
    for number, name in enumerate(legacy):
        other = legacy[(number + 1) % LEGACY]
        files[f"wiki/old/{name}.md"] = (
            f"# {name}\n\n## Alerts\n\nSee [{other}]({other}.md), "
            f"[a topic](../topics/topic-0{number + 1}.md) and [[guide]].\n"
        )
    files["raw/source.md"] = "Source notes, cited by [[guide]].\n"
    assert len(files) == 30
    return files


def broken_links(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """Every link (outside code) of every .md file that resolves to no file, by the independent scanner."""
    paths = set(files)
    found = []
    for path, raw in sorted(files.items()):
        if not path.endswith(".md"):
            continue
        text = raw.decode()
        for link in code_and_links(text)[1]:
            if ref_resolve(link, path, paths) is None:
                found.append((path, text[link.start : link.end]))
    return found


def head_files(svc: Service, wiki: str) -> tuple[str, dict[str, bytes]]:
    """The head commit of a wiki and its files, read with plain git."""
    repo = svc.data / "wikis" / f"{wiki}.git"
    commit = git_text(repo, "rev-parse", "main").strip()
    return commit, tree_files(repo, commit)


async def plan_refactor(client: Client, wiki: str, broken: bool = False) -> list[dict[str, Any]]:
    """The agent's part: read what it needs through the tools and build the ONE batch of the refactor."""
    outline = data(await call(client, "page_outline", wiki=wiki, path="wiki/guide.md"))
    guide = data(await call(client, "read_page", wiki=wiki, path="wiki/guide.md"))
    assert guide["version"] == outline["version"]
    lines = guide["content"].splitlines(keepends=True)
    sections = {s["heading"]: s for s in outline["sections"]}
    edits: list[dict[str, Any]] = []
    for heading in SECTIONS:
        section = sections[heading]
        body = "".join(lines[section["line"] : section["end_line"]]).strip("\n") + "\n"
        body = body.replace("](old/", "](../old/")  # the text moves one folder down: so do its relative links
        if broken and heading == "Operate":
            body += "And [[no-such-page]].\n"
        slug = heading.lower()
        edits.append({"op": "create", "path": f"wiki/guide/{slug}.md", "content": f"# {heading}\n\n{body}"})
        edits.append(
            {
                "op": "replace_section",
                "path": "wiki/guide.md",
                "heading": section["address"],
                "content": f"\nMoved to [[guide/{slug}]].\n\n",
                "expected_section_version": section["version"],
            }
        )
    backlinks = data(await call(client, "find_backlinks", wiki=wiki, path="wiki/old/legacy-1.md"))
    assert len(backlinks["backlinks"]) >= TOPICS // LEGACY
    edits.append({"op": "rename", "path": "wiki/old", "new_path": "wiki/archive", "rewrite_links": True})
    index = data(await call(client, "read_page", wiki=wiki, path="index.md"))
    new_entries = "".join(f"- [[guide/{heading.lower()}]]\n" for heading in SECTIONS)
    edits.append(
        {"op": "replace", "path": "index.md", "old": "- [[guide]]\n", "new": "- [[guide]]\n" + new_entries}
        | {"expected_version": index["version"]}
    )
    edits.append({"op": "append", "path": "log.md", "content": "- split the guide, archived wiki/old\n"})
    return edits


async def test_scripted_refactor_through_mcp_stdio(svc: Service) -> None:
    """check_batch answers its summary and checks and no warnings (and LINK_BROKEN for a deliberate
    broken link), get_job the diffs asked for; write_batch lands it as one commit; afterwards no link is
    broken."""
    wiki = f"refactor-mcp-{next(_serial)}"
    svc.create_wiki(wiki)
    files = generated_wiki()
    seed = [
        {
            "op": "overwrite" if path in ("index.md", "log.md", "schema.md") else "create",
            "path": path,
            "content": text,
        }
        for path, text in files.items()
    ]
    for edit in seed:
        if edit["op"] == "overwrite":
            edit["expected_version"] = svc.page(wiki, edit["path"])["version"]
    assert svc.apply(wiki, {"message": "seed", "edits": seed})["status"] == "succeeded"
    before, start_files = head_files(svc, wiki)
    assert broken_links(start_files) == []

    async with connect(svc, "stdio") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert (
            tools["check_batch"].annotations is not None and tools["check_batch"].annotations.read_only_hint
        )
        edits = await plan_refactor(client, wiki)

        checked = data(await call(client, "check_batch", wiki=wiki, edits=edits, message="Refactor"))
        assert checked["status"] == "succeeded"
        assert checked["warnings"] == [] and "diff" not in checked  # a summary: diffs only on request
        # verified without reading a diff: no link broken, code untouched, the topics only link-rewritten
        checks = checked["checks"]
        assert (checks["links"]["broken_before"], checks["links"]["broken_after"]) == (0, 0)
        assert (checks["code_changed"], checks["unnamed"]) == (0, 12)
        assert checked["edits"][6] == "6 rename 5 files in wiki/old/ -> wiki/archive/, links 14 in 14 pages"
        files = checked["files"]
        assert {f"wiki/guide/{s.lower()}.md" for s in SECTIONS} <= {line.split(" ")[0] for line in files}
        assert {"wiki/guide.md +4 -3", "index.md +3 -0", "log.md +1 -0"} <= set(files)
        assert "wiki/archive/* 5 files (5 moved) +0 -0" in files
        assert "wiki/topics/* 12 files +12 -12, links 12, 12 unnamed" in files  # a link each
        shown = data(
            await call(client, "get_job", job_id=checked["job_id"], diff=["wiki/guide.md", "wiki/old/"])
        )
        diffs = {d["path"]: d for d in shown["diff"]}
        assert set(diffs) == {"wiki/guide.md", *(f"wiki/archive/legacy-{n}.md" for n in range(1, LEGACY + 1))}
        assert {diffs[f"wiki/archive/legacy-{n}.md"]["old_path"] for n in range(1, LEGACY + 1)} == {
            f"wiki/old/legacy-{n}.md" for n in range(1, LEGACY + 1)
        }
        assert "+Moved to [[guide/install]].\n" in diffs["wiki/guide.md"]["diff"]
        topics = data(await call(client, "get_job", job_id=checked["job_id"], diff=["wiki/topics/"]))["diff"]
        qualified = {f"wiki/topics/topic-{n + 1:02d}.md" for n in range(TOPICS) if n % 5 in (1, 2, 4)}
        assert {d["path"] for d in topics} == qualified

        bad = await plan_refactor(client, wiki, broken=True)
        warned = data(await call(client, "check_batch", wiki=wiki, edits=bad))
        assert [(w["code"], w["path"], w["link"]) for w in warned["warnings"]] == [
            ("LINK_BROKEN", "wiki/guide/operate.md", "[[no-such-page]]")
        ]
        assert warned["checks"]["links"]["broken_after"] == 1
        assert head_files(svc, wiki)[0] == before  # checks commit nothing

        outcome = data(
            await call(client, "write_batch", wiki=wiki, message="Split the guide, archive old", edits=edits)
        )
        assert outcome["status"] == "succeeded" and len(outcome["commit"]) == 40
        stale = error(await call(client, "write_batch", wiki=wiki, message="Again", edits=edits))
        assert stale["code"] in ("PATH_EXISTS", "VERSION_MISMATCH") and stale["index"] == 0

    after, end_files = head_files(svc, wiki)
    assert after == outcome["commit"]
    repo = svc.data / "wikis" / f"{wiki}.git"
    assert git_text(repo, "rev-list", f"{before}..{after}").split() == [after]  # one commit on the old head
    assert broken_links(end_files) == []
    assert not any(path.startswith("wiki/old/") for path in end_files)
    assert end_files["raw/source.md"] == start_files["raw/source.md"]
    for number in range(1, TOPICS + 1):  # code keeps its text
        page = end_files[f"wiki/topics/topic-{number:02d}.md"].decode()
        target = f"legacy-{(number - 1) % LEGACY + 1}"
        assert f"```\n[[{target}]] in code is not a link\n```" in page and f"`[[{target}]]`" in page
    assert end_files["log.md"].decode().endswith("- split the guide, archived wiki/old\n")
    assert "Get it, then see [[topic-02]] and [[legacy-1]]." in end_files["wiki/guide/install.md"].decode()


async def test_argument_errors_come_back_as_refusals_naming_the_field(svc: Service) -> None:
    """Arguments that fail a tool's schema are answered like any refusal: {error, hint}, naming the field
    and the failing edit's index, never a bare text error."""
    wiki = f"args-{next(_serial)}"
    svc.create_wiki(wiki)
    async with connect(svc, "stdio") as client:
        missing = error(
            await call(
                client, "check_batch", wiki=wiki, edits=[{"op": "replace", "path": "index.md", "old": "x"}]
            )
        )
        assert (missing["code"], missing["index"]) == ("INVALID_BATCH", 0)
        assert missing["message"].startswith("edits.0.new:") and missing["hint"]
        extra = error(
            await call(
                client,
                "write_batch",
                wiki=wiki,
                message="m",
                edits=[{"op": "append", "path": "log.md", "content": "x", "colour": "red"}],
            )
        )
        assert (extra["code"], extra["index"], extra["message"]) == (
            "INVALID_BATCH",
            0,
            "edits.0.colour: unknown field",
        )
        bad_wiki = error(await call(client, "list_pages", wiki="Not A Wiki"))
        assert bad_wiki["code"] == "INVALID_BATCH" and bad_wiki["message"].startswith("wiki:")
        empty = error(await call(client, "write_batch", wiki=wiki, message="m", edits=[]))
        assert empty["code"] == "BATCH_EMPTY"
        unknown_op = error(await call(client, "check_batch", wiki=wiki, edits=[{"op": "move", "path": "x"}]))
        assert unknown_op["index"] == 0 and "append" in unknown_op["message"]
        pattern = error(
            await call(
                client,
                "check_batch",
                wiki=wiki,
                edits=[{"op": "replace_across", "prefix": "wiki/", "pattern": "(?<=a)b", "new": "c"}],
            )
        )
        assert (pattern["code"], pattern["index"]) == ("PATTERN_INVALID", 0) and "RE2" in pattern["hint"]
