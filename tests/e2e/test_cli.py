"""The ``wikiq`` client commands, each run as a subprocess against real processes (Redis, the API, a worker).

``wikiq mcp`` is exercised by tests/e2e/test_mcp.py through an MCP client over stdio.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.e2e.service import Service
from worker.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
_serial = itertools.count()


def wikiq(
    *args: str, url: str | None = None, stdin: bytes | None = None, **env: str
) -> subprocess.CompletedProcess[bytes]:
    """Run ``wikiq ARGS`` with WIKIQ_URL set to ``url`` (and ``env``); stdout and stderr are captured."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("WIKIQ_")}
    environ.update(env, **({"WIKIQ_URL": url} if url else {}))
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        cwd=ROOT,
        env=environ,
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def out(run: subprocess.CompletedProcess[bytes]) -> str:
    """A run's stdout as text."""
    return run.stdout.decode()


def as_json(run: subprocess.CompletedProcess[bytes], code: int = 0) -> Any:
    """A ``--json`` run's stdout parsed, asserting its exit code."""
    assert run.returncode == code, (run.stdout, run.stderr)
    return json.loads(run.stdout)


def new_wiki(svc: Service, stem: str) -> str:
    """A fresh wiki with two pages for one test."""
    wiki = f"{stem}-{next(_serial)}"
    svc.create_wiki(wiki)
    edits = [
        {"op": "create", "path": "wiki/alpha.md", "content": "# Alpha\nlinks to [[beta]]\n"},
        {"op": "create", "path": "wiki/beta.md", "content": "# Beta\n"},
    ]
    assert svc.apply(wiki, {"message": "seed", "edits": edits})["status"] == "succeeded"
    return wiki


def batch_file(tmp_path: Path, *edits: dict[str, Any], message: str = "cli batch") -> str:
    """A batch written to a JSON file; its path."""
    path = tmp_path / f"batch-{next(_serial)}.json"
    path.write_text(json.dumps({"message": message, "edits": list(edits)}))
    return str(path)


def test_wikis_and_create_wiki(svc: Service) -> None:
    """create-wiki makes a wiki that wikis then lists, as a table and as JSON; a second create exits 1."""
    wiki = f"made-{next(_serial)}"
    made = wikiq("create-wiki", wiki, url=svc.url)
    assert made.returncode == 0 and out(made).startswith(f"created {wiki} at ")
    head = out(made).split()[-1]
    listed = wikiq("wikis", url=svc.url)
    assert listed.returncode == 0 and f"{wiki}  {head[:12]}" in out(listed)
    assert {"id": wiki, "head": head} in as_json(wikiq("wikis", "--json", url=svc.url))["wikis"]
    again = wikiq("create-wiki", wiki, url=svc.url)
    assert again.returncode == 1 and b"WIKI_EXISTS" in again.stderr and again.stdout == b""
    assert as_json(wikiq("create-wiki", wiki, "--json", url=svc.url), 1)["error"]["code"] == "WIKI_EXISTS"
    other = f"made-{next(_serial)}"
    assert as_json(wikiq("create-wiki", other, "--json", url=svc.url))["id"] == other


def test_pages_read_and_search(svc: Service) -> None:
    """pages lists paths (with --prefix), read prints text or exact bytes, search prints path:line: text."""
    wiki = new_wiki(svc, "read")
    blob = bytes(range(256)) * 3
    svc.apply(
        wiki,
        {
            "message": "blob",
            "edits": [
                {
                    "op": "create",
                    "path": "raw/blob.bin",
                    "content": base64.b64encode(blob).decode(),
                    "encoding": "base64",
                }
            ],
        },
    )
    pages = wikiq("pages", wiki, url=svc.url)
    assert pages.returncode == 0
    assert [line.split()[0] for line in out(pages).splitlines()[1:]] == [
        "index.md",
        "log.md",
        "raw/blob.bin",
        "schema.md",
        "wiki/alpha.md",
        "wiki/beta.md",
    ]
    prefixed = as_json(wikiq("pages", wiki, "--prefix", "wiki/", "--json", url=svc.url))["pages"]
    assert [p["path"] for p in prefixed] == ["wiki/alpha.md", "wiki/beta.md"]
    alpha = svc.page(wiki, "wiki/alpha.md")
    assert prefixed[0] == {"path": "wiki/alpha.md", "version": alpha["version"], "size": alpha["size"]}

    text = wikiq("read", wiki, "wiki/alpha.md", url=svc.url)
    assert text.returncode == 0 and text.stdout == b"# Alpha\nlinks to [[beta]]\n"
    assert alpha["version"].encode() in text.stderr
    raw = wikiq("read", wiki, "raw/blob.bin", "--raw", url=svc.url)
    assert raw.returncode == 0 and raw.stdout == blob and raw.stderr == b""
    binary = wikiq("read", wiki, "raw/blob.bin", url=svc.url)
    assert binary.returncode == 0 and binary.stdout == b"" and b"--raw" in binary.stderr
    assert as_json(wikiq("read", wiki, "wiki/alpha.md", "--json", url=svc.url)) == alpha
    missing = wikiq("read", wiki, "wiki/none.md", url=svc.url)
    assert missing.returncode == 1 and b"NOT_FOUND" in missing.stderr

    found = wikiq("search", wiki, "[[BETA", url=svc.url)
    assert found.returncode == 0 and out(found) == "wiki/alpha.md:2: links to [[beta]]\n"
    matches = as_json(wikiq("search", wiki, "#", "--json", url=svc.url))["matches"]
    assert {(m["path"], m["line"]) for m in matches} >= {("wiki/alpha.md", 1), ("wiki/beta.md", 1)}


