"""Ask the installed git what it makes of tree entry names: ``git fsck --strict`` and ``verify_path``.

``ObjectWriter.names_alone`` gives every name objects of its own (a file holding ``HOSTILE``, and a folder
holding a file), so that each message of ONE ``git fsck --strict`` run (``fsck_messages``) can be put down
to the one name whose object it is about (``attribute``). ``HOSTILE`` is content git fsck refuses in a
``.gitmodules`` and in a ``.gitattributes`` file, so a name git reads as either is flagged as a file too,
not only as a folder. ``checkout_refuses`` asks ``git read-tree`` (which runs ``verify_path`` on every
entry) with ``core.protectNTFS`` and ``core.protectHFS`` on. Objects are written with wikiq's own pack
writer; git reads them back.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.gitutil import bare, git_env
from worker.git.objects import (
    EMPTY_TREE,
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    TREE_MODE,
    PackedObject,
    TreeEditor,
    object_id,
    write_pack,
)

FILE_MODE = 0o100644
# gitmodulesUrl (a url that looks like an option) and gitattributesLineLength (a line of 2048+ bytes).
HOSTILE = b'[submodule "x"]\n\tpath = x\n\turl = -not-an-option\n# ' + b"a" * 3000 + b"\n"
PROTECT = ("-c", "core.protectNTFS=true", "-c", "core.protectHFS=true")
_MESSAGE = re.compile(r"^(?:error|warning) in (?:tree|blob|commit|tag) ([0-9a-f]{40}): (\w+)")


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git with ``args`` in the clean environment, output as text."""
    return subprocess.run(
        ["git", *args], check=check, capture_output=True, text=True, errors="replace", env=git_env()
    )


class ObjectWriter:
    """Objects gathered in memory, then written into a repository as one pack."""

    def __init__(self) -> None:
        self.objects: dict[bytes, PackedObject] = {}

    def _add(self, kind: int, type_name: bytes, data: bytes) -> str:
        oid = object_id(type_name, data)
        self.objects[oid] = PackedObject(kind, oid, data)
        return oid.hex()

    def blob(self, data: bytes) -> str:
        """The id of a blob of ``data``, added."""
        return self._add(OBJ_BLOB, b"blob", data)

    def tree(self, entries: Mapping[str, tuple[int, str]]) -> str:
        """A tree of ``{name: (mode, hex id)}``, in git's order whatever the names."""
        editor = TreeEditor(EMPTY_TREE)
        for name, (mode, oid) in entries.items():
            editor.put(name, mode, oid)
        return self._add(OBJ_TREE, b"tree", editor.build().data())

    def commit(self, tree: str) -> str:
        """The id of a root commit of ``tree``, added."""
        who = b"Security Test <security@example.org> 1700000000 +0000"
        body = b"tree %s\nauthor %s\ncommitter %s\n\nnames\n" % (tree.encode(), who, who)
        return self._add(OBJ_COMMIT, b"commit", body)

    def names_alone(self, names: Iterable[str]) -> dict[str, str]:
        """For each name a ``HOSTILE`` file and a folder in trees of their own; ``{object id: name}``."""
        owner: dict[str, str] = {}
        for at, name in enumerate(dict.fromkeys(names)):
            blob = self.blob(HOSTILE + b"%d\n" % at)
            inner = self.tree({"page.md": (FILE_MODE, blob)})
            as_file = self.tree({name: (FILE_MODE, blob)})
            as_folder = self.tree({name: (TREE_MODE, inner)})
            owner.update(dict.fromkeys((blob, inner, as_file, as_folder), name))
        return owner

    def wiki_tree(self, names: Iterable[str]) -> str:
        """A root tree with every name as a page in ``wiki/pages/`` and as a folder in ``wiki/folders/``."""
        page = self.blob(b"# A page\n")
        folder = self.tree({"page.md": (FILE_MODE, page)})
        unique = list(dict.fromkeys(names))
        pages = self.tree({name: (FILE_MODE, page) for name in unique})
        folders = self.tree({name: (TREE_MODE, folder) for name in unique})
        wiki = self.tree({"pages": (TREE_MODE, pages), "folders": (TREE_MODE, folders)})
        return self.tree({"wiki": (TREE_MODE, wiki), "index.md": (FILE_MODE, page)})

    def write(self, repo: Path) -> None:
        """Store every object gathered in ``repo`` as one pack."""
        write_pack(repo / "objects" / "pack", self.objects).publish()


def fsck_messages(repo: Path) -> list[tuple[str, str]]:
    """``(object id, message id)`` for everything one ``git fsck --strict`` of ``repo`` reports."""
    result = git("--git-dir", str(repo), "fsck", "--strict", "--no-dangling", "--no-progress", check=False)
    messages = []
    for line in result.stderr.splitlines() + result.stdout.splitlines():
        if line.startswith("notice:"):
            continue
        match = _MESSAGE.match(line)
        assert match is not None, f"git fsck said something unexpected: {line!r}"
        messages.append((match[1], match[2]))
    # Some messages are only notes (gitmodulesParse is INFO) and leave the exit code 0; errors never do.
    assert result.returncode == 0 or messages, result.stderr
    return messages


def attribute(
    messages: list[tuple[str, str]], owner: Mapping[str, str]
) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """``{name: its fsck message ids}`` for every name of ``owner``, and the messages about other objects."""
    flags: dict[str, set[str]] = {name: set() for name in owner.values()}
    others = []
    for oid, message in messages:
        if oid in owner:
            flags[owner[oid]].add(message)
        else:
            others.append((oid, message))
    return flags, others


def fsck_flags(repo: Path, names: Iterable[str]) -> dict[str, set[str]]:
    """``{name: fsck message ids}`` for trees holding each name as a file and as a folder, in a new repo."""
    writer = ObjectWriter()
    owner = writer.names_alone(names)
    writer.write(bare(repo))
    flags, others = attribute(fsck_messages(repo), owner)
    assert others == [], others
    return flags


def checkout_refuses(repo: Path, tree: str) -> str | None:
    """git's complaint when reading ``tree`` into an index with NTFS and HFS+ protection on, else None."""
    index = repo / "security-check.index"
    result = git("--git-dir", str(repo), *PROTECT, "read-tree", f"--index-output={index}", tree, check=False)
    index.unlink(missing_ok=True)
    return None if result.returncode == 0 else result.stderr.strip() or f"exit {result.returncode}"
