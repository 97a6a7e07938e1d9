"""The git store on real bare repositories in tmp_path: creation, reads, commits, CAS of main, refusals."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from tests.gitutil import fsck, git, tree_files
from tests.gitutil import git_text as gits
from worker.engine import DictHead, NewFile, Plan, blob_id, check_static, preflight
from worker.errors import BatchRejected, RefMoved, WikiExists, WikiNotFound
from worker.git import INITIAL_FILES, GitStore, Identity, WikiRepo
from worker.schema.edits import Batch, Create, Delete, Edit, Overwrite, Rename

ALICE = Identity("Alice Example", "alice@example.org")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def snapshot_tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def commit(repo: WikiRepo, edits: list[Edit], message: str = "edit", job_id: str | None = None) -> str:
    base = repo.head()
    plan = preflight(repo.snapshot(base), edits)
    return repo.commit_plan(plan, base, message, ALICE, job_id=job_id)


def create(path: str, content: str = "x\n") -> Create:
    return Create(op="create", path=path, content=content)


@pytest.fixture
def store(data_dir: Path) -> GitStore:
    return GitStore(data_dir)


# -- creating wikis ------------------------------------------------------------------------------------


def test_create_makes_a_bare_repo_with_one_initial_commit(store: GitStore) -> None:
    """A new wiki is a bare repo on main whose one root commit holds index.md, log.md and schema.md."""
    head = store.create("homelab")
    path = store.path("homelab")
    assert path == store.root / "homelab.git"
    assert gits(path, "rev-parse", "--is-bare-repository").strip() == "true"
    assert gits(path, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert gits(path, "rev-parse", "main").strip() == head
    assert gits(path, "rev-list", "--parents", "main").split() == [head]
    assert tree_files(path, head) == dict(INITIAL_FILES)
    assert set(INITIAL_FILES) == {"index.md", "log.md", "schema.md"}
    assert gits(path, "log", "-1", "--format=%cn <%ce>", head).strip() == "wikiq <wikiq@localhost>"
    assert store.exists("homelab") and store.ids() == ["homelab"]
    fsck(path)


def test_create_twice_is_wiki_exists(store: GitStore) -> None:
    """Creating an existing wiki raises WikiExists and leaves it and the wikis folder as they were."""
    store.create("homelab")
    before = snapshot_tree(store.root)
    with pytest.raises(WikiExists) as info:
        store.create("homelab")
    assert info.value.code == "WIKI_EXISTS"
    assert snapshot_tree(store.root) == before


@pytest.mark.parametrize(
    "wiki",
    ["", "A", "Home", "-x", ".x", "_x", "x/y", "../x", "a" * 64, "x y", "é", "x\x00", "x\n", "."],
)
def test_invalid_wiki_ids_are_refused_and_nothing_is_created(
    store: GitStore, data_dir: Path, wiki: str
) -> None:
    """An id not matching ^[a-z0-9][a-z0-9._-]{0,62}$ is refused on create and open, writing nothing."""
    before = snapshot_tree(data_dir)
    with pytest.raises(WikiNotFound):
        store.create(wiki)
    with pytest.raises(WikiNotFound):
        store.open(wiki)
    assert not store.exists(wiki)
    assert snapshot_tree(data_dir) == before


@pytest.mark.parametrize("wiki", ["a", "0", "a" * 63, "a.b_c-d", "x.git"])
def test_valid_wiki_ids_are_accepted(store: GitStore, wiki: str) -> None:
    """Ids at the edges of the pattern (one char, 63 chars, dots, dashes, underscores) are accepted."""
    store.create(wiki)
    assert store.exists(wiki)
    assert store.open(wiki).head() is not None


def test_open_of_unknown_wiki_is_wiki_not_found(store: GitStore) -> None:
    """Opening a wiki that was never created raises WikiNotFound."""
    with pytest.raises(WikiNotFound) as info:
        store.open("nope")
    assert info.value.code == "WIKI_NOT_FOUND"


def test_ids_are_sorted_and_skip_leftovers(store: GitStore) -> None:
    """ids() lists created wikis sorted and ignores folders that are not wikis."""
    for wiki in ("zeta", "alpha", "mid"):
        store.create(wiki)
    (store.root / "junk.git").mkdir()
    assert store.ids() == ["alpha", "mid", "zeta"]


def test_clone_of_a_wiki_works(store: GitStore, tmp_path: Path) -> None:
    """Anyone can clone a wiki with plain git and see main's files."""
    store.create("homelab")
    commit(store.open("homelab"), [create("wiki/page.md", "hello\n")])
    target = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", str(store.path("homelab")), str(target)], check=True, capture_output=True
    )
    assert (target / "wiki" / "page.md").read_bytes() == b"hello\n"
    assert (target / "index.md").read_bytes() == INITIAL_FILES["index.md"]


