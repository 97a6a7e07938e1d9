"""Reads sized for the question (issue 37, point 5), in process: search only in prose, counts that are
replace_across's own, regex matches within one line, list_pages by folder, and one way to say "more".

One deployment (API app + worker in this event loop, real Redis, real git) serves the module; every test
works on wikis of its own. The MCP tools are called through ``/mcp`` on the same app (JSON-RPC, stateless).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.service.harness import Deployment, expect_error

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
_ids = itertools.count(1)

PROSE_AND_CODE = """\
---
title: a recieve typo
---
# Redis recieve

We recieve keys here, and `recieve` in a code span is code.

```python
recieve = 1  # fenced code
```

    recieve in indented code

<div>
recieve in an HTML block
</div>

Recieve with a capital, and RECIEVE shouting.
"""


async def mcp(dep: Deployment, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call over /mcp: the tool result (structured content, text, is_error)."""
    body = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    answer = await dep.client.post("/mcp", json=body, headers=MCP_HEADERS)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


async def ok(dep: Deployment, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool call that must succeed: its structured content."""
    result = await mcp(dep, tool, **arguments)
    assert not result.get("isError"), result
    content: dict[str, Any] = result["structuredContent"]
    return content


async def search(dep: Deployment, wiki: str, **params: Any) -> dict[str, Any]:
    answer = await dep.client.get(
        f"/v1/wikis/{wiki}/search",
        params={k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()},
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def dry_counts(dep: Deployment, wiki: str, edit: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """A dry run of ``edit``: its status (or error code) and replace_across's applied count per page."""
    job = await dep.apply(wiki, {"message": "count", "edits": [edit], "dry_run": True})
    if job["status"] != "succeeded":
        return job["error"]["code"], {}
    applied = job["result"]["applied"]
    return "ok", {a["path"]: a["count"] for a in applied if a["op"] == "replace_across"}


# -- outside_code ------------------------------------------------------------------------------------------


async def test_search_outside_code_skips_matches_inside_fenced_code(dep: Deployment) -> None:
    """GET /search with outside_code=true answers only the lines holding the text in prose: never in a
    fenced or indented code block, a code span, an HTML block or the front matter; letter case is still
    ignored unless case_sensitive, and a line holding it in a code span and in prose is found."""
    wiki = await dep.new_wiki("prose")
    await dep.seed(wiki, {"wiki/typo.md": PROSE_AND_CODE, "wiki/fenced.md": "```\nrecieve\n```\n"})
    everywhere = await search(dep, wiki, q="recieve")
    assert [(m["path"], m["line"]) for m in everywhere["matches"]] == [
        ("wiki/fenced.md", 2),
        ("wiki/typo.md", 2),
        ("wiki/typo.md", 4),
        ("wiki/typo.md", 6),
        ("wiki/typo.md", 9),
        ("wiki/typo.md", 12),
        ("wiki/typo.md", 15),
        ("wiki/typo.md", 18),
    ]
    prose = await search(dep, wiki, q="recieve", outside_code=True)
    assert [(m["path"], m["line"], m["text"]) for m in prose["matches"]] == [
        ("wiki/typo.md", 4, "# Redis recieve"),
        ("wiki/typo.md", 6, "We recieve keys here, and `recieve` in a code span is code."),
        ("wiki/typo.md", 18, "Recieve with a capital, and RECIEVE shouting."),
    ]
    exact = await search(dep, wiki, q="RECIEVE", outside_code=True, case_sensitive=True)
    assert [m["line"] for m in exact["matches"]] == [18]
    pattern = await search(dep, wiki, q=r"rec(ie|ei)ve\b", regex=True, outside_code=True)
    assert [m["line"] for m in pattern["matches"]] == [4, 6, 18]
    in_span_only = await search(dep, wiki, q="`recieve`", outside_code=True)
    assert in_span_only["matches"] == []


async def test_outside_code_pages_through_with_the_cursor(dep: Deployment) -> None:
    """A prose-only search cut at limit answers next_cursor; following it gives every line once."""
    wiki = await dep.new_wiki("prose-paging")
    page = "word one\n\n```\nword in code\n```\n\nword two\n"
    await dep.seed(wiki, {f"wiki/p{n}.md": page for n in range(3)})
    whole = await search(dep, wiki, q="word", outside_code=True)
    assert len(whole["matches"]) == 6 and "next_cursor" not in whole
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"q": "word", "outside_code": True, "limit": 4}
    for _ in range(5):
        body = await search(dep, wiki, **params)
        seen += body["matches"]
        if "next_cursor" not in body:
            break
        params["cursor"] = body["next_cursor"]
    assert seen == whole["matches"]


