"""Plans in process: a dry run's ``result.plan`` commits what it checked, once, or fails PLAN_STALE."""

from __future__ import annotations

from tests.gitutil import git_text
from tests.service.harness import Deployment, expect_error


async def _check(dep: Deployment, wiki: str, edits: list[dict[str, object]]) -> dict[str, object]:
    job = await dep.apply(wiki, {"message": "planned change", "edits": edits, "dry_run": True})
    assert job["status"] == "succeeded", job
    return job


async def test_a_plan_commits_byte_for_byte_what_its_dry_run_showed(dep: Deployment) -> None:
    """The dry run answers a plan; submitting only the plan makes one commit whose applied list and
    resulting versions are the dry run's, with the dry run's message."""
    wiki = await dep.new_wiki("plan")
    v = await dep.seed(wiki, {"wiki/a.md": "# A\nold text\n"})
    edits = [
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "old",
            "new": "new",
            "expected_version": v["wiki/a.md"],
        },
        {"op": "create", "path": "wiki/b.md", "content": "# B\n[[a]]\n"},
    ]
    checked = await _check(dep, wiki, edits)
    plan = checked["result"]["plan"]
    assert isinstance(plan, str) and plan
    job = await dep.apply(wiki, {"plan": plan})
    assert job["status"] == "succeeded", job
    assert job["result"]["applied"] == checked["result"]["applied"]
    assert "plan" not in job["result"] and "checks" not in job["result"]  # a real run: no review
    # what write_batch over MCP answers for a plan: its dry run's checks, still kept once committed
    kept = await dep.wait(checked["job_id"])
    assert kept["result"]["checks"] == checked["result"]["checks"]
    assert (await dep.page(wiki, "wiki/a.md"))["content"] == "# A\nnew text\n"
    message = git_text(dep.repo(wiki), "log", "-1", "--format=%s", "main")
    assert message.strip() == "planned change"


async def test_a_dry_run_answers_its_checks(dep: Deployment) -> None:
    """Over HTTP a dry run's result carries its checks beside the diff: every changed file with its line
    counts, links rewritten and code changed, the broken links before and after, the code pieces
    changed in all and the files no edit named."""
    wiki = await dep.new_wiki("plan-checks")
    v = await dep.seed(
        wiki,
        {
            "wiki/a.md": "# A\n\n```\n[[b]] in code\n```\n",
            "wiki/b.md": "# B\n",
            "wiki/c.md": "See [[b]] and [[gone]].\n",
        },
    )
    edits = [
        {"op": "rename", "path": "wiki/b.md", "new_path": "wiki/sub/bee.md", "rewrite_links": True}
        | {"expected_version": v["wiki/b.md"]},
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "in code",
            "new": "changed",
            "expected_version": v["wiki/a.md"],
        },
    ]
    checks = (await _check(dep, wiki, edits))["result"]["checks"]
    assert checks == {
        "links": {"pages": 3, "broken_before": 1, "broken_after": 1, "ambiguous_after": 0},
        "code_changed": 2,
        "unnamed": 1,
        "files": [
            {"path": "wiki/a.md", "change": "modified", "added": 1, "removed": 1}
            | {"code_added": 1, "code_removed": 1, "named": True},
            {"path": "wiki/c.md", "change": "modified", "added": 1, "removed": 1, "links": 1, "named": False},
            {"path": "wiki/sub/bee.md", "old_path": "wiki/b.md", "change": "moved", "added": 0, "removed": 0}
            | {"named": True},
        ],
    }


async def test_a_plan_is_checked_again_on_a_moved_head(dep: Deployment) -> None:
    """Another writer changed an unrelated page since the check: the plan still lands, on top of it."""
    wiki = await dep.new_wiki("plan-moved")
    v = await dep.seed(wiki, {"wiki/a.md": "a\n", "wiki/other.md": "o\n"})
    checked = await _check(
        dep,
        wiki,
        [{"op": "overwrite", "path": "wiki/a.md", "content": "A\n", "expected_version": v["wiki/a.md"]}],
    )
    other = {
        "op": "overwrite",
        "path": "wiki/other.md",
        "content": "O\n",
        "expected_version": v["wiki/other.md"],
    }
    assert (await dep.apply(wiki, {"message": "meanwhile", "edits": [other]}))["status"] == "succeeded"
    job = await dep.apply(wiki, {"plan": checked["result"]["plan"], "message": "my own message"})
    assert job["status"] == "succeeded", job
    assert job["result"]["applied"] == checked["result"]["applied"]
    assert (await dep.page(wiki, "wiki/other.md"))["content"] == "O\n"
    assert git_text(dep.repo(wiki), "log", "-1", "--format=%s", "main").strip() == "my own message"