# -- reading -------------------------------------------------------------------------------------------


def test_read_file_and_version_at_a_commit(store: GitStore) -> None:
    """A snapshot of an older commit still reads that commit's bytes and versions."""
    first = store.create("homelab")
    repo = store.open("homelab")
    old = INITIAL_FILES["index.md"]
    second = commit(
        repo, [Overwrite(op="overwrite", path="index.md", content="# New\n", expected_version=blob_id(old))]
    )
    at_first, at_second = repo.snapshot(first), repo.snapshot(second)
    assert at_first.read("index.md") == old
    assert at_first.version("index.md") == blob_id(old)
    assert at_second.read("index.md") == b"# New\n"
    assert at_second.version("index.md") == gits(repo.path, "rev-parse", f"{second}:index.md").strip()
    assert repo.snapshot().commit == second
    with pytest.raises(KeyError):
        at_second.read("wiki/missing.md")


def test_snapshot_folders_and_files_under(store: GitStore) -> None:
    """A snapshot tells folders from files and lists the files below a folder."""
    store.create("homelab")
    repo = store.open("homelab")
    commit(repo, [create("wiki/d/a.md"), create("wiki/d/e/b.md"), create("wiki/c.md")])
    snap = repo.snapshot()
    assert snap.is_dir("wiki/d") and snap.is_dir("wiki/d/e") and not snap.is_dir("wiki/c.md")
    assert snap.version("wiki/d") is None and snap.version("wiki/c.md/x") is None
    assert sorted(snap.files_under("wiki/d")) == ["wiki/d/a.md", "wiki/d/e/b.md"]
    assert list(snap.files_under("wiki/c.md")) == []


def test_list_files_matches_git_ls_tree(store: GitStore) -> None:
    """list_files gives every file with the version and size `git ls-tree -r -l` shows, sorted, by prefix."""
    store.create("homelab")
    repo = store.open("homelab")
    head = commit(
        repo,
        [
            create("wiki/Straße/日本語 page.md", "ü\n"),
            create("wiki/a b.md", ""),
            Create(
                op="create",
                path="raw/blob.bin",
                content=base64.b64encode(b"\x00" * 300).decode(),
                encoding="base64",
            ),
        ],
    )
    expected = []
    for record in git(repo.path, "ls-tree", "-r", "-l", "-z", head).split(b"\x00"):
        if record:
            meta, path = record.split(b"\t", 1)
            _mode, _kind, oid, size = meta.decode().split()
            expected.append((path.decode(), oid, int(size)))
    files = repo.list_files(head)
    assert [(f.path, f.version, f.size) for f in files] == sorted(expected)
    assert len(files) == 6
    assert [f.path for f in repo.list_files(head, "wiki/")] == ["wiki/Straße/日本語 page.md", "wiki/a b.md"]
    assert [f.size for f in repo.list_files(head, "raw/")] == [300]