def test_submit_wait_shows_commit_and_applied(svc: Service, tmp_path: Path) -> None:
    """submit --wait prints the commit and the applied table; --json prints the job; stdin works too."""
    wiki = new_wiki(svc, "submit")
    beta = svc.page(wiki, "wiki/beta.md")["version"]
    rename = {"op": "rename", "path": "wiki/beta.md", "new_path": "wiki/gamma.md", "expected_version": beta}
    alpha = svc.page(wiki, "wiki/alpha.md")["version"]
    fix = {
        "op": "replace",
        "path": "wiki/alpha.md",
        "old": "[[beta]]",
        "new": "[[gamma]]",
        "expected_version": alpha,
    }
    done = wikiq("submit", wiki, batch_file(tmp_path, rename, fix), "--wait", url=svc.url)
    assert done.returncode == 0, done.stderr
    commit = svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"]
    text = out(done)
    assert "succeeded" in text and f"commit {commit}" in text
    assert "0  rename   wiki/beta.md -> wiki/gamma.md" in text and "1  replace  wiki/alpha.md" in text

    create = {"op": "create", "path": "wiki/delta.md", "content": "d\n"}
    job = as_json(
        wikiq(
            "submit",
            wiki,
            "-",
            "--wait",
            "--json",
            url=svc.url,
            stdin=json.dumps({"message": "m", "edits": [create]}).encode(),
        )
    )
    assert job["status"] == "succeeded" and job["result"]["applied"][0]["path"] == "wiki/delta.md"
    assert (
        job["result"]["commit"] == svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"]
    )

    queued = wikiq("submit", wiki, batch_file(tmp_path, create | {"path": "wiki/eps.md"}), url=svc.url)
    assert queued.returncode == 0 and "wikiq job " in out(queued)
    job_id = out(queued).split()[1]
    watched = wikiq("job", job_id, "--watch", url=svc.url)
    assert watched.returncode == 0 and f"job {job_id} succeeded" in out(watched)
    shown = as_json(wikiq("job", job_id, "--json", url=svc.url))
    assert shown["job_id"] == job_id and shown["result"]["applied"][0]["path"] == "wiki/eps.md"

    keyed = batch_file(tmp_path, create | {"path": "wiki/keyed.md"})
    first = as_json(wikiq("submit", wiki, keyed, "--idempotency-key", "k1", "--json", url=svc.url))
    second = as_json(wikiq("submit", wiki, keyed, "--idempotency-key", "k1", "--wait", "--json", url=svc.url))
    assert first["job_id"] == second["job_id"] and second["status"] == "succeeded"


