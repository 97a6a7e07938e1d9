"""``WikiRepo.list_files`` (an in-process walk of only the subtrees it returns) against plain git."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gitutil import git
from worker.engine import NewFile, Plan, blob_id
from worker.git import GitStore, Identity

NAMES = st.sampled_from(["a", "a.b", "a-b", "b", "t05", "t0500", "x.md", "y.md", "a b", "é.md", "Z"])
PATHS = st.lists(
    st.lists(NAMES, min_size=1, max_size=4).map(lambda parts: "wiki/" + "/".join(parts)), max_size=40
)


def _reference(repo: Path, commit: str, prefix: str, after: str) -> list[tuple[str, str, int]]:
    out = []
    for record in git(repo, "ls-tree", "-r", "-l", "-z", commit).split(b"\x00"):
        if record:
            meta, path = record.split(b"\t", 1)
            _mode, kind, oid, size = meta.split()
            name = path.decode()
            if kind == b"blob" and name.startswith(prefix) and name > after:
                out.append((name, oid.decode(), int(size)))
    return sorted(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    paths=PATHS,
    prefix=st.sampled_from(["", "wiki/", "wiki/a", "wiki/a/", "wiki/t05", "wiki/a.b/", "zz"]),
    after=st.sampled_from(["", "wiki/a", "wiki/a/", "wiki/a-b", "wiki/t0500/x.md", "wiki/z"]),
    limit=st.sampled_from([None, 1, 3, 1000]),
)
def test_listing_equals_git_ls_tree(
    tmp_path_factory,
    paths: list[str],
    prefix: str,
    after: str,  # type: ignore[no-untyped-def]
    limit: int | None,
) -> None:
    """Every file under ``prefix`` after ``after``, sorted, the first ``limit``: exactly what git lists."""
    store = GitStore(tmp_path_factory.mktemp("list"))
    store.create("w")
    repo = store.open("w")
    files: dict[str, bytes] = {}
    for path in paths:  # keep a consistent tree: no file where a folder is
        if any(p.startswith(path + "/") or path.startswith(p + "/") for p in files):
            continue
        files[path] = path.encode() * 3
    changes = {p: NewFile(blob_id(d), d) for p, d in files.items()}
    commit = repo.commit_plan(Plan(changes=changes), repo.head(), "m", Identity("t", "t@x"))
    found = [(f.path, f.version, f.size) for f in repo.list_files(commit, prefix, after, limit)]
    expected = _reference(repo.path, commit, prefix, after)
    assert found == (expected if limit is None else expected[:limit])
    store.close()