def test_log_is_newest_first(store: GitStore) -> None:
    """log() walks main from the head back, newest first, up to the limit, from any start."""
    root = store.create("homelab")
    repo = store.open("homelab")
    c1 = commit(repo, [create("wiki/1.md")], "one", job_id="j1")
    c2 = commit(repo, [create("wiki/2.md")], "two", job_id="j2")
    c3 = commit(repo, [create("wiki/3.md")], "three", job_id="j3")
    assert [c.commit for c in repo.log(10)] == [c3, c2, c1, root]
    assert [c.commit for c in repo.log(2)] == [c3, c2]
    assert [c.commit for c in repo.log(10, start=c2)] == [c2, c1, root]
    assert [c.job_id for c in repo.log(4)] == ["j3", "j2", "j1", None]
    assert gits(repo.path, "rev-list", "main").split() == [c3, c2, c1, root]


# -- committing ----------------------------------------------------------------------------------------


def test_commit_plan_writes_one_commit_with_trailer_author_and_parent(store: GitStore) -> None:
    """A plan becomes one commit: message + Wikiq-Job trailer, the caller as author, wikiq as committer."""
    base = store.create("homelab")
    repo = store.open("homelab")
    plan = preflight(repo.snapshot(base), [create("wiki/a.md", "A\n")])
    new = repo.commit_plan(plan, base, "Add page A", ALICE, job_id="01JOBID", when=1_700_000_000)
    assert repo.head() == new
    assert gits(repo.path, "rev-list", "--count", "main").strip() == "2"
    assert gits(repo.path, "rev-list", "--parents", "-1", new).split() == [new, base]
    shown = gits(repo.path, "log", "-1", "--format=%an|%ae|%at|%cn|%ce|%B", new).split("|")
    assert shown[:5] == ["Alice Example", "alice@example.org", "1700000000", "wikiq", "wikiq@localhost"]
    assert shown[5] == "Add page A\n\nWikiq-Job: 01JOBID\n\n"
    assert (
        gits(repo.path, "log", "-1", "--format=%(trailers:key=Wikiq-Job,valueonly)", new).strip() == "01JOBID"
    )
    info = repo.commit_info(new)
    assert (info.job_id, info.author, info.time, info.parents) == ("01JOBID", ALICE, 1_700_000_000, (base,))
    assert tree_files(repo.path, new) == {**INITIAL_FILES, "wiki/a.md": b"A\n"}
    fsck(repo.path)


def test_commit_without_job_id_has_no_trailer(store: GitStore) -> None:
    """Without a job id the message is stored as given and no trailer is invented."""
    store.create("homelab")
    repo = store.open("homelab")
    new = commit(repo, [create("wiki/a.md")], "plain message\n\n")
    assert gits(repo.path, "log", "-1", "--format=%B", new) == "plain message\n\n"
    assert repo.commit_info(new).job_id is None


def test_job_trailer_in_the_message_does_not_hide_the_jobs_own(store: GitStore) -> None:
    """A message that quotes another job's trailer still records, and is found by, its own job id."""
    base = store.create("homelab")
    repo = store.open("homelab")
    new = commit(repo, [create("wiki/a.md")], "Revert 'x'\n\nWikiq-Job: 01OTHER\n", job_id="01MINE")
    assert repo.commit_info(new).job_id == "01MINE"
    assert repo.find_job_commit("01MINE", base) == new
    assert repo.find_job_commit("01OTHER", base) is None
    assert (
        gits(repo.path, "log", "-1", "--format=%(trailers:key=Wikiq-Job,valueonly)", new).strip() == "01MINE"
    )