# -- counts -------------------------------------------------------------------------------------------------

COUNTED = {
    "wiki/a.md": PROSE_AND_CODE,
    "wiki/b.md": "recieve recieve\nrecieverecieve\n# Recieve\n",
    "wiki/c/d.md": "nothing to see\n",
    "wiki/e.md": "line a\nb line\n",
    "raw/r.md": "recieve in raw, never changed\n",
}


@pytest.mark.parametrize(
    ("params", "edit"),
    [
        ({"q": "recieve"}, {"old": "recieve"}),
        ({"q": "recieve", "prefix": "wiki/"}, {"old": "recieve", "prefix": "wiki/"}),
        ({"q": "recieve", "outside_code": True}, {"old": "recieve", "outside_code": True}),
        ({"q": "Recieve"}, {"old": "Recieve"}),
        ({"q": "rec[ie]+ve", "regex": True}, {"pattern": "rec[ie]+ve"}),
        ({"q": "^# ", "regex": True}, {"pattern": "^# "}),
        ({"q": "(?m)^# ", "regex": True}, {"pattern": "(?m)^# "}),
        ({"q": "a[^x]*b", "regex": True}, {"pattern": "a[^x]*b"}),
    ],
    ids=["literal", "prefix", "outside-code", "case", "pattern", "page-start", "line-start", "across-lines"],
)
async def test_count_is_what_replace_across_replaces(
    dep: Deployment, params: dict[str, Any], edit: dict[str, Any]
) -> None:
    """count=true answers, per page and in all, the counts a dry run of replace_across with the same
    text (old) or pattern, prefix and outside_code applies, whatever case_sensitive says; its total sent
    as expected_count passes the check (no COUNT_MISMATCH)."""
    wiki = await dep.new_wiki("count")
    await dep.seed(wiki, COUNTED)
    counted = await search(dep, wiki, count=True, case_sensitive=False, **params)
    edit = {"op": "replace_across", "prefix": "", "new": "X"} | edit
    status, applied = await dry_counts(dep, wiki, edit)
    assert status == "ok", status
    assert counted["matches"] == [] and "next_cursor" not in counted
    assert {p["path"]: p["count"] for p in counted["pages"]} == applied
    assert [p["path"] for p in counted["pages"]] == sorted(applied)
    assert counted["total"] == sum(applied.values()) > 0
    assert "raw/r.md" not in applied
    status, _ = await dry_counts(dep, wiki, edit | {"expected_count": counted["total"]})
    assert status == "ok"


async def test_count_of_nothing_and_its_pages_by_cursor(dep: Deployment) -> None:
    """No match counts 0 on no page; counts cut at limit pages answer next_cursor and the same total, and
    following it lists every page once. outside_code with a pattern is refused, as replace_across refuses
    it."""
    wiki = await dep.new_wiki("count-paging")
    await dep.seed(wiki, {f"wiki/p{n}.md": "zz " * (n + 1) + "\n" for n in range(5)})
    assert await search(dep, wiki, q="absent", count=True) == {"matches": [], "pages": [], "total": 0}
    whole = await search(dep, wiki, q="zz", count=True)
    assert whole["total"] == 15 and [p["count"] for p in whole["pages"]] == [1, 2, 3, 4, 5]
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"q": "zz", "count": True, "limit": 2}
    for _ in range(5):
        body = await search(dep, wiki, **params)
        assert body["total"] == 15 and len(body["pages"]) <= 2
        seen += body["pages"]
        if "next_cursor" not in body:
            break
        params["cursor"] = body["next_cursor"]
    assert seen == whole["pages"]
    refused = await dep.client.get(
        f"/v1/wikis/{wiki}/search",
        params={"q": "w+", "regex": "true", "count": "true", "outside_code": "true"},
    )
    expect_error(refused, 422, "INVALID_BATCH")


# -- a regex match stays on its line -----------------------------------------------------------------------


