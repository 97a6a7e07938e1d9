"""Names git reads as ``.git``, ``.gitmodules`` or ``.gitattributes`` are INVALID_PATH, and git agrees.

The tables (``tests.security.names``) hold the finding's six attack paths and the other spellings git's
path.c and utf8.c check; the last tests ask the installed git whether each refused name really is one
``git fsck --strict`` flags (and, for ``.git``, one checkout refuses), and each accepted one really clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.gitcheck import FILE_MODE, ObjectWriter, bare, checkout_refuses, fsck_flags
from tests.security.names import ACCEPTED, DOTFILES, DOTGIT, FINDING
from worker.engine.paths import check_path, path_problem, segment_problem
from worker.errors import BatchRejected


def _ids(names: list[str]) -> list[str]:
    return [ascii(name) for name in names]


@pytest.mark.parametrize("path", FINDING, ids=_ids(FINDING))
def test_the_findings_paths_are_invalid_path(path: str) -> None:
    """Each of the six paths of the finding is refused with INVALID_PATH, naming the edit."""
    with pytest.raises(BatchRejected) as info:
        check_path(path, 3)
    assert (info.value.code, info.value.index) == ("INVALID_PATH", 3)
    assert "'.git'" in info.value.message and "rename it" in info.value.message


@pytest.mark.parametrize("segment", DOTGIT, ids=_ids(DOTGIT))
def test_dotgit_spellings_are_refused_as_folder_and_as_file(segment: str) -> None:
    """A segment git reads as .git is INVALID_PATH as a folder and as a page, saying which and what to do."""
    for path in (f"wiki/{segment}/page.md", f"wiki/{segment}", f"{segment}/config"):
        with pytest.raises(BatchRejected) as info:
            check_path(path, 0)
        assert info.value.code == "INVALID_PATH"
        message = info.value.message
        assert "'.git'" in message and "rename it" in message
        if segment.lower() != ".git":
            assert repr(segment) in message and "Windows or macOS" in message


@pytest.mark.parametrize("segment", DOTFILES, ids=_ids(DOTFILES))
def test_gitmodules_and_gitattributes_spellings_are_refused(segment: str) -> None:
    """A segment git reads as .gitmodules or .gitattributes is INVALID_PATH, as a folder and as a page."""
    for path in (f"wiki/{segment}/page.md", f"wiki/{segment}", f"raw/a/{segment}"):
        with pytest.raises(BatchRejected) as info:
            check_path(path, 1)
        assert info.value.code == "INVALID_PATH"
        assert ".gitmodules" in info.value.message or ".gitattributes" in info.value.message
        assert "rename it" in info.value.message


@pytest.mark.parametrize("segment", ACCEPTED, ids=_ids(ACCEPTED))
def test_near_misses_are_accepted(segment: str) -> None:
    """Colons, .gitkeep, .github, .gitignore, other tildes and look-alike letters stay acceptable names."""
    assert segment_problem(segment) is None
    for path in (f"wiki/{segment}", f"wiki/{segment}/page.md"):
        assert path_problem(path) is None
        check_path(path, 0)


def test_git_flags_every_refused_name_and_no_accepted_one(tmp_path: Path) -> None:
    """git fsck --strict flags a tree holding each refused name (file or folder), and none of the accepted."""
    flags = fsck_flags(tmp_path / "repo.git", DOTGIT + DOTFILES + ACCEPTED)
    for name in DOTGIT:
        assert "hasDotgit" in flags[name], (name, flags[name])
    for name in DOTFILES:
        assert any(flag.startswith(("gitmodules", "gitattributes")) for flag in flags[name]), (
            name,
            flags[name],
        )
    assert {name: flags[name] for name in ACCEPTED if flags[name]} == {}


def test_checkout_refuses_every_dotgit_spelling_and_takes_the_accepted(tmp_path: Path) -> None:
    """git's verify_path (read-tree with core.protectNTFS and core.protectHFS) refuses each .git spelling."""
    repo = bare(tmp_path / "repo.git")
    writer = ObjectWriter()
    blob = writer.blob(b"page\n")
    trees = {name: writer.tree({name: (FILE_MODE, blob)}) for name in DOTGIT}
    accepted = writer.tree({name: (FILE_MODE, blob) for name in ACCEPTED + DOTFILES})
    writer.write(repo)
    for name, tree in trees.items():
        assert checkout_refuses(repo, tree) is not None, name
    # .gitmodules and .gitattributes spellings are refused by fsck, not by checkout (for regular files).
    assert checkout_refuses(repo, accepted) is None