def test_odd_messages_and_identities_give_fsck_clean_commits(store: GitStore) -> None:
    """NUL, CR and angle brackets in the message or identity never produce an object git calls broken."""
    base = store.create("homelab")
    repo = store.open("homelab")
    plan = preflight(repo.snapshot(base), [create("wiki/a.md")])
    mallory = Identity("Mal <lory>\n\x00", "mal\n<x>@example.org")
    new = repo.commit_plan(plan, base, "nul\x00inside\r\nand CR", mallory, job_id="J1")
    fsck(repo.path)
    info = repo.commit_info(new)
    assert "\x00" not in info.message and info.message.startswith("nul")
    assert info.job_id == "J1"
    assert info.author.name == "Mal lory" and info.author.email == "malx@example.org"


def test_find_job_commit_by_trailer_respects_stop_at(store: GitStore) -> None:
    """find_job_commit finds the commit naming a job, searching back to stop_at excluded."""
    root = store.create("homelab")
    repo = store.open("homelab")
    c1 = commit(repo, [create("wiki/1.md")], job_id="job-1")
    c2 = commit(repo, [create("wiki/2.md")], job_id="job-2")
    commit(repo, [create("wiki/3.md")], job_id="job-3")
    assert repo.find_job_commit("job-1", root) == c1
    assert repo.find_job_commit("job-1", None) == c1
    assert repo.find_job_commit("job-2", c1) == c2
    assert repo.find_job_commit("job-1", c1) is None  # stop_at is excluded
    assert repo.find_job_commit("job-1", c2) is None
    assert repo.find_job_commit("job-404", None) is None
    assert repo.find_job_commit("job-1", None, limit=2) is None  # bounded walk


def test_stale_base_is_ref_moved_and_ref_unchanged(store: GitStore) -> None:
    """Committing on a base main has moved past raises RefMoved and leaves main where it is."""
    base = store.create("homelab")
    repo = store.open("homelab")
    winner = commit(repo, [create("wiki/a.md")])
    ref = repo.path / "refs" / "heads" / "main"
    before = ref.read_bytes()
    plan = preflight(repo.snapshot(base), [create("wiki/b.md")])
    with pytest.raises(RefMoved) as info:
        repo.commit_plan(plan, base, "late", ALICE, job_id="late")
    assert (info.value.expected, info.value.actual) == (base, winner)
    assert ref.read_bytes() == before
    assert repo.head() == winner
    assert not ref.with_name("main.lock").exists()
    assert repo.find_job_commit("late", None) is None
    fsck(repo.path)


def test_main_lock_of_another_writer_is_ref_moved_and_ref_untouched(store: GitStore) -> None:
    """A main.lock held by another writer makes the swap fail with RefMoved; ref and lock stay untouched."""
    base = store.create("homelab")
    repo = store.open("homelab")
    ref = repo.path / "refs" / "heads" / "main"
    lock = ref.with_name("main.lock")
    lock.write_bytes(b"someone else's\n")
    before = ref.read_bytes()
    plan = preflight(repo.snapshot(base), [create("wiki/a.md")])
    with pytest.raises(RefMoved):
        repo.commit_plan(plan, base, "blocked", ALICE)
    assert ref.read_bytes() == before
    assert lock.read_bytes() == b"someone else's\n"
    assert repo.head() == base
    lock.unlink()
    assert repo.commit_plan(plan, base, "unblocked", ALICE) == repo.head()


def test_unborn_main_can_only_be_swapped_from_none(store: GitStore) -> None:
    """A commit on a base None fails with RefMoved once main exists."""
    store.create("homelab")
    repo = store.open("homelab")
    with pytest.raises(RefMoved):
        repo.commit_plan(Plan(), None, "root again", ALICE)