def test_refused_batches_exit_1(svc: Service, tmp_path: Path) -> None:
    """A batch refused at submission or failed in the worker exits 1, naming the code and the edit."""
    wiki = new_wiki(svc, "refused")
    ok = {"op": "create", "path": "wiki/ok.md", "content": "ok\n"}
    zone = batch_file(tmp_path, ok, {"op": "create", "path": "elsewhere/x.md", "content": ""})
    refused = wikiq("submit", wiki, zone, "--wait", url=svc.url)
    assert refused.returncode == 1 and b"ZONE_FORBIDDEN at edit 1" in refused.stderr
    error = as_json(wikiq("submit", wiki, zone, "--json", url=svc.url), 1)["error"]
    assert (error["code"], error["index"]) == ("ZONE_FORBIDDEN", 1)

    exists = batch_file(tmp_path, ok, {"op": "create", "path": "wiki/alpha.md", "content": "again\n"})
    failed = wikiq("submit", wiki, exists, "--wait", url=svc.url)
    assert failed.returncode == 1 and "failed" in out(failed) and "PATH_EXISTS at edit 1" in out(failed)
    job = as_json(wikiq("submit", wiki, exists, "--wait", "--json", url=svc.url), 1)
    assert job["status"] == "failed" and (job["error"]["code"], job["error"]["index"]) == ("PATH_EXISTS", 1)
    assert wikiq("job", job["job_id"], url=svc.url).returncode == 1
    stale = {"op": "overwrite", "path": "index.md", "content": "x\n", "expected_version": "0" * 40}
    mismatch = as_json(wikiq("submit", wiki, batch_file(tmp_path, stale), "--wait", "--json", url=svc.url), 1)
    assert (mismatch["error"]["code"], mismatch["error"]["index"]) == ("VERSION_MISMATCH", 0)


def test_jobs_and_log(svc: Service, tmp_path: Path) -> None:
    """jobs lists a wiki's jobs with their outcome; log lists commits with the job that made each."""
    wiki = new_wiki(svc, "history")
    good = as_json(
        wikiq(
            "submit",
            wiki,
            batch_file(
                tmp_path, {"op": "create", "path": "wiki/n.md", "content": "n\n"}, message="Add n\nbody"
            ),
            "--wait",
            "--json",
            url=svc.url,
        )
    )
    bad = as_json(
        wikiq(
            "submit",
            wiki,
            batch_file(tmp_path, {"op": "delete", "path": "wiki/none.md"}),
            "--wait",
            "--json",
            url=svc.url,
        ),
        1,
    )
    jobs = wikiq("jobs", wiki, url=svc.url)
    assert jobs.returncode == 0
    lines = out(jobs).splitlines()
    assert lines[1].split()[:2] == [bad["job_id"], "failed"] and "NOT_FOUND at edit 0" in lines[1]
    assert lines[2].split()[:2] == [good["job_id"], "succeeded"] and good["result"]["commit"][:12] in lines[2]
    listed = as_json(wikiq("jobs", wiki, "--status", "failed", "--json", url=svc.url))["jobs"]
    assert [j["job_id"] for j in listed] == [bad["job_id"]]
    log = wikiq("log", wiki, url=svc.url)
    assert log.returncode == 0
    newest = out(log).splitlines()[1]
    assert newest.startswith(good["result"]["commit"][:12]) and good["job_id"] in newest and "Add n" in newest
    commits = as_json(wikiq("log", wiki, "--limit", "2", "--json", url=svc.url))["commits"]
    assert len(commits) == 2 and commits[0]["job_id"] == good["job_id"]
    message = commits[0]["message"]
    assert message.startswith("Add n\nbody\n\nWikiq-Proof: ") and message.endswith(
        f"\nWikiq-Job: {good['job_id']}\n"
    )


def test_cancel_queued_job(svc: Service, tmp_path: Path) -> None:
    """cancel stops a job no worker has started (then job exits 1); a finished job is not cancellable."""
    wiki = new_wiki(svc, "cancel")
    svc.kill_worker(svc.workers[0])
    try:
        queued = as_json(
            wikiq(
                "submit",
                wiki,
                batch_file(tmp_path, {"op": "create", "path": "wiki/c.md", "content": ""}),
                "--json",
                url=svc.url,
            )
        )
        assert queued["status"] == "queued"
        cancelled = wikiq("cancel", queued["job_id"], url=svc.url)
        assert cancelled.returncode == 0 and out(cancelled) == f"job {queued['job_id']} cancelled\n"
        assert as_json(wikiq("cancel", queued["job_id"], "--json", url=svc.url))["status"] == "cancelled"
        shown = wikiq("job", queued["job_id"], "--watch", url=svc.url)
        assert shown.returncode == 1 and "cancelled" in out(shown)
    finally:
        svc.start_worker()
    done = as_json(
        wikiq(
            "submit",
            wiki,
            batch_file(tmp_path, {"op": "create", "path": "wiki/d.md", "content": ""}),
            "--wait",
            "--json",
            url=svc.url,
        )
    )
    late = wikiq("cancel", done["job_id"], url=svc.url)
    assert late.returncode == 1 and b"NOT_CANCELLABLE" in late.stderr


