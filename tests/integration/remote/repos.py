"""Plain-git helpers for the remote tests: bare repositories, commits made with plumbing, a refusing hook."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.org",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.org",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str, input: str | None = None) -> str:
    """Run plain git on ``repo`` (a git dir) and return its stripped stdout; fails the test on error."""
    result = subprocess.run(
        ["git", "--git-dir", str(repo), *args],
        capture_output=True,
        text=True,
        input=input,
        env={**os.environ, **IDENTITY},
        check=False,
    )
    assert result.returncode == 0, f"git {args}: {result.stderr}"
    return result.stdout.strip()


def make_bare(path: Path) -> Path:
    """A new empty bare repository at ``path`` whose HEAD names ``main``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)],
        check=True,
        env={**os.environ, **IDENTITY},
    )
    return path


def commit(repo: Path, parent: str | None, message: str, files: dict[str, str] | None = None) -> str:
    """A commit object in ``repo`` with ``files`` (default: one file named after the message)."""
    files = files or {"wiki/page.md": f"# {message}\n"}
    entries = []
    for name, text in sorted(files.items()):
        blob = git(repo, "hash-object", "-w", "--stdin", input=text)
        entries.append((name, blob))
    tree = _tree(repo, entries)
    args = ["commit-tree", "-m", message, tree]
    if parent is not None:
        args += ["-p", parent]
    return git(repo, *args)


def _tree(repo: Path, entries: list[tuple[str, str]]) -> str:
    """The tree id of ``entries`` (paths with folders), built bottom-up with ``git mktree``."""
    files = [(name, blob) for name, blob in entries if "/" not in name]
    folders: dict[str, list[tuple[str, str]]] = {}
    for name, blob in entries:
        if "/" in name:
            head, rest = name.split("/", 1)
            folders.setdefault(head, []).append((rest, blob))
    lines = [f"100644 blob {blob}\t{name}" for name, blob in files]
    lines += [f"040000 tree {_tree(repo, inner)}\t{name}" for name, inner in folders.items()]
    return git(repo, "mktree", input="\n".join(lines) + "\n")


def branch_head(repo: Path, branch: str = "main") -> str | None:
    """The commit ``refs/heads/<branch>`` of ``repo`` points at, read with plain git; None when absent."""
    result = subprocess.run(
        ["git", "--git-dir", str(repo), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
        env={**os.environ, **IDENTITY},
        check=False,
    )
    return result.stdout.strip() or None


def push_as_someone_else(repo: Path, workdir: Path, message: str) -> str:
    """Another writer's commit on ``main`` of the bare ``repo``, pushed from a clone with plain git."""
    clone = workdir / f"someone-else-{message.replace(' ', '-')}.git"
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(repo), str(clone)],
        check=True,
        env={**os.environ, **IDENTITY},
    )
    parent = branch_head(clone)
    new = commit(clone, parent, message, {"wiki/other.md": f"{message}\n"})
    git(clone, "push", "--quiet", str(repo), f"{new}:refs/heads/main")
    return new


def refuse_pushes(repo: Path, times: int | None = None, message: str = "refused by the test hook") -> None:
    """Install a pre-receive hook in ``repo`` refusing every push, or only the next ``times`` pushes."""
    hook = repo / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    if times is None:
        body = f'echo "{message}" >&2\nexit 1\n'
    else:
        counter = repo / "refusals-left"
        counter.write_text(f"{times}\n")
        body = (
            f'left=$(cat "{counter}")\n'
            'if [ "$left" -gt 0 ]; then\n'
            f'  echo $((left - 1)) > "{counter}"\n'
            f'  echo "{message}" >&2\n'
            "  exit 1\n"
            "fi\n"
            "exit 0\n"
        )
    hook.write_text("#!/bin/sh\n" + body)
    hook.chmod(0o755)