def test_rename_delete_and_file_over_folder_land_in_git(store: GitStore) -> None:
    """Renames reuse the blob, emptied folders vanish, and a file may take the place of an emptied folder."""
    store.create("homelab", files={"wiki/a.md": b"A\n", "wiki/dir/x.md": b"X\n", "wiki/keep/k.md": b"K\n"})
    repo = store.open("homelab")
    new = commit(
        repo,
        [
            Rename(
                op="rename", path="wiki/a.md", new_path="wiki/moved/a.md", expected_version=blob_id(b"A\n")
            ),
            Delete(op="delete", path="wiki/dir/x.md", expected_version=blob_id(b"X\n")),
            create("wiki/dir", "now a file\n"),
            Delete(op="delete", path="wiki/keep/k.md", expected_version=blob_id(b"K\n")),
        ],
    )
    assert tree_files(repo.path, new) == {"wiki/moved/a.md": b"A\n", "wiki/dir": b"now a file\n"}
    assert "keep" not in gits(repo.path, "ls-tree", "-r", "-t", "--name-only", new)
    fsck(repo.path)


def test_deleting_every_file_gives_the_empty_tree(store: GitStore) -> None:
    """A batch that deletes the last file commits git's empty tree."""
    store.create("homelab", files={"wiki/a.md": b"A\n"})
    repo = store.open("homelab")
    new = commit(repo, [Delete(op="delete", path="wiki/a.md", expected_version=blob_id(b"A\n"))])
    assert gits(repo.path, "rev-parse", f"{new}^{{tree}}").strip() == EMPTY_TREE
    fsck(repo.path)


def test_unchanged_trees_are_shared_with_the_parent(store: GitStore) -> None:
    """Only trees on changed paths are new: an untouched folder keeps its tree id."""
    base = store.create("homelab", files={"wiki/a/x.md": b"x", "wiki/b/y.md": b"y"})
    repo = store.open("homelab")
    new = commit(repo, [create("wiki/a/z.md")])
    assert (
        gits(repo.path, "rev-parse", f"{new}:wiki/b").strip()
        == gits(repo.path, "rev-parse", f"{base}:wiki/b").strip()
    )
    assert gits(repo.path, "rev-parse", f"{new}:wiki/a") != gits(repo.path, "rev-parse", f"{base}:wiki/a")


def test_reads_survive_lru_eviction(data_dir: Path) -> None:
    """With one open repository allowed, alternating wikis still read and commit correctly."""
    store = GitStore(data_dir, max_open=1)
    store.create("one")
    store.create("two")
    for round_ in range(3):
        for wiki in ("one", "two"):
            commit(store.open(wiki), [create(f"wiki/{round_}.md", wiki)])
    for wiki in ("one", "two"):
        assert store.open(wiki).snapshot().read("wiki/2.md") == wiki.encode()
        assert len(store.open(wiki).log(10)) == 4
    store.close()