def test_unreachable_server_exits_3(tmp_path: Path) -> None:
    """Every client command exits 3 when nothing listens at the URL; under --json with a JSON error."""
    closed = f"http://127.0.0.1:{free_port()}"
    batch = batch_file(tmp_path, {"op": "create", "path": "wiki/x.md", "content": ""})
    commands = [
        ["wikis"],
        ["create-wiki", "w"],
        ["pages", "w"],
        ["read", "w", "index.md"],
        ["search", "w", "x"],
        ["submit", "w", batch, "--wait"],
        ["job", "01J"],
        ["cancel", "01J"],
        ["jobs", "w"],
        ["log", "w"],
    ]
    with ThreadPoolExecutor(4) as pool:
        plain = list(pool.map(lambda args: wikiq(*args, url=closed), commands))
        json_runs = list(pool.map(lambda args: wikiq(*args, "--json", "--url", closed), commands[::3]))
    for args, run in zip(commands, plain, strict=True):
        assert run.returncode == 3 and b"UNREACHABLE" in run.stderr, args
    for args, run in zip(commands[::3], json_runs, strict=True):
        assert as_json(run, 3)["error"]["code"] == "UNREACHABLE", args


def test_bad_usage_exits_2(svc: Service, tmp_path: Path) -> None:
    """Unknown options, missing arguments, an unreadable or non-JSON batch and a bad --url exit 2."""
    not_json = tmp_path / "bad.json"
    not_json.write_text("{not json")
    runs = [
        wikiq("wikis", "--no-such-option", url=svc.url),
        wikiq("pages", url=svc.url),
        wikiq("submit", "w", str(not_json), url=svc.url),
        wikiq("submit", "w", str(tmp_path / "missing.json"), "--json", url=svc.url),
        wikiq("submit", "w", "-", url=svc.url, stdin=b"[1, 2]"),
        wikiq("wikis", "--url", "ftp://example.org"),
        wikiq("no-such-command"),
    ]
    for run in runs:
        assert run.returncode == 2 and run.stdout == b"", run.stderr


def test_token_and_url_flags_override_environment(tmp_path: Path) -> None:
    """--token and --url win over WIKIQ_TOKEN and WIKIQ_URL; a missing or wrong token exits 1."""
    digest = hashlib.sha256(b"cli-token").hexdigest()
    tokens = tmp_path / "tokens.toml"
    principal = ["[[principals]]", 'name = "cli"', 'email = "cli@example.org"', f'token_sha256 = "{digest}"']
    tokens.write_text("\n".join([*principal, 'rights = { "*" = "admin" }', ""]))
    service = Service(tmp_path, WIKIQ_TOKENS_FILE=str(tokens)).start()
    try:
        closed = f"http://127.0.0.1:{free_port()}"
        assert wikiq("wikis", url=service.url).returncode == 1
        assert wikiq("wikis", url=service.url, WIKIQ_TOKEN="wrong").returncode == 1
        assert wikiq("wikis", url=service.url, WIKIQ_TOKEN="cli-token").returncode == 0
        assert wikiq("wikis", "--token", "cli-token", url=service.url, WIKIQ_TOKEN="wrong").returncode == 0
        made = wikiq("create-wiki", "flags", "--url", service.url, "--token", "cli-token", url=closed)
        assert made.returncode == 0, made.stderr
        refused = as_json(wikiq("wikis", "--json", "--token", "wrong", url=service.url), 1)
        assert refused["error"]["code"] == "UNAUTHORIZED"
    finally:
        service.stop()


