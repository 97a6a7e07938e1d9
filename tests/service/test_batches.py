"""Contract section 3 in process, batches the worker applies: every op, chained edits, one commit or none.

Each batch goes through the app (submit), an in-process worker (preflight + commit on real git) and a
long-poll; failures are the worker's refusals, reported on the job with their code and failing index.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import pytest

from tests.gitutil import blob_id, fsck, git_text, tree_files
from tests.service.harness import Deployment, check_job, create, expect_error

# -- success ---------------------------------------------------------------------------------------------


async def test_every_op_in_one_batch(dep: Deployment) -> None:
    """create, overwrite, replace, delete and rename succeed together: one commit, one applied entry each."""
    wiki = await dep.new_wiki("ops")
    v = await dep.seed(wiki, {"wiki/over.md": "old\n", "wiki/rep.md": "a b b b\n", "wiki/del.md": "bye\n"})
    v |= await dep.seed(wiki, {"wiki/ren.md": "moving\n", "wiki/rep2.md": "x y\n"})
    index = await dep.page(wiki, "index.md")
    log = await dep.page(wiki, "log.md")
    before = await dep.head(wiki)
    binary = b"\x89PNG\r\n\x1a\n\xff\x00"
    batch = {
        "message": "all ops\n\nwith a body",
        "edits": [
            create("wiki/new.md", "# New\n"),
            {
                "op": "overwrite",
                "path": "wiki/over.md",
                "content": "new\n",
                "expected_version": v["wiki/over.md"],
            },
            {
                "op": "replace",
                "path": "wiki/rep.md",
                "old": "b",
                "new": "c",
                "replace_all": True,
                "expected_count": 3,
                "expected_version": v["wiki/rep.md"],
            },
            {"op": "delete", "path": "wiki/del.md", "expected_version": v["wiki/del.md"]},
            {
                "op": "rename",
                "path": "wiki/ren.md",
                "new_path": "wiki/moved/ren.md",
                "expected_version": v["wiki/ren.md"],
            },
            {
                "op": "replace",
                "path": "wiki/rep2.md",
                "old": "y",
                "new": "why",
                "expected_version": v["wiki/rep2.md"],
            },
            {
                "op": "create",
                "path": "raw/img.png",
                "content": base64.b64encode(binary).decode(),
                "encoding": "base64",
            },
            {
                "op": "overwrite",
                "path": "index.md",
                "content": "# Index\n- new\n",
                "expected_version": index["version"],
            },
            {
                "op": "replace",
                "path": "log.md",
                "old": "\n",
                "new": "\n- all ops\n",
                "expected_count": log["content"].count("\n"),
                "replace_all": True,
                "expected_version": log["version"],
            },
            {
                "op": "create",
                "path": "wiki/encoded.md",
                "content": base64.b64encode(b"text\n").decode(),
                "encoding": "base64",
            },
        ],
    }
    new_log = log["content"].replace("\n", "\n- all ops\n")
    job = await dep.apply(wiki, batch)
    check_job(job, wiki, "succeeded")
    assert job["webhook"] is None and job["dry_run"] is False
    expected = [
        {"index": 0, "op": "create", "path": "wiki/new.md", "version": blob_id(b"# New\n")},
        {"index": 1, "op": "overwrite", "path": "wiki/over.md", "version": blob_id(b"new\n")},
        {"index": 2, "op": "replace", "path": "wiki/rep.md", "version": blob_id(b"a c c c\n")},
        {"index": 3, "op": "delete", "path": "wiki/del.md", "version": None},
        {
            "index": 4,
            "op": "rename",
            "path": "wiki/ren.md",
            "new_path": "wiki/moved/ren.md",
            "version": v["wiki/ren.md"],
        },
        {"index": 5, "op": "replace", "path": "wiki/rep2.md", "version": blob_id(b"x why\n")},
        {"index": 6, "op": "create", "path": "raw/img.png", "version": blob_id(binary)},
        {"index": 7, "op": "overwrite", "path": "index.md", "version": blob_id(b"# Index\n- new\n")},
        {"index": 8, "op": "replace", "path": "log.md", "version": blob_id(new_log.encode())},
        {"index": 9, "op": "create", "path": "wiki/encoded.md", "version": blob_id(b"text\n")},
    ]
    assert job["result"]["applied"] == expected
    history = await dep.commits(wiki, 2)
    assert [c["commit"] for c in history] == [job["result"]["commit"], before]
    assert history[0]["job_id"] == job["job_id"]
    assert history[0]["message"].startswith("all ops\n\nwith a body")
    assert history[0]["message"].rstrip().endswith(f"Wikiq-Job: {job['job_id']}")
    # what plain git sees at the new head is exactly the applied list
    files = tree_files(dep.repo(wiki), job["result"]["commit"], regular_only=True)
    assert "wiki/del.md" not in files and "wiki/ren.md" not in files
    for entry in expected:
        path = str(entry.get("new_path", entry["path"]))
        if entry["version"] is not None:
            assert blob_id(files[path]) == entry["version"], path
    assert files["wiki/moved/ren.md"] == b"moving\n"
    assert files["raw/img.png"] == binary
    assert files["log.md"] == new_log.encode()
    fsck(dep.repo(wiki))
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/wiki/del.md"), 404, "NOT_FOUND")
    expect_error(await dep.client.get(f"/v1/wikis/{wiki}/pages/wiki/ren.md"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("seed", "edit", "path", "after"),
    [
        ({}, create("wiki/c.md", "c\n"), "wiki/c.md", b"c\n"),
        (
            {"wiki/o.md": "o\n"},
            {"op": "overwrite", "path": "wiki/o.md", "content": "O\n"},
            "wiki/o.md",
            b"O\n",
        ),
        (
            {"wiki/r.md": "a-a\n"},
            {"op": "replace", "path": "wiki/r.md", "old": "-", "new": "+"},
            "wiki/r.md",
            b"a+a\n",
        ),
        ({"wiki/d.md": "d\n"}, {"op": "delete", "path": "wiki/d.md"}, "wiki/d.md", None),
        (
            {"wiki/m.md": "m\n"},
            {"op": "rename", "path": "wiki/m.md", "new_path": "wiki/n.md"},
            "wiki/n.md",
            b"m\n",
        ),
    ],
    ids=["create", "overwrite", "replace", "delete", "rename"],
)
async def test_each_op_alone(
    dep: Deployment, seed: dict[str, str], edit: dict[str, Any], path: str, after: bytes | None
) -> None:
    """Each op on its own is one commit whose tree holds exactly the change (versions from the pages list)."""
    wiki = await dep.new_wiki(str(edit["op"]))
    versions = await dep.seed(wiki, seed) if seed else {}
    if edit["path"] in versions:
        edit = {**edit, "expected_version": versions[edit["path"]]}
    before = await dep.pages(wiki)
    job = await dep.apply(wiki, {"message": edit["op"], "edits": [edit]})
    check_job(job, wiki, "succeeded")
    (applied,) = job["result"]["applied"]
    assert (applied["index"], applied["op"], applied["path"]) == (0, edit["op"], edit["path"])
    assert applied["version"] == (None if after is None else blob_id(after))
    files = tree_files(dep.repo(wiki), job["result"]["commit"])
    changed = {p for p in set(files) | set(before) if p not in before or p not in files}
    changed |= {p for p in files if p in before and blob_id(files[p]) != before[p]["version"]}
    assert changed == {path} | ({edit["path"]} if edit["op"] in ("rename", "delete") else set())
    assert files.get(path) == after


async def test_chained_edits_on_one_path(dep: Deployment) -> None:
    """Edits chain on one path; expected_version is ignored for a path created earlier in the batch."""
    wiki = await dep.new_wiki("chain")
    v = await dep.seed(wiki, {"wiki/base.md": "one\n"})
    job = await dep.apply(
        wiki,
        {
            "message": "chain",
            "edits": [
                create("wiki/c.md", "1\n"),
                {"op": "replace", "path": "wiki/c.md", "old": "1", "new": "2"},
                {"op": "overwrite", "path": "wiki/c.md", "content": "3\n", "expected_version": "0" * 40},
                {"op": "rename", "path": "wiki/c.md", "new_path": "wiki/d.md"},
                {"op": "replace", "path": "wiki/d.md", "old": "3", "new": "4"},
                {
                    "op": "replace",
                    "path": "wiki/base.md",
                    "old": "one",
                    "new": "two",
                    "expected_version": v["wiki/base.md"],
                },
                {
                    "op": "replace",
                    "path": "wiki/base.md",
                    "old": "two",
                    "new": "three",
                    "expected_version": v["wiki/base.md"],
                },
                create("wiki/gone.md"),
                {"op": "delete", "path": "wiki/gone.md"},
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    applied = job["result"]["applied"]
    assert [a["index"] for a in applied] == list(range(9))
    assert [a["version"] for a in applied] == [
        blob_id(b"1\n"),
        blob_id(b"2\n"),
        blob_id(b"3\n"),
        blob_id(b"3\n"),
        blob_id(b"4\n"),
        blob_id(b"two\n"),
        blob_id(b"three\n"),
        blob_id(b"x\n"),
        None,
    ]
    assert (await dep.page(wiki, "wiki/d.md"))["content"] == "4\n"
    assert (await dep.page(wiki, "wiki/base.md"))["content"] == "three\n"
    listed = await dep.pages(wiki)
    assert "wiki/c.md" not in listed and "wiki/gone.md" not in listed
    assert len(await dep.commits(wiki)) == 3


async def test_rename_with_link_fixes_is_one_commit(dep: Deployment) -> None:
    """A rename plus the replaces that fix links to it land as exactly one commit on the previous head."""
    wiki = await dep.new_wiki("links")
    v = await dep.seed(
        wiki,
        {
            "wiki/redis.md": "# Redis\n",
            "wiki/a.md": "see [[redis]] and [[redis]]\n",
            "wiki/b.md": "also [[redis]]\n",
        },
    )
    before = await dep.commits(wiki)
    job = await dep.apply(
        wiki,
        {
            "message": "Rename redis to valkey",
            "edits": [
                {
                    "op": "rename",
                    "path": "wiki/redis.md",
                    "new_path": "wiki/valkey.md",
                    "expected_version": v["wiki/redis.md"],
                },
                {
                    "op": "replace",
                    "path": "wiki/a.md",
                    "old": "[[redis]]",
                    "new": "[[valkey]]",
                    "replace_all": True,
                    "expected_count": 2,
                    "expected_version": v["wiki/a.md"],
                },
                {
                    "op": "replace",
                    "path": "wiki/b.md",
                    "old": "[[redis]]",
                    "new": "[[valkey]]",
                    "expected_version": v["wiki/b.md"],
                },
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    after = await dep.commits(wiki)
    assert after[1:] == before
    assert after[0]["commit"] == job["result"]["commit"]
    assert (await dep.page(wiki, "wiki/a.md"))["content"] == "see [[valkey]] and [[valkey]]\n"
    assert (await dep.page(wiki, "wiki/b.md"))["content"] == "also [[valkey]]\n"
    assert (await dep.page(wiki, "wiki/valkey.md"))["content"] == "# Redis\n"
    assert "wiki/redis.md" not in await dep.pages(wiki)


async def test_file_where_a_folder_was(dep: Deployment) -> None:
    """Deleting a folder's last file and creating a file of the folder's name in one batch succeeds."""
    wiki = await dep.new_wiki("refold")
    v = await dep.seed(wiki, {"wiki/dir/x.md": "x\n"})
    edits = [
        {"op": "delete", "path": "wiki/dir/x.md", "expected_version": v["wiki/dir/x.md"]},
        create("wiki/dir", "now a file\n"),
    ]
    job = await dep.apply(wiki, {"message": "fold", "edits": edits})
    check_job(job, wiki, "succeeded")
    assert (await dep.page(wiki, "wiki/dir"))["content"] == "now a file\n"
    assert not any(p.startswith("wiki/dir/") for p in await dep.pages(wiki))
    fsck(dep.repo(wiki))


async def test_longest_paths_are_accepted(dep: Deployment) -> None:
    """A 255-byte segment and a 4096-byte path are accepted, committed and readable."""
    wiki = await dep.new_wiki("long")
    segment = "wiki/" + "s" * 255
    deep = "wiki/" + "/".join(["d" * 200] * 20)
    deep += "/" + "e" * (4096 - len(deep) - 1)
    assert len(deep.encode()) == 4096
    job = await dep.apply(wiki, {"message": "long", "edits": [create(segment, "s\n"), create(deep, "d\n")]})
    check_job(job, wiki, "succeeded")
    assert (await dep.page(wiki, segment))["content"] == "s\n"
    assert (await dep.page(wiki, deep))["content"] == "d\n"


async def test_commit_job_id_is_the_real_job_even_if_message_names_another(dep: Deployment) -> None:
    """A batch message containing a Wikiq-Job line does not change which job /commits says made the commit."""
    wiki = await dep.new_wiki("trailer")
    message = "sneaky\n\nWikiq-Job: 01FAKEFAKEFAKEFAKEFAKEFAKE"
    job = await dep.apply(wiki, {"message": message, "edits": [create("wiki/t.md")]})
    check_job(job, wiki, "succeeded")
    latest = (await dep.commits(wiki, 1))[0]
    assert latest["commit"] == job["result"]["commit"]
    assert latest["message"].startswith(message)
    assert latest["message"].rstrip().endswith(f"Wikiq-Job: {job['job_id']}")
    assert latest["job_id"] == job["job_id"], latest


@pytest.mark.both  # two worker processes share the partitions: order must hold across them
async def test_batches_of_one_wiki_apply_in_submission_order(dep: Deployment) -> None:
    """30 batches submitted at once to one wiki become 30 commits in submission order."""
    wiki = await dep.new_wiki("order")
    submitted = [
        await dep.submit_ok(wiki, {"message": f"n{i}", "edits": [create(f"wiki/n{i}.md")]}) for i in range(30)
    ]
    finished = await asyncio.gather(*(dep.wait(job_id) for job_id in submitted))
    assert [j["status"] for j in finished] == ["succeeded"] * 30
    history = await dep.commits(wiki)
    assert len(history) == 31
    assert [c["job_id"] for c in reversed(history[:30])] == submitted
    assert [c["message"].split("\n")[0] for c in reversed(history[:30])] == [f"n{i}" for i in range(30)]
    assert [j["job_id"] for j in await dep.jobs(wiki, limit=30)] == list(reversed(submitted))
    assert {f"wiki/n{i}.md" for i in range(30)} <= set(await dep.pages(wiki))


async def test_later_batch_sees_the_earlier_one(dep: Deployment) -> None:
    """A batch queued behind another is checked on the head the first one made (stale version: refused)."""
    wiki = await dep.new_wiki("stale")
    v = await dep.seed(wiki, {"wiki/a.md": "a\n"})
    first = {"op": "overwrite", "path": "wiki/a.md", "content": "b\n", "expected_version": v["wiki/a.md"]}
    second = {"op": "overwrite", "path": "wiki/a.md", "content": "c\n", "expected_version": v["wiki/a.md"]}
    async with dep.worker.paused():
        one = await dep.submit_ok(wiki, {"message": "first", "edits": [first]})
        two = await dep.submit_ok(wiki, {"message": "second", "edits": [second]})
    assert (await dep.wait(one))["status"] == "succeeded"
    lost = await dep.wait(two)
    check_job(lost, wiki, "failed")
    assert (lost["error"]["code"], lost["error"]["index"]) == ("VERSION_MISMATCH", 0)
    now = await dep.page(wiki, "wiki/a.md")
    assert now["content"] == "b\n"
    assert lost["error"]["details"] == {"path": "wiki/a.md", "current_version": now["version"]}


# -- failures in the worker ------------------------------------------------------------------------------

SEED = {"wiki/a.md": "alpha beta beta\n", "wiki/b.md": "bee\n", "wiki/dir/x.md": "x\n"}
Edits = Callable[[dict[str, str]], list[dict[str, Any]]]
WORKER_FAILURES: list[tuple[str, Edits, str, int | tuple[int, int]]] = [
    ("create-existing", lambda v: [create("wiki/a.md")], "PATH_EXISTS", 1),
    (
        "rename-onto-existing",
        lambda v: [
            {"op": "rename", "path": "wiki/b.md", "new_path": "wiki/a.md", "expected_version": v["wiki/b.md"]}
        ],
        "PATH_EXISTS",
        1,
    ),
    ("create-created", lambda v: [create("wiki/fresh.md")], "PATH_EXISTS", 1),
    (
        "overwrite-missing",
        lambda v: [{"op": "overwrite", "path": "wiki/none.md", "content": "x", "expected_version": "1" * 40}],
        "NOT_FOUND",
        1,
    ),
    (
        "delete-missing",
        lambda v: [{"op": "delete", "path": "wiki/none.md", "expected_version": "1" * 40}],
        "NOT_FOUND",
        1,
    ),
    (
        "rename-missing",
        lambda v: [
            {"op": "rename", "path": "wiki/none.md", "new_path": "wiki/n2.md", "expected_version": "1" * 40}
        ],
        "NOT_FOUND",
        1,
    ),
    (
        "replace-missing",
        lambda v: [{"op": "replace", "path": "wiki/none.md", "old": "a", "new": "b"}],
        "NOT_FOUND",
        1,
    ),
    (
        "replace-after-delete",
        lambda v: [
            {"op": "delete", "path": "wiki/b.md", "expected_version": v["wiki/b.md"]},
            {"op": "replace", "path": "wiki/b.md", "old": "bee", "new": "b"},
        ],
        "NOT_FOUND",
        2,
    ),
    (
        "delete-renamed-away",
        lambda v: [
            {
                "op": "rename",
                "path": "wiki/b.md",
                "new_path": "wiki/c.md",
                "expected_version": v["wiki/b.md"],
            },
            {"op": "delete", "path": "wiki/b.md", "expected_version": v["wiki/b.md"]},
        ],
        "NOT_FOUND",
        2,
    ),
    (
        "overwrite-no-version",
        lambda v: [{"op": "overwrite", "path": "wiki/a.md", "content": "x"}],
        "VERSION_REQUIRED",
        1,
    ),
    (
        "replace-no-version",
        lambda v: [{"op": "replace", "path": "wiki/a.md", "old": "alpha", "new": "x"}],
        "VERSION_REQUIRED",
        1,
    ),
    ("delete-no-version", lambda v: [{"op": "delete", "path": "wiki/a.md"}], "VERSION_REQUIRED", 1),
    (
        "rename-no-version",
        lambda v: [{"op": "rename", "path": "wiki/a.md", "new_path": "wiki/z.md"}],
        "VERSION_REQUIRED",
        1,
    ),
    (
        "overwrite-wrong-version",
        lambda v: [
            {"op": "overwrite", "path": "wiki/a.md", "content": "x", "expected_version": v["wiki/b.md"]}
        ],
        "VERSION_MISMATCH",
        1,
    ),
    (
        "delete-wrong-version",
        lambda v: [{"op": "delete", "path": "wiki/a.md", "expected_version": "0" * 40}],
        "VERSION_MISMATCH",
        1,
    ),
    (
        "rename-wrong-version",
        lambda v: [
            {"op": "rename", "path": "wiki/a.md", "new_path": "wiki/z.md", "expected_version": "0" * 40}
        ],
        "VERSION_MISMATCH",
        1,
    ),
    (
        "replace-wrong-version",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "alpha",
                "new": "x",
                "expected_version": v["wiki/b.md"],
            }
        ],
        "VERSION_MISMATCH",
        1,
    ),
    (
        "replace-old-missing",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "gamma",
                "new": "x",
                "expected_version": v["wiki/a.md"],
            }
        ],
        "OLD_NOT_FOUND",
        1,
    ),
    (
        "replace-old-wrong-case",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "ALPHA",
                "new": "x",
                "expected_version": v["wiki/a.md"],
            }
        ],
        "OLD_NOT_FOUND",
        1,
    ),
    (
        "replace-old-twice",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "beta",
                "new": "x",
                "expected_version": v["wiki/a.md"],
            }
        ],
        "OLD_NOT_UNIQUE",
        1,
    ),
    (
        "replace-count-wrong",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "beta",
                "new": "x",
                "replace_all": True,
                "expected_count": 3,
                "expected_version": v["wiki/a.md"],
            }
        ],
        "COUNT_MISMATCH",
        1,
    ),
    (
        "replace-count-unique-wrong",
        lambda v: [
            {
                "op": "replace",
                "path": "wiki/a.md",
                "old": "alpha",
                "new": "x",
                "expected_count": 2,
                "expected_version": v["wiki/a.md"],
            }
        ],
        "COUNT_MISMATCH",
        1,
    ),
    ("file-under-file", lambda v: [create("wiki/a.md/under.md")], "PATH_CONFLICT", 1),
    ("file-where-folder-is", lambda v: [create("wiki/dir")], "PATH_CONFLICT", 1),
    (
        "rename-onto-folder",
        lambda v: [
            {"op": "rename", "path": "wiki/b.md", "new_path": "wiki/dir", "expected_version": v["wiki/b.md"]}
        ],
        "PATH_CONFLICT",
        1,
    ),
    (
        "file-and-file-under-it-in-one-batch",
        lambda v: [create("wiki/n.md"), create("wiki/n.md/y.md")],
        "PATH_CONFLICT",
        (1, 2),
    ),
    (
        "failure-after-many-good-edits",
        lambda v: [*(create(f"wiki/ok{i}.md") for i in range(20)), create("wiki/a.md")],
        "PATH_EXISTS",
        21,
    ),
]


@pytest.mark.parametrize(
    ("edits", "code", "index"), [pytest.param(e, c, i, id=n) for n, e, c, i in WORKER_FAILURES]
)
async def test_worker_failure_is_failed_job_and_commits_nothing(
    dep: Deployment, edits: Edits, code: str, index: int | tuple[int, int]
) -> None:
    """A batch breaking a repository rule is a failed job with {code, message, index}; nothing is written."""
    wiki = await dep.new_wiki("fail")
    versions = await dep.seed(wiki, SEED)
    before_head = await dep.head(wiki)
    before_pages = await dep.pages(wiki)
    refs_before = git_text(dep.repo(wiki), "for-each-ref")
    batch = {"message": "doomed", "edits": [create("wiki/fresh.md", "fresh\n"), *edits(versions)]}
    job_id = await dep.submit_ok(wiki, batch)
    job = await dep.wait(job_id)
    check_job(job, wiki, "failed")
    assert job["error"]["code"] == code, job
    assert job["error"]["index"] in (index if isinstance(index, tuple) else (index,)), job
    assert job["error"]["message"], job
    assert await dep.head(wiki) == before_head
    assert await dep.pages(wiki) == before_pages
    assert git_text(dep.repo(wiki), "for-each-ref") == refs_before
    assert len(await dep.commits(wiki)) == 2
    listed = (await dep.jobs(wiki))[0]
    assert (listed["job_id"], listed["status"]) == (job_id, "failed")
    assert listed == job


async def test_failed_batch_does_not_block_the_next(dep: Deployment) -> None:
    """After a refused batch, the next batch of the same wiki commits on the unchanged head."""
    wiki = await dep.new_wiki("afterfail")
    before = await dep.head(wiki)
    failed = await dep.apply(wiki, {"message": "bad", "edits": [create("wiki/x.md"), create("wiki/x.md")]})
    check_job(failed, wiki, "failed")
    ok = await dep.apply(wiki, {"message": "good", "edits": [create("wiki/x.md")]})
    check_job(ok, wiki, "succeeded")
    parents = git_text(dep.repo(wiki), "rev-list", "--parents", "-n", "1", ok["result"]["commit"]).split()
    assert parents == [ok["result"]["commit"], before]


async def test_rename_section_with_rewrite_links_repoints_the_links_in_one_commit(dep: Deployment) -> None:
    """rename_section with rewrite_links: true over HTTP: [[page#Old]], [[page#Old|label]], [t](page.md#old)
    and the page's own [[#Old]] name the new heading in the one commit; code and other links stay."""
    wiki = await dep.new_wiki("renamesec")
    page = "# Incident response\n\n## Paging policy\n\nwho\n\nsee [[#Paging policy]]\n"
    links = (
        "[[incident-response#Paging policy]] [[incident-response#Paging policy|the policy]]\n"
        "[t](incident-response.md#paging-policy) [[incident-response]]\n\n"
        "```\n[[incident-response#Paging policy]]\n```\n"
    )
    v = await dep.seed(wiki, {"wiki/incident-response.md": page, "wiki/oncall.md": links})
    before = await dep.head(wiki)
    job = await dep.apply(
        wiki,
        {
            "message": "rename a heading",
            "edits": [
                {
                    "op": "rename_section",
                    "path": "wiki/incident-response.md",
                    "heading": "Paging policy",
                    "new_heading": "Escalation",
                    "rewrite_links": True,
                    "expected_version": v["wiki/incident-response.md"],
                }
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    files = tree_files(dep.repo(wiki), job["result"]["commit"], regular_only=True)
    assert files["wiki/incident-response.md"] == (
        b"# Incident response\n\n## Escalation\n\nwho\n\nsee [[#Escalation]]\n"
    )
    assert files["wiki/oncall.md"] == (
        b"[[incident-response#Escalation]] [[incident-response#Escalation|the policy]]\n"
        b"[t](incident-response.md#escalation) [[incident-response]]\n\n"
        b"```\n[[incident-response#Paging policy]]\n```\n"
    )
    assert [(e["op"], e["path"], e.get("count")) for e in job["result"]["applied"]] == [
        ("rename_section", "wiki/incident-response.md", None),
        ("rewrite_links", "wiki/incident-response.md", 1),
        ("rewrite_links", "wiki/oncall.md", 3),
    ]
    assert [c["commit"] for c in await dep.commits(wiki, 2)] == [job["result"]["commit"], before]
    fsck(dep.repo(wiki))


async def test_each_edits_chosen_pages_in_one_commit(dep: Deployment) -> None:
    """Two each edits over HTTP: the projects whose front matter says archived move to wiki/archive with
    their links, then a key is set on every page of the folder (front matter made where there is none).
    One commit; plain git shows exactly those changes; a wrong expected_count names the pages and lands
    nothing."""
    wiki = await dep.new_wiki("each")
    pages = {
        "wiki/projects/a.md": "---\nstatus: archived\n---\n# A\n",
        "wiki/projects/b.md": "# B\n[[a]] [c](c.md)\n",
        "wiki/projects/c.md": "---\nstatus: archived\n---\n# C\n",
    }
    await dep.seed(wiki, pages)
    before = await dep.head(wiki)
    select = {"prefix": "wiki/projects/", "frontmatter": {"status": "archived"}}
    move = {"op": "each", "select": select, "do": "rename", "new_path": "wiki/archive", "rewrite_links": True}
    mark = {"op": "each", "select": {"prefix": "wiki/"}, "do": "frontmatter", "set": {"team": "core"}}
    failed = await dep.apply(wiki, {"message": "m", "edits": [{**move, "expected_count": 1}]})
    check_job(failed, wiki, "failed")
    assert failed["error"]["code"] == "COUNT_MISMATCH"
    assert "wiki/projects/a.md, wiki/projects/c.md" in failed["error"]["message"]
    job = await dep.apply(
        wiki, {"message": "archive", "edits": [{**move, "expected_count": 2}, {**mark, "expected_count": 3}]}
    )
    check_job(job, wiki, "succeeded")
    files = tree_files(dep.repo(wiki), job["result"]["commit"], regular_only=True)
    assert files["wiki/archive/a.md"] == b"---\nstatus: archived\nteam: core\n---\n# A\n"
    assert files["wiki/archive/c.md"] == b"---\nstatus: archived\nteam: core\n---\n# C\n"
    assert files["wiki/projects/b.md"] == b"---\nteam: core\n---\n# B\n[[a]] [c](../archive/c.md)\n"
    assert not any(path in files for path in ("wiki/projects/a.md", "wiki/projects/c.md"))
    assert [(e["index"], e["op"], e["path"]) for e in job["result"]["applied"]] == [
        (0, "rename", "wiki/projects/a.md"),
        (0, "rename", "wiki/projects/c.md"),
        (0, "rewrite_links", "wiki/projects/b.md"),
        (1, "frontmatter", "wiki/archive/a.md"),
        (1, "frontmatter", "wiki/archive/c.md"),
        (1, "frontmatter", "wiki/projects/b.md"),
    ]
    assert [c["commit"] for c in await dep.commits(wiki, 2)] == [job["result"]["commit"], before]
    fsck(dep.repo(wiki))


async def test_merge_pages_lands_as_one_commit_with_its_links(dep: Deployment) -> None:
    """merge_pages over HTTP: the new page holds both pages' text under their headings, both pages are
    gone and the links to them point into the new page, in one commit checked in plain git."""
    wiki = await dep.new_wiki("merge")
    await dep.seed(
        wiki,
        {
            "wiki/teams/infra.md": "---\nowner: a\n---\n# Infra\n\n## Oncall\n\nweekly\n",
            "wiki/teams/sre.md": "# SRE\n\nsee [[infra#Oncall]]\n",
            "wiki/x.md": "[[infra]] [s](teams/sre.md)\n",
        },
    )
    before = await dep.head(wiki)
    edit = {
        "op": "merge_pages",
        "path": "wiki/teams/platform.md",
        "pages": ["wiki/teams/infra.md", "wiki/teams/sre.md"],
    }
    job = await dep.apply(wiki, {"message": "merge the teams", "edits": [edit]})
    check_job(job, wiki, "succeeded")
    files = tree_files(dep.repo(wiki), job["result"]["commit"], regular_only=True)
    assert files["wiki/teams/platform.md"] == (
        b"# Infra\n\n## Infra\n\n### Oncall\n\nweekly\n\n## SRE\n\nsee [[platform#Oncall]]\n"
    )
    assert files["wiki/x.md"] == b"[[platform]] [s](teams/platform.md#sre)\n"  # "# Infra" is the first
    assert "wiki/teams/infra.md" not in files and "wiki/teams/sre.md" not in files
    assert [(e["op"], e["path"]) for e in job["result"]["applied"]] == [
        ("merge_pages", "wiki/teams/platform.md"),
        ("delete", "wiki/teams/infra.md"),
        ("delete", "wiki/teams/sre.md"),
        ("rewrite_links", "wiki/x.md"),
    ]
    assert [c["commit"] for c in await dep.commits(wiki, 2)] == [job["result"]["commit"], before]
    fsck(dep.repo(wiki))


async def test_extract_section_and_retarget_links_land_as_one_commit(dep: Deployment) -> None:
    """A batch that extracts a section to a new page (leaving a link) and then retargets the links to a
    heading of another page lands as one commit: plain git sees the new page, the cut source and every
    rewritten page, each at the version applied gives it, and nothing else changed."""
    wiki = await dep.new_wiki("relink")
    runbook = "# Runbook\n\n## Redis failover\n\nsteps\n\n### Check\n\nok\n\n## Other\n\nmore\n"
    v = await dep.seed(
        wiki,
        {
            "wiki/runbook.md": runbook,
            "wiki/a.md": "[[runbook#Redis failover]] [c](runbook.md#check) [[runbook#Other]]\n",
            "wiki/db.md": "# DB\n\n## Replicas\n",
        },
    )
    before = await dep.head(wiki)
    old_files = tree_files(dep.repo(wiki), before)
    job = await dep.apply(
        wiki,
        {
            "message": "split the runbook",
            "edits": [
                {
                    "op": "extract_section",
                    "path": "wiki/runbook.md",
                    "heading": "Redis failover",
                    "new_path": "wiki/ops/redis.md",
                    "leave_link": True,
                    "expected_version": v["wiki/runbook.md"],
                },
                {"op": "retarget_links", "from": "wiki/runbook.md#Other", "to": "wiki/db.md#Replicas"},
            ],
        },
    )
    check_job(job, wiki, "succeeded")
    files = tree_files(dep.repo(wiki), job["result"]["commit"], regular_only=True)
    assert files["wiki/ops/redis.md"] == b"# Redis failover\n\nsteps\n\n## Check\n\nok\n"
    assert files["wiki/runbook.md"] == b"# Runbook\n\n[[redis]]\n\n## Other\n\nmore\n"
    assert files["wiki/a.md"] == b"[[redis]] [c](ops/redis.md#check) [[db#Replicas]]\n"
    applied = job["result"]["applied"]
    assert [(e["index"], e["op"], e["path"]) for e in applied] == [
        (0, "extract_section", "wiki/runbook.md"),
        (0, "create", "wiki/ops/redis.md"),
        (0, "rewrite_links", "wiki/a.md"),
        (1, "rewrite_links", "wiki/a.md"),
    ]
    assert applied[0]["new_path"] == "wiki/ops/redis.md"
    for entry in (applied[0], applied[1], applied[3]):
        assert blob_id(files[entry["path"]]) == entry["version"], entry
    changed = {p for p in set(files) | set(old_files) if files.get(p) != old_files.get(p)}
    assert changed == {"wiki/ops/redis.md", "wiki/runbook.md", "wiki/a.md"}
    history = await dep.commits(wiki, 2)
    assert [c["commit"] for c in history] == [job["result"]["commit"], before]
    assert git_text(dep.repo(wiki), "rev-parse", f"{job['result']['commit']}^").strip() == before
    fsck(dep.repo(wiki))


# -- every failing edit at once ----------------------------------------------------------------------------

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _codes(error: dict[str, Any]) -> list[tuple[int | None, str]]:
    return [(entry["index"], entry["code"]) for entry in error["errors"]]


async def test_a_refused_batch_lists_every_failing_edit_and_writes_nothing(dep: Deployment) -> None:
    """Three edits fail in the worker, each its own way: the failed job's error is the first (as before)
    and its errors list all three with index, code, message (and the mismatch's current version); the
    edits that pass are not listed, and nothing is written."""
    wiki = await dep.new_wiki("every")
    v = await dep.seed(wiki, {"wiki/a.md": "alpha\n", "wiki/b.md": "beta\n"})
    before = await dep.head(wiki)
    edits = [
        create("wiki/fresh.md"),
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "gamma",
            "new": "x",
            "expected_version": v["wiki/a.md"],
        },
        {"op": "append", "path": "wiki/b.md", "content": "fine\n"},
        {"op": "delete", "path": "wiki/b.md", "expected_version": "0" * 40},
        {"op": "append", "path": "wiki/none.md", "content": "x\n"},
    ]
    job = await dep.apply(wiki, {"message": "doomed", "edits": edits})
    check_job(job, wiki, "failed")
    error = job["error"]
    assert (error["code"], error["index"]) == ("OLD_NOT_FOUND", 1), job
    assert _codes(error) == [(1, "OLD_NOT_FOUND"), (3, "VERSION_MISMATCH"), (4, "NOT_FOUND")], job
    assert error["errors"][0]["message"] == error["message"]
    assert error["errors"][1]["details"]["current_version"] == v["wiki/b.md"]
    assert all(entry["message"] for entry in error["errors"])
    assert await dep.head(wiki) == before
    assert "wiki/fresh.md" not in await dep.pages(wiki)


async def test_a_batch_refused_at_submission_lists_every_failing_edit(dep: Deployment) -> None:
    """The checks at submission go on past the first failing edit too: the 422's error is the first, its
    errors every edit the static checks or the schema refused; nothing is queued."""
    wiki = await dep.new_wiki("every-static")
    statics = [
        create("wiki/../x.md"),
        create("wiki/fine.md"),
        {"op": "delete", "path": "raw/r.md", "expected_version": "0" * 40},
    ]
    error = expect_error(await dep.submit(wiki, {"message": "m", "edits": statics}), 422, "INVALID_PATH", 0)
    assert _codes(error) == [(0, "INVALID_PATH"), (2, "ZONE_FORBIDDEN")], error
    shapes = [
        create("wiki/fine.md"),
        {"op": "replace", "path": "wiki/a.md", "old": "a"},
        create("wiki/fine2.md"),
        {"op": "delete", "path": "wiki/a.md", "surprise": 1},
    ]
    error = expect_error(await dep.submit(wiki, {"message": "m", "edits": shapes}), 422, "INVALID_BATCH", 1)
    assert _codes(error) == [(1, "INVALID_BATCH"), (3, "INVALID_BATCH")], error
    assert error["errors"][1]["message"] == "surprise: unknown field", error
    assert await dep.jobs(wiki) == []


async def test_check_batch_over_mcp_lists_every_failing_edit(dep: Deployment) -> None:
    """An agent's check_batch (the /mcp tool, in process) answers every failing edit of the dry run at
    once, with a hint for each code met, so one corrected batch can pass."""
    wiki = await dep.new_wiki("every-mcp")
    v = await dep.seed(wiki, {"wiki/a.md": "alpha\n", "wiki/b.md": "beta\n"})
    edits = [
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "gamma",
            "new": "x",
            "expected_version": v["wiki/a.md"],
        },
        {"op": "overwrite", "path": "wiki/b.md", "content": "x\n", "expected_version": v["wiki/a.md"]},
        {"op": "append", "path": "wiki/none.md", "content": "x\n"},
    ]
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "check_batch", "arguments": {"wiki": wiki, "edits": edits}},
    }
    answer = await dep.client.post("/mcp", json=call, headers=MCP_HEADERS)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True, result
    refusal = result["structuredContent"]
    error = refusal["error"]
    assert (error["code"], error["index"]) == ("OLD_NOT_FOUND", 0), refusal
    assert _codes(error) == [(0, "OLD_NOT_FOUND"), (1, "VERSION_MISMATCH"), (2, "NOT_FOUND")], refusal
    assert refusal["status"] == "failed" and refusal["job_id"], refusal
    for code in ("OLD_NOT_FOUND", "VERSION_MISMATCH", "NOT_FOUND"):
        assert f"{code}: " in refusal["hint"], refusal
    fixed = [
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "alpha",
            "new": "x",
            "expected_version": v["wiki/a.md"],
        },
        {**edits[1], "expected_version": error["errors"][1]["details"]["current_version"]},
        {**edits[2], "path": "wiki/b.md"},
    ]
    call["params"]["arguments"]["edits"] = fixed  # type: ignore[index]
    again = (await dep.client.post("/mcp", json=call, headers=MCP_HEADERS)).json()["result"]
    assert again["isError"] is False and again["structuredContent"]["status"] == "succeeded", again