def test_no_working_tree_and_nothing_outside_the_repository(
    store: GitStore, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating and committing writes only inside <data>/wikis/<id>.git, which stays bare (no index file)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    store.create("homelab")
    repo = store.open("homelab")
    commit(repo, [create("wiki/a.md"), create("raw/r.md"), create("wiki/d/e.md")])
    inside = "wikis/homelab.git"
    paths = snapshot_tree(data_dir)
    assert all(p in ("wikis", inside) or p.startswith(inside + "/") for p in paths), sorted(paths)
    assert not (repo.path / "index").exists()
    assert not any((repo.path / name).exists() for name in ("wiki", "raw", "index.md"))
    assert snapshot_tree(cwd) == {}
    assert gits(repo.path, "config", "core.bare").strip() == "true"


# -- adversarial batches -------------------------------------------------------------------------------

HEAD_FILES = {"wiki/page.md": b"page\n", "wiki/dir/x.md": b"x\n", "raw/r.md": b"r\n"}
LONG = "wiki/" + "/".join(["s" * 200] * 25)  # about 5000 bytes, every segment legal


def _adversarial() -> dict[str, tuple[Edit, str, str | None]]:
    """name -> (edit, preflight code, check_static code or None when only the repository can tell)."""
    page_v = blob_id(b"page\n")
    bad_paths = {
        "dotdot": "../x",
        "absolute": "/etc/passwd",
        "escape via wiki": "wiki/../../x",
        "git hook": ".git/hooks/post-commit",
        "git config any case": "wiki/.GIT/config",
        "nul": "wiki/a\x00.md",
        "control": "wiki/\x01\x1b.md",
        "backslash": "wiki\\x.md",
        "5000 bytes": LONG,
    }
    cases: dict[str, tuple[Edit, str, str | None]] = {}
    for name, path in bad_paths.items():
        cases[f"create {name}"] = (create(path, "#!/bin/sh\necho pwned\n"), "INVALID_PATH", "INVALID_PATH")
        cases[f"rename to {name}"] = (
            Rename(op="rename", path="wiki/page.md", new_path=path, expected_version=page_v),
            "INVALID_PATH",
            "INVALID_PATH",
        )
    cases["file over a folder"] = (create("wiki/dir", "f\n"), "PATH_CONFLICT", None)
    cases["folder over a file"] = (create("wiki/page.md/x.md", "f\n"), "PATH_CONFLICT", None)
    cases["rename over a folder"] = (
        Rename(op="rename", path="wiki/page.md", new_path="wiki/dir", expected_version=page_v),
        "PATH_CONFLICT",
        None,
    )
    cases["overwrite raw"] = (
        Overwrite(op="overwrite", path="raw/r.md", content="x", expected_version=blob_id(b"r\n")),
        "ZONE_FORBIDDEN",
        "ZONE_FORBIDDEN",
    )
    cases["outside zones"] = (create("hooks.sh"), "ZONE_FORBIDDEN", "ZONE_FORBIDDEN")
    return cases


ADVERSARIAL = _adversarial()


def test_adversarial_batches_are_refused_and_write_nothing(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile paths and file/folder conflicts are refused by check_static or preflight; no byte changes."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    store = GitStore(data_dir)
    store.create("homelab", files=HEAD_FILES)
    repo = store.open("homelab")
    base = repo.head()
    passwd = Path("/etc/passwd").read_bytes()
    before = snapshot_tree(tmp_path)
    assert len(LONG.encode()) > 4096
    seen = []
    for name, (edit, preflight_code, static_code) in ADVERSARIAL.items():
        batch = Batch(message=name, edits=[create("wiki/fine.md"), edit])
        try:
            check_static(batch)
        except BatchRejected as err:
            assert (err.code, err.index) == (static_code, 1), name
        else:
            assert static_code is None, name
        # Preflight alone (as the worker runs it) refuses too; only a plan that passed would be committed.
        try:
            plan = preflight(repo.snapshot(base), batch.edits)
        except BatchRejected as err:
            assert (err.code, err.index) == (preflight_code, 1), name
            seen.append(name)
        else:
            repo.commit_plan(plan, base, name, ALICE, job_id=name)
            pytest.fail(f"{name}: preflight accepted a hostile batch")
    assert seen == list(ADVERSARIAL)
    assert repo.head() == base
    assert snapshot_tree(tmp_path) == before
    assert Path("/etc/passwd").read_bytes() == passwd
    store.close()


def test_preflight_against_git_matches_dict_head(store: GitStore) -> None:
    """The same batch gets the same plan against the git snapshot as against a DictHead of the same files."""
    store.create("homelab", files=HEAD_FILES)
    repo = store.open("homelab")
    edits: list[Edit] = [
        Rename(op="rename", path="wiki/page.md", new_path="wiki/p2.md", expected_version=blob_id(b"page\n")),
        Delete(op="delete", path="wiki/dir/x.md", expected_version=blob_id(b"x\n")),
        create("wiki/dir", "f\n"),
    ]
    from_git = preflight(repo.snapshot(), edits)
    from_dict = preflight(DictHead(HEAD_FILES), edits)
    assert from_git.applied == from_dict.applied
    assert from_git.changes == from_dict.changes
    assert from_git.changes["wiki/p2.md"] == NewFile(blob_id(b"page\n"), source="wiki/page.md")
