"""Finding 8 (low), remote problems: a remote-backed wiki's tree was checked only when it was attached, so a
symbolic link, a submodule or a file outside the zones that someone pushed later was never reported
(the link was listed, and 404 on read). Now the tree is checked again whenever a publish or a fetch
brings someone else's commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.remotes import batch, create, deployment
from tests.integration.remote.conftest import start_site
from tests.integration.remote.repos import branch_head, git


def _push_hostile_tree(repo: Path) -> str:
    """Someone else's commit on ``main`` adding a symlink and a submodule under wiki/ and a file outside
    the zones; the new head."""
    head = branch_head(repo)
    assert head is not None
    page = git(repo, "hash-object", "-w", "--stdin", input="# page\n")
    target = git(repo, "hash-object", "-w", "--stdin", input="/etc/passwd")
    wiki = git(
        repo,
        "mktree",
        "--missing",
        input=f"100644 blob {page}\tpage.md\n120000 blob {target}\tlink.md\n160000 commit {head}\tsub\n",
    )
    notes = git(repo, "mktree", input=f"100644 blob {page}\toutside.md\n")
    root = git(repo, "ls-tree", head) + f"\n040000 tree {wiki}\twiki\n040000 tree {notes}\tnotes\n"
    tree = git(repo, "mktree", "--missing", input=root)
    new = git(repo, "commit-tree", "-p", head, "-m", "someone pushed this", tree)
    git(repo, "update-ref", "refs/heads/main", new, head)
    return new


def test_problems_pushed_after_attach_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attached clean; after someone pushes a link, a submodule and an out-of-zone file, the next publish
    reports all three, and the wiki still publishes."""
    site = start_site("file", tmp_path, monkeypatch)
    repo, remote = site.new_repo()
    service = deployment(tmp_path / "svc", remote)
    try:
        made = service.client.post("/v1/wikis", json={"id": "docs", "remote": "docs"})
        assert made.status_code == 201, made.text
        assert not made.json().get("problems")
        hostile = _push_hostile_tree(repo)
        job = service.apply("docs", batch("after the push", create("wiki/new.md")))
        assert job["status"] == "succeeded", job
        assert git(repo, "rev-parse", "main^") == hostile
        (listed,) = service.client.get("/v1/wikis").json()["wikis"]
        problems = " ".join(listed.get("problems") or [])
        assert "'wiki/link.md': a symbolic link" in problems, listed
        assert "'wiki/sub': a submodule" in problems, listed
        assert "notes/outside.md" in problems, listed
        assert service.client.get("/v1/wikis/docs/pages/wiki/link.md").status_code == 404
    finally:
        service.stop()
        site.stop()