async def test_check_batch_over_mcp_amends_a_failed_check_with_the_fixed_edits_only(dep: Deployment) -> None:
    """A failed check_batch answers error.plan and a hint to amend it; check_batch with that plan and only
    the two fixed edits checks the whole batch and passes; write_batch commits its plan. Amend without a
    plan, or an index past the end, is refused and writes nothing."""
    wiki = await dep.new_wiki("amend-mcp")
    v = await dep.seed(wiki, {"wiki/a.md": "alpha\n", "wiki/b.md": "beta\n"})
    edits = [
        {
            "op": "replace",
            "path": "wiki/a.md",
            "old": "gamma",
            "new": "x",
            "expected_version": v["wiki/a.md"],
        },
        {"op": "append", "path": "wiki/b.md", "content": "more\n", "expected_version": v["wiki/b.md"]},
        {"op": "append", "path": "wiki/none.md", "content": "x\n"},
    ]

    async def call(name: str, **arguments: Any) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": {"wiki": wiki, **arguments}},
        }
        answer = await dep.client.post("/mcp", json=body, headers=MCP_HEADERS)
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["result"])

    failed = await call("check_batch", edits=edits)
    assert failed["isError"] is True, failed
    error = failed["structuredContent"]["error"]
    assert _codes(error) == [(0, "OLD_NOT_FOUND"), (2, "NOT_FOUND")], error
    assert "amend=" in failed["structuredContent"]["hint"], failed
    head = await dep.head(wiki)
    fix = {"op": "append", "path": "wiki/a.md", "content": "fixed\n"}
    for refused in (
        await call("check_batch", amend={"0": fix}),
        await call("check_batch", plan=error["plan"], amend={"4": fix}),  # 3 would append
        await call("check_batch", plan=error["plan"], edits=edits, amend={"0": fix}),
    ):
        assert refused["isError"] is True and refused["structuredContent"]["error"]["code"] == "INVALID_BATCH"
    amend = {
        "0": {**edits[0], "old": "alpha", "new": "ALPHA"},
        "2": {**edits[2], "path": "wiki/b.md"},
    }
    checked = await call("check_batch", plan=error["plan"], amend=amend)
    assert checked["isError"] is False, checked
    outcome = checked["structuredContent"]
    assert outcome["status"] == "succeeded" and len(outcome["edits"]) == 3, outcome
    assert await dep.head(wiki) == head
    written = await call("write_batch", message="amended", plan=outcome["plan"])
    assert written["isError"] is False and written["structuredContent"]["status"] == "succeeded", written
    assert (await dep.page(wiki, "wiki/a.md"))["content"] == "ALPHA\n"
    assert (await dep.page(wiki, "wiki/b.md"))["content"] == "beta\nmore\nx\n"