async def test_a_regex_match_never_spans_lines_unless_asked(dep: Deployment) -> None:
    """A class like [^x] could run across line breaks: by default a match stays within its line (a line
    whose own text matches is found even when the leftmost match would cross lines), and a pattern naming
    a line break matches nothing; multiline=true lets matches cross lines, reported where they start."""
    wiki = await dep.new_wiki("lines")
    await dep.seed(
        wiki,
        {
            "wiki/a.md": "alpha one\nnothing\nbeta two\n",
            "wiki/b.md": "a1b then a2\nthen b\n",
            "wiki/c.md": "end\nstart\n",
        },
    )
    spanning = await search(dep, wiki, q="alpha[^x]*beta", regex=True)
    assert spanning["matches"] == []
    within = await search(dep, wiki, q="a[^x]*b", regex=True, prefix="wiki/b")
    assert [(m["line"], m["text"]) for m in within["matches"]] == [(1, "a1b then a2")]
    assert (await search(dep, wiki, q="end\\nstart", regex=True))["matches"] == []
    crossing = await search(dep, wiki, q="alpha[^x]*beta", regex=True, multiline=True)
    assert [(m["path"], m["line"], m["text"]) for m in crossing["matches"]] == [("wiki/a.md", 1, "alpha one")]
    newline = await search(dep, wiki, q="end\\nstart", regex=True, multiline=True)
    assert [(m["path"], m["line"]) for m in newline["matches"]] == [("wiki/c.md", 1)]
    anchored = await search(dep, wiki, q="^b.*$", regex=True)
    assert [(m["path"], m["line"]) for m in anchored["matches"]] == [("wiki/a.md", 3)]


# -- the MCP tools ---------------------------------------------------------------------------------------


async def test_list_pages_answers_names_by_folder_and_versions_on_request(dep: Deployment) -> None:
    """list_pages answers the file names grouped by folder ('' for the top), in path order, with
    next_cursor; versions=true answers each file's path, version and size as the HTTP listing does."""
    wiki = await dep.new_wiki("compact")
    versions = await dep.seed(
        wiki, {"wiki/db/redis.md": "r\n", "wiki/db/pg.md": "p\n", "wiki/a.md": "a\n", "wiki/db/x/y.md": "y\n"}
    )
    compact = await ok(dep, "list_pages", wiki=wiki)
    assert compact == {
        "folders": {
            "": ["index.md", "log.md", "schema.md"],
            "wiki/": ["a.md"],
            "wiki/db/": ["pg.md", "redis.md"],
            "wiki/db/x/": ["y.md"],
        },
        "next_cursor": None,
    }
    cut = await ok(dep, "list_pages", wiki=wiki, prefix="wiki/", limit=2)
    assert cut["folders"] == {"wiki/": ["a.md"], "wiki/db/": ["pg.md"]} and cut["next_cursor"]
    rest = await ok(dep, "list_pages", wiki=wiki, prefix="wiki/", cursor=cut["next_cursor"])
    assert rest == {"folders": {"wiki/db/": ["redis.md"], "wiki/db/x/": ["y.md"]}, "next_cursor": None}
    full = await ok(dep, "list_pages", wiki=wiki, prefix="wiki/db/", versions=True)
    http = (await dep.client.get(f"/v1/wikis/{wiki}/pages", params={"prefix": "wiki/db/"})).json()
    assert full == {"pages": http["pages"], "next_cursor": None}
    assert {p["path"]: p["version"] for p in full["pages"]} == {
        p: v for p, v in versions.items() if p.startswith("wiki/db/")
    }
    assert set(http) == {"pages", "next_cursor"}  # the HTTP listing is unchanged