def test_refactor_commands(svc: Service, tmp_path: Path) -> None:
    """submit --dry-run prints the colored diff and the warnings and commits nothing; outline, backlinks
    and search --regex/--prefix/--case-sensitive/--count/--outside-code print what refactors need."""
    wiki = new_wiki(svc, "refactor")
    head = svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"]
    rename = {"op": "rename", "path": "wiki/beta.md", "new_path": "wiki/b/beta2.md", "rewrite_links": True}
    rename["expected_version"] = svc.page(wiki, "wiki/beta.md")["version"]
    create = {"op": "create", "path": "wiki/new.md", "content": "# New\n\n[[missing]]\n"}
    dry = wikiq(
        "submit", wiki, batch_file(tmp_path, rename, create), "--dry-run", url=svc.url, FORCE_COLOR="1"
    )
    assert dry.returncode == 0, dry.stderr
    text = out(dry)
    assert "no commit (dry run)" in text and "rewrite_links" in text
    assert "\x1b[" in text  # rich colors the diff
    plain = wikiq("submit", wiki, batch_file(tmp_path, rename, create), "--dry-run", url=svc.url)
    shown = out(plain)
    assert "wiki/beta.md -> wiki/b/beta2.md" in shown and "+links to [[beta2]]" in shown
    assert "LINK_BROKEN" in shown and "NOT_IN_INDEX" in shown
    job = as_json(wikiq("submit", wiki, batch_file(tmp_path, rename), "--dry-run", "--json", url=svc.url))
    assert job["dry_run"] is True and job["result"]["warnings"] == [] and job["result"]["diff"]
    assert svc.client.get(f"/v1/wikis/{wiki}/commits").json()["commits"][0]["commit"] == head

    outline = wikiq("outline", wiki, "wiki/alpha.md", url=svc.url)
    assert outline.returncode == 0 and "1-2" in out(outline) and "Alpha" in out(outline)
    links = wikiq("backlinks", wiki, "wiki/beta.md", url=svc.url)
    assert links.returncode == 0 and out(links) == "wiki/alpha.md:2: [[beta]]\n"
    regex = wikiq("search", wiki, r"^#\s+\w+$", "--regex", "--prefix", "wiki/", url=svc.url)
    assert out(regex) == "wiki/alpha.md:1: # Alpha\nwiki/beta.md:1: # Beta\n"
    exact = wikiq("search", wiki, "ALPHA", "--case-sensitive", url=svc.url)
    assert exact.returncode == 0 and out(exact) == ""
    first = wikiq("search", wiki, "#", "--limit", "1", url=svc.url)
    assert b"more: --cursor " in first.stderr
    cursor = first.stderr.decode().split("--cursor ", 1)[1].strip()
    rest = wikiq("search", wiki, "#", "--cursor", cursor, url=svc.url)
    assert out(first).splitlines()[0] not in out(rest).splitlines()
    counted = wikiq("search", wiki, "a", "--count", "--prefix", "wiki/", url=svc.url)
    assert (
        out(counted) == "wiki/alpha.md: 2\nwiki/beta.md: 1\ntotal: 3\n"
    )  # case-sensitive, as replace_across
    prose = wikiq("search", wiki, "links", "--outside-code", "--count", url=svc.url)
    assert out(prose) == "wiki/alpha.md: 1\ntotal: 1\n"
    target = wikiq("search", wiki, "beta", "--outside-code", "--count", url=svc.url)
    assert out(target) == "total: 0\n"  # in alpha.md, only a link's target: not prose

    # the plan the dry run printed commits exactly what it showed, once
    assert f"wikiq commit-plan {wiki} plan-" in plain.stdout.decode()
    landed = as_json(wikiq("commit-plan", wiki, job["result"]["plan"], "--wait", "--json", url=svc.url))
    assert landed["status"] == "succeeded" and landed["result"]["applied"] == job["result"]["applied"]
    again = wikiq("commit-plan", wiki, job["result"]["plan"], "--json", url=svc.url)
    assert again.returncode == 1 and as_json(again, 1)["error"]["code"] == "PLAN_NOT_FOUND"


def test_propose_then_review_and_approve(svc: Service, tmp_path: Path) -> None:
    """submit --propose makes a proposal (nothing lands); proposal shows it with its diff; approve lands
    it (single-user mode: its one user may approve its own)."""
    wiki = new_wiki(svc, "propose")
    head = svc.git(wiki, "rev-parse", "main").strip()
    create = {"op": "create", "path": "wiki/proposed.md", "content": "proposed <b>text</b>\n"}
    done = wikiq("submit", wiki, batch_file(tmp_path, create), "--propose", "--wait", url=svc.url)
    assert done.returncode == 0, done.stderr
    proposal_id = re.search(r"proposal (prop-\S+): it lands once approved", out(done)).group(1)  # type: ignore[union-attr]
    assert svc.git(wiki, "rev-parse", "main").strip() == head
    shown = wikiq("proposal", proposal_id, url=svc.url)
    assert shown.returncode == 0 and "open" in out(shown) and "+proposed <b>text</b>" in out(shown)
    approved = as_json(wikiq("approve", proposal_id, "--comment", "fine", "--json", url=svc.url))
    assert approved["state"] == "approved" and approved["decision"]["comment"] == "fine"
    assert svc.wait(approved["job_id"])["status"] == "succeeded"
    landed = as_json(wikiq("proposal", proposal_id, "--json", url=svc.url))
    assert landed["state"] == "landed" and landed["commit"] == svc.git(wiki, "rev-parse", "main").strip()
    refused = wikiq("reject", proposal_id, url=svc.url)
    assert refused.returncode == 1 and "PROPOSAL_NOT_OPEN" in refused.stderr.decode() + out(refused)