async def test_an_agent_giving_the_version_it_read_after_link_rewriting_is_not_refused(
    dep: Deployment,
) -> None:
    """write_batch's description tells an agent to give the version it read, which holds for the whole
    batch: after a rename rewrote index.md's links, an overwrite of index.md with the version list_pages
    gave lands (no VERSION_REQUIRED), with the agent's content; "batch" there is refused naming the rule."""
    wiki = await dep.new_wiki("read-version")
    v = await dep.seed(wiki, {"wiki/old.md": "# Old\n"})
    index = await dep.page(wiki, "index.md")
    await dep.apply(
        wiki,
        {
            "message": "link it",
            "edits": [
                {
                    "op": "append",
                    "path": "index.md",
                    "content": "- [[old]]\n",
                    "expected_version": index["version"],
                }
            ],
        },
    )
    listed = await dep.pages(wiki)
    rename = {
        "op": "rename",
        "path": "wiki/old.md",
        "new_path": "wiki/new.md",
        "expected_version": v["wiki/old.md"],
        "rewrite_links": True,
    }
    overwrite = {"op": "overwrite", "path": "index.md", "content": "# Index\n\n- [[new]]\n"}

    async def write(version: str) -> dict[str, Any]:
        edits = [rename, {**overwrite, "expected_version": version}]
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "write_batch", "arguments": {"wiki": wiki, "message": "move", "edits": edits}},
        }
        answer = await dep.client.post("/mcp", json=call, headers=MCP_HEADERS)
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["result"])

    refused = await write("batch")
    assert refused["isError"] is True, refused
    error = refused["structuredContent"]["error"]
    assert (error["code"], error["index"]) == ("VERSION_REQUIRED", 1), error
    assert "give the version you read" in error["message"], error
    assert "holds for the whole batch" in refused["structuredContent"]["hint"], refused
    landed = await write(listed["index.md"]["version"])
    assert landed["isError"] is False and landed["structuredContent"]["status"] == "succeeded", landed
    assert (await dep.page(wiki, "index.md"))["content"] == "# Index\n\n- [[new]]\n"