async def test_every_read_tool_says_more_with_next_cursor(dep: Deployment) -> None:
    """search_wiki (lines and counts), find_backlinks and list_pages answer next_cursor always: null when
    the answer is whole, else the cursor that answers the rest; find_backlinks no longer answers
    truncated."""
    wiki = await dep.new_wiki("more")
    await dep.seed(
        wiki, {"wiki/t.md": "# T\n", "wiki/a.md": "[[t]]\n[[t]] and t\n", "wiki/b.md": "[[t]] t\n"}
    )
    lines = await ok(dep, "search_wiki", wiki=wiki, query="[[t]]", limit=2)
    assert len(lines["matches"]) == 2 and lines["next_cursor"]
    rest = await ok(dep, "search_wiki", wiki=wiki, query="[[t]]", limit=2, cursor=lines["next_cursor"])
    assert [(m["path"], m["line"]) for m in rest["matches"]] == [("wiki/b.md", 1)] and rest[
        "next_cursor"
    ] is None
    counts = await ok(dep, "search_wiki", wiki=wiki, query="[[t]]", count=True, limit=1)
    assert counts["next_cursor"] and counts == {
        "matches": [],
        "pages": [{"path": "wiki/a.md", "count": 2}],
        "total": 3,
        "next_cursor": counts["next_cursor"],
    }
    more = await ok(dep, "search_wiki", wiki=wiki, query="[[t]]", count=True, cursor=counts["next_cursor"])
    assert more == {
        "matches": [],
        "pages": [{"path": "wiki/b.md", "count": 1}],
        "total": 3,
        "next_cursor": None,
    }
    first = await ok(dep, "find_backlinks", wiki=wiki, path="wiki/t.md", limit=2)
    assert len(first["backlinks"]) == 2 and first["next_cursor"] and "truncated" not in first
    last = await ok(dep, "find_backlinks", wiki=wiki, path="wiki/t.md", cursor=first["next_cursor"])
    assert [b["path"] for b in last["backlinks"]] == ["wiki/b.md"] and last["next_cursor"] is None
    read = await ok(dep, "read_pages", wiki=wiki, paths=["wiki/t.md"])
    assert read["next_cursor"] is None and [p["path"] for p in read["pages"]] == ["wiki/t.md"]
    prose = await ok(
        dep, "search_wiki", wiki=wiki, query="t", prefix="wiki/", outside_code=True, case_sensitive=True
    )
    # a link's target is not prose: a.md's first line holds t only as one
    assert [(m["path"], m["line"]) for m in prose["matches"]] == [("wiki/a.md", 2), ("wiki/b.md", 1)]


async def test_read_pages_stops_at_its_budget_and_the_cursor_reads_on(fresh: Any) -> None:
    """Past max_file_bytes of content in all, read_pages stops: the page that does not fit and those after
    it are BATCH_TOO_LARGE entries and next_cursor resumes at it (HTTP and MCP); the same paths with the
    cursor read the rest; a cursor naming none of the paths is INVALID_BATCH."""
    async with fresh(max_file_bytes=1024) as dep:
        wiki = await dep.new_wiki("budget")
        files = {f"wiki/p{n}.md": f"{n}" * 410 + "\n" for n in range(5)}
        await dep.seed(wiki, files)
        paths = ["wiki/p0.md", "wiki/none.md", "wiki/p1.md", "wiki/p2.md", "wiki/p3.md", "wiki/p4.md"]
        url = f"/v1/wikis/{wiki}/pages:read"
        first = (await dep.client.post(url, json={"paths": paths})).json()
        assert [p["path"] for p in first["pages"]] == ["wiki/p0.md", "wiki/p1.md"]
        assert [(e["path"], e["code"]) for e in first["errors"]] == [
            ("wiki/none.md", "NOT_FOUND"),
            ("wiki/p2.md", "BATCH_TOO_LARGE"),
            ("wiki/p3.md", "BATCH_TOO_LARGE"),
            ("wiki/p4.md", "BATCH_TOO_LARGE"),
        ]
        second = (await dep.client.post(url, json={"paths": paths, "cursor": first["next_cursor"]})).json()
        assert [p["path"] for p in second["pages"]] == ["wiki/p2.md", "wiki/p3.md"] and second["next_cursor"]
        third = await ok(dep, "read_pages", wiki=wiki, paths=paths, cursor=second["next_cursor"])
        assert [p["path"] for p in third["pages"]] == ["wiki/p4.md"]
        assert third["errors"] == [] and third["next_cursor"] is None
        assert [p["content"] for p in first["pages"] + second["pages"] + third["pages"]] == list(
            files.values()
        )
        whole = (await dep.client.post(url, json={"paths": ["wiki/p0.md"]})).json()
        assert "next_cursor" not in whole
        foreign = await dep.client.post(url, json={"paths": ["wiki/p0.md"], "cursor": first["next_cursor"]})
        expect_error(foreign, 422, "INVALID_BATCH")
