"""In-place ops on one existing file: ``append``, ``frontmatter`` and the five section ops (contract 7).

Each is allowed where the zone policy allows ``replace`` (``state.ZONE_OPS``) and changes only what it
names; the rest of the file is kept byte for byte.

- ``append``: ``content`` at the end; first a line break (the file's own: the ending of its last line
  break, else ``\\n``) when the file is not empty and does not end with one.
- ``frontmatter``: ``markdown.set_frontmatter`` (keys, order and comments kept; ``FRONTMATTER_INVALID``
  when the block is not a YAML mapping).
- section ops: ``markdown.sections`` (``SECTION_NOT_FOUND``, ``SECTION_AMBIGUOUS``); ``rename_section``
  with ``rewrite_links`` then repoints every link to the section (``relink.follow_renamed_section``).

Versions: ``append`` and ``frontmatter`` take an optional ``expected_version`` (without it they apply to
whatever the page holds, so they never conflict); a section op needs ``expected_version`` (the page) or
``expected_section_version`` (the addressed section, as the batch left the page), unless the page was
created earlier in the batch. Text ops need UTF-8 (``INVALID_ENCODING`` otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from worker.engine.markdown import (
    append_section,
    find_section,
    insert_section_after,
    locate,
    remove_section,
    rename_section,
    replace_section,
    set_frontmatter,
)
from worker.engine.plan import NewFile
from worker.engine.relink import follow_renamed_section
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import (
    Append,
    AppendSection,
    ExtractSection,
    Frontmatter,
    InsertSectionAfter,
    RemoveSection,
    RenameSection,
    ReplaceSection,
    SectionEdit,
    utf8,
)


def append(work: BatchState, index: int, edit: Append) -> None:
    """Add ``edit.content`` at the end of an existing file."""
    file = work.existing(index, edit.path)
    work.check_version(index, edit.path, edit.expected_version, required=False)
    data = work.content(file)
    added = utf8(edit.content, index)
    if data and not data.endswith((b"\n", b"\r")):
        added = line_break(data) + added
    work.check_file_size(index, edit.path, len(data) + len(added))
    work.write(index, "append", edit.path, data + added)


def line_break(data: bytes) -> bytes:
    """The line break ``data`` uses last (``\\r\\n``, ``\\n`` or ``\\r``), else ``\\n``."""
    at = data.rfind(b"\n")
    if at > 0 and data[at - 1 : at] == b"\r":
        return b"\r\n"
    if at >= 0:
        return b"\n"
    return b"\r" if b"\r" in data else b"\n"


def frontmatter(work: BatchState, index: int, edit: Frontmatter) -> None:
    """Merge ``edit.set`` into the page's front matter and drop ``edit.unset``."""
    file = work.existing(index, edit.path)
    work.check_version(index, edit.path, edit.expected_version, required=False)
    text = work.text(index, edit.path, file)
    new = set_frontmatter(text, set=edit.set or {}, unset=edit.unset or [], index=index)
    work.write(index, "frontmatter", edit.path, new.encode("utf-8"))


def section(work: BatchState, index: int, edit: SectionEdit) -> None:
    """Apply one of the five section ops to the page as the batch left it."""
    file = check_section_versions(work, index, edit)
    text = work.text(index, edit.path, file)
    with section_guard(work, edit, text, index):
        new = _section_op(text, index, edit)
    work.write(index, edit.op, edit.path, new.encode("utf-8"))
    if isinstance(edit, RenameSection) and edit.rewrite_links:
        follow_renamed_section(work, index, edit.path, text, edit.heading)


def check_section_versions(work: BatchState, index: int, edit: SectionEdit | ExtractSection) -> NewFile:
    """The page a section op edits, its versions checked: ``expected_version`` (rule 2) or
    ``expected_section_version`` (checked by the op), one of them required unless the batch created the
    page."""
    file = work.existing(index, edit.path)
    if edit.expected_version is None and edit.expected_section_version is None:
        if edit.path not in work.created:
            raise BatchRejected(
                "VERSION_REQUIRED",
                f"{edit.path!r} exists; give expected_version (the page's version) or "
                "expected_section_version (the section's, from page_outline or read_page with sections=true)",
                index,
            )
    elif edit.expected_version is not None:
        # replacing, removing or extracting a section drops what it held, as an overwrite drops the page's
        whole = isinstance(edit, ReplaceSection | RemoveSection | ExtractSection)
        work.check_version(index, edit.path, edit.expected_version, whole=whole)
    return file


@contextmanager
def section_guard(
    work: BatchState, edit: SectionEdit | ExtractSection, text: str, index: int
) -> Iterator[None]:
    """Give a section op's ``VERSION_MISMATCH`` the page's and the section's current versions."""
    try:
        yield
    except BatchRejected as exc:
        if exc.code == "VERSION_MISMATCH" and exc.details is None:
            current = find_section(text, edit.heading, index).version
            exc.details = {
                "path": edit.path,
                "current_version": work.head.version(edit.path),
                "current_section_version": current,
            }
        raise


def _section_op(text: str, index: int, edit: SectionEdit) -> str:
    """The page ``text`` after the section op ``edit``, its section guard checked."""
    at = locate(text, edit.heading, index=index, expected_section_version=edit.expected_section_version)
    if isinstance(edit, ReplaceSection):
        return replace_section(at, edit.content)
    if isinstance(edit, AppendSection):
        return append_section(at, edit.content)
    if isinstance(edit, InsertSectionAfter):
        return insert_section_after(at, edit.new_heading, edit.level, edit.content)
    if isinstance(edit, RemoveSection):
        return remove_section(at)
    assert isinstance(edit, RenameSection)
    return rename_section(at, edit.new_heading)