async def test_a_plan_whose_result_would_differ_is_stale_and_writes_nothing(dep: Deployment) -> None:
    """A replace_across checked on two pages; a third page with a match appears meanwhile: landing would
    change more than was shown, so the job fails PLAN_STALE and main stays where the other writer left it."""
    wiki = await dep.new_wiki("plan-stale")
    await dep.seed(wiki, {"wiki/x.md": "redis\n", "wiki/y.md": "redis\n"})
    checked = await _check(
        dep, wiki, [{"op": "replace_across", "prefix": "wiki/", "old": "redis", "new": "valkey"}]
    )
    assert (
        await dep.apply(
            wiki, {"message": "m", "edits": [{"op": "create", "path": "wiki/z.md", "content": "redis\n"}]}
        )
    )["status"] == "succeeded"
    head = await dep.head(wiki)
    job = await dep.apply(wiki, {"plan": checked["result"]["plan"]})
    assert job["status"] == "failed", job
    assert job["error"]["code"] == "PLAN_STALE" and "check the batch again" in job["error"]["message"]
    assert await dep.head(wiki) == head


async def test_a_plan_commits_once_and_only_for_its_submitter(dep: Deployment) -> None:
    """A used, made-up or other-wiki plan is PLAN_NOT_FOUND (404) and queues nothing; a batch may not set
    ``expect`` itself."""
    wiki = await dep.new_wiki("plan-once")
    other = await dep.new_wiki("plan-other")
    checked = await _check(dep, wiki, [{"op": "create", "path": "wiki/once.md", "content": "1\n"}])
    plan = checked["result"]["plan"]
    expect_error(await dep.submit(other, {"plan": plan}), 404, "PLAN_NOT_FOUND")
    assert (await dep.apply(wiki, {"plan": plan}))["status"] == "succeeded"
    head = await dep.head(wiki)
    expect_error(await dep.submit(wiki, {"plan": plan}), 404, "PLAN_NOT_FOUND")
    expect_error(await dep.submit(wiki, {"plan": "plan-01NOTAJOB"}), 404, "PLAN_NOT_FOUND")
    forged = {"message": "m", "edits": [{"op": "create", "path": "wiki/f.md", "content": "f"}], "expect": []}
    expect_error(await dep.submit(wiki, forged), 422, "INVALID_BATCH")
    assert await dep.head(wiki) == head


async def test_a_failed_dry_run_has_no_plan(dep: Deployment) -> None:
    """A dry run that fails has nothing to commit: no plan in its result (its error's is to amend it)."""
    wiki = await dep.new_wiki("plan-none")
    job = await dep.apply(
        wiki,
        {
            "message": "m",
            "dry_run": True,
            "edits": [{"op": "delete", "path": "wiki/nope.md", "expected_version": "0" * 40}],
        },
    )
    assert job["status"] == "failed" and job["result"] is None


async def test_a_failed_check_is_corrected_by_sending_only_the_fixed_edits(dep: Deployment) -> None:
    """A check fails on two of its four edits and answers error.plan; amending those two (and appending a
    fifth) checks the whole batch anew, it passes, its plan commits, and plain git shows every edit. The
    failed check is still kept: reading its answer again does not cut its time short."""
    wiki = await dep.new_wiki("amend")
    v = await dep.seed(wiki, {"wiki/a.md": "alpha\n", "wiki/b.md": "beta\n", "wiki/c.md": "gamma\n"})
    edits = [
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "alpha",
            "new": "ALPHA",
            "expected_version": v["wiki/a.md"],
        },
        {
            "op": "replace",
            "path": "wiki/b.md",
            "old": "delta",
            "new": "x",
            "expected_version": v["wiki/b.md"],
        },
        {"op": "create", "path": "wiki/d.md", "content": "# D\n"},
        {"op": "overwrite", "path": "wiki/c.md", "content": "C\n", "expected_version": v["wiki/a.md"]},
    ]
    failed = await dep.apply(wiki, {"message": "four edits", "edits": edits, "dry_run": True})
    assert failed["status"] == "failed" and failed["result"] is None, failed
    error = failed["error"]
    assert [(each["index"], each["code"]) for each in error["errors"]] == [
        (1, "OLD_NOT_FOUND"),
        (3, "VERSION_MISMATCH"),
    ], error
    token = error["plan"]
    assert token.startswith("plan-"), error
    assert (await dep.wait(failed["job_id"]))["error"]["plan"] == token  # read twice: still there
    assert await dep.redis.ttl(f"wikiq:job:{failed['job_id']}") > 60  # "read once" does not cut it short
    amend = {
        "1": {**edits[1], "old": "beta", "new": "BETA"},
        "3": {**edits[3], "expected_version": error["errors"][1]["details"]["current_version"]},
        "4": {"op": "append", "path": "wiki/d.md", "content": "appended\n"},
    }
    checked = await dep.apply(wiki, {"plan": token, "amend": amend, "dry_run": True})
    assert checked["status"] == "succeeded", checked
    assert checked["dry_run"] is True and checked["job_id"] != failed["job_id"]
    assert sorted({entry["index"] for entry in checked["result"]["applied"]}) == [0, 1, 2, 3, 4]
    head = await dep.head(wiki)
    assert head == git_text(dep.repo(wiki), "rev-parse", "main").strip()  # the check wrote nothing
    job = await dep.apply(wiki, {"plan": checked["result"]["plan"]})
    assert job["status"] == "succeeded", job
    repo = dep.repo(wiki)
    assert git_text(repo, "log", "-1", "--format=%s", "main").strip() == "four edits"
    shown = {name: git_text(repo, "show", f"main:wiki/{name}.md") for name in ("a", "b", "c", "d")}
    assert shown == {"a": "ALPHA\n", "b": "BETA\n", "c": "C\n", "d": "# D\nappended\n"}


