"""A wiki holding every tricky name wikiq accepts clones and checks out with git's protections on.

The batch goes through wikiq's own path (``check_static``, ``preflight``, ``WikiRepo.commit_plan`` on a
``GitStore`` wiki); the clone is a real ``git clone --no-local`` (so objects travel through
``index-pack`` and ``transfer.fsckObjects`` checks them) with ``core.protectNTFS`` and ``core.protectHFS``
on. The control: for a wiki where one of the finding's paths got in past wikiq, the fetch fails fsck
(``hasDotgit``) and, without fsck, the checkout fails (``invalid path``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.gitcheck import PROTECT, git
from tests.security.names import ACCEPTED, FINDING
from worker.engine import NewFile, Plan, blob_id, check_static, preflight
from worker.errors import BatchRejected
from worker.git import GitStore, Identity
from worker.schema.edits import Batch, Create

ALICE = Identity("Alice Example", "alice@example.org")
CLONE = (*PROTECT, "-c", "transfer.fsckObjects=true", "clone", "-q", "--no-local", "-b", "main")


def _content(path: str) -> bytes:
    return f"# {path}\n".encode()


def test_accepted_tricky_names_clone_and_check_out(tmp_path: Path) -> None:
    """Every accepted near-miss name, as a page and as a folder, survives a protected, fsck-checked clone."""
    store = GitStore(tmp_path / "data")
    store.create("tricky", ALICE)
    repo = store.open("tricky")
    paths = [f"wiki/pages/{name}" for name in ACCEPTED] + [
        f"wiki/folders/{name}/page.md" for name in ACCEPTED
    ]
    batch = Batch(
        message="Pages with tricky names",
        edits=[Create(op="create", path=path, content=_content(path).decode()) for path in paths],
    )
    check_static(batch)
    base = repo.head()
    head = repo.commit_plan(preflight(repo.snapshot(base), batch.edits), base, batch.message, ALICE)
    store.close()

    clone = tmp_path / "clone"
    result = git(*CLONE, str(store.path("tricky")), str(clone), check=False)
    assert result.returncode == 0, result.stderr
    assert git("-C", str(clone), "rev-parse", "HEAD").stdout.strip() == head
    for path in paths:
        assert (clone / path).read_bytes() == _content(path), path
    assert git("-C", str(clone), "status", "--porcelain").stdout == ""


@pytest.mark.parametrize("path", FINDING, ids=[ascii(path) for path in FINDING])
def test_a_finding_path_that_got_past_wikiq_breaks_the_clone(tmp_path: Path, path: str) -> None:
    """Control: check_static refuses the path; committed anyway, it fails git's fsck and git's checkout."""
    with pytest.raises(BatchRejected) as info:
        check_static(Batch(message="m", edits=[Create(op="create", path=path, content="x")]))
    assert info.value.code == "INVALID_PATH"

    store = GitStore(tmp_path / "data")
    store.create("broken", ALICE)
    repo = store.open("broken")
    base = repo.head()
    # Straight to the store, past every check, as a wiki written before the fix could hold it.
    repo.commit_plan(Plan(changes={path: NewFile(blob_id(b"x"), b"x")}), base, "bypass", ALICE)
    store.close()

    source = str(store.path("broken"))
    fsck_only = ("-c", "transfer.fsckObjects=true", "clone", "--no-local", "--no-checkout")
    fetched = git(*fsck_only, source, str(tmp_path / "a"), check=False)
    assert fetched.returncode != 0 and "hasDotgit" in fetched.stderr, fetched.stderr
    checked_out = git(*PROTECT, "clone", "-q", "--no-local", source, str(tmp_path / "b"), check=False)
    assert checked_out.returncode != 0 and "invalid path" in checked_out.stderr, checked_out.stderr