async def test_an_amendment_is_refused_whole_when_an_index_is_past_the_end(dep: Deployment) -> None:
    """An index past the checked batch's end (beyond the one that appends) is INVALID_BATCH, a failed
    check's token without amend commits nothing (PLAN_NOT_FOUND), dry_run needs amend; nothing is queued
    or written."""
    wiki = await dep.new_wiki("amend-range")
    failed = await dep.apply(
        wiki,
        {
            "message": "m",
            "dry_run": True,
            "edits": [{"op": "delete", "path": "wiki/nope.md", "expected_version": "0" * 40}],
        },
    )
    token = failed["error"]["plan"]
    head, jobs = await dep.head(wiki), len(await dep.jobs(wiki))
    fix = {"op": "create", "path": "wiki/yes.md", "content": "y\n"}
    error = expect_error(await dep.submit(wiki, {"plan": token, "amend": {"2": fix}}), 422, "INVALID_BATCH")
    assert "no edit 2" in error["message"], error
    expect_error(await dep.submit(wiki, {"plan": token, "amend": {"-1": fix}}), 422, "INVALID_BATCH")
    expect_error(await dep.submit(wiki, {"plan": token}), 404, "PLAN_NOT_FOUND")
    expect_error(await dep.submit(wiki, {"plan": token, "dry_run": True}), 422, "INVALID_BATCH")
    refused = await dep.submit(wiki, {"plan": token, "amend": {"0": {**fix, "path": "wiki/../x.md"}}})
    expect_error(refused, 422, "INVALID_PATH", 0)  # the amended batch is checked as any batch
    assert await dep.head(wiki) == head and len(await dep.jobs(wiki)) == jobs
    assert "wiki/yes.md" not in await dep.pages(wiki)


async def test_a_selection_is_learned_by_a_check_and_landed_by_its_plan(dep: Deployment) -> None:
    """An each without expected_count: written, it is COUNT_REQUIRED and queues nothing; checked, the dry
    run names the pages picked; its plan lands exactly those. A page that starts to match meanwhile makes
    the plan stale (it guards the selection as the count would)."""
    wiki = await dep.new_wiki("plan-each")
    await dep.seed(
        wiki,
        {
            "wiki/p/a.md": "---\nstatus: archived\n---\n# A\n",
            "wiki/p/b.md": "---\nstatus: active\n---\n# B\n",
            "wiki/p/c.md": "---\nstatus: archived\n---\n# C\n",
        },
    )
    edits: list[dict[str, object]] = [
        {
            "op": "each",
            "select": {"prefix": "wiki/p/", "frontmatter": {"status": "archived"}},
            "do": "frontmatter",
            "set": {"owner": "ops"},
        }
    ]
    head = await dep.head(wiki)
    error = expect_error(await dep.submit(wiki, {"message": "m", "edits": edits}), 422, "COUNT_REQUIRED", 0)
    assert "check the batch first" in error["message"]
    assert await dep.head(wiki) == head
    checked = await _check(dep, wiki, edits)
    assert [entry["path"] for entry in checked["result"]["applied"]] == ["wiki/p/a.md", "wiki/p/c.md"]
    job = await dep.apply(wiki, {"plan": checked["result"]["plan"]})
    assert job["status"] == "succeeded", job
    assert git_text(dep.repo(wiki), "diff", "--name-only", head, "main").split() == [
        "wiki/p/a.md",
        "wiki/p/c.md",
    ]
    assert "owner: ops" in (await dep.page(wiki, "wiki/p/c.md"))["content"]

    again = await _check(dep, wiki, [edits[0] | {"set": {"owner": "web"}}])
    changed = await dep.apply(
        wiki,
        {
            "message": "b is archived now",
            "edits": [{"op": "frontmatter", "path": "wiki/p/b.md", "set": {"status": "archived"}}],
        },
    )
    assert changed["status"] == "succeeded", changed
    stale = await dep.apply(wiki, {"plan": again["result"]["plan"]})
    assert stale["status"] == "failed" and stale["error"]["code"] == "PLAN_STALE", stale
