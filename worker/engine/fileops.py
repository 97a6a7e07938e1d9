"""The whole-file ops of contract 3.1: create, overwrite, replace, delete (rename lives in ``moves``)."""

from __future__ import annotations

from worker.engine.moves import redirect_after
from worker.engine.plan import Applied
from worker.engine.state import BatchState, check_count
from worker.errors import BatchRejected
from worker.schema.edits import Create, Delete, Overwrite, Replace, decoded


def create(work: BatchState, index: int, edit: Create) -> None:
    """Create ``edit.path`` (``PATH_EXISTS`` when a file is there)."""
    if work.current(edit.path) is not None:
        raise BatchRejected("PATH_EXISTS", f"{edit.path!r} already exists; use overwrite or replace", index)
    work.write(index, "create", edit.path, decoded(edit, index))
    work.created.add(edit.path)
    work.made.append(edit.path)


def overwrite(work: BatchState, index: int, edit: Overwrite) -> None:
    """Replace the whole content of an existing file. Naming the head's version of a page an earlier edit
    of the batch already changed is allowed (rule 2), but the new content then likely drops that change:
    a dry run warns ``OVERWRITES_BATCH_EDIT``."""
    existing = work.existing(index, edit.path)
    work.check_version(index, edit.path, edit.expected_version, whole=True)
    head = work.head.version(edit.path)
    if edit.expected_version is not None and edit.expected_version == head != existing.version:
        earlier = sorted({a.index for a in work.applied if edit.path in (a.path, a.new_path)})
        work.warn(
            "OVERWRITES_BATCH_EDIT",
            edit.path,
            f"edit {index} overwrites {edit.path!r} with content written against its head version, so what "
            f"edit(s) {', '.join(map(str, earlier))} of this batch changed in it is lost unless the new "
            "content has it: build the content from this dry run's diff, or move this edit before them",
        )
    work.write(index, "overwrite", edit.path, decoded(edit, index))


def replace(work: BatchState, index: int, edit: Replace) -> None:
    """Replace ``old`` by ``new`` in an existing file (rule 4)."""
    existing = work.existing(index, edit.path)
    work.check_version(index, edit.path, edit.expected_version)
    data = replaced(index, edit, work.content(existing), work.limits.max_file_bytes)
    work.write(index, "replace", edit.path, data)


def delete(work: BatchState, index: int, edit: Delete) -> None:
    """Delete an existing file; with ``redirect_links_to``, rewrite every link to it to point to that page
    (``moves.redirect_after``), which must exist once the file is gone (``NOT_FOUND``)."""
    work.existing(index, edit.path)
    work.check_version(index, edit.path, edit.expected_version, whole=True)
    work.put(index, edit.path, None)
    work.applied.append(Applied(index, "delete", edit.path, None))
    target = edit.redirect_links_to
    if target is not None:
        if work.current(target) is None:
            raise BatchRejected(
                "NOT_FOUND",
                f"redirect_links_to {target!r} is no file at this point of the batch; create it first",
                index,
            )
        redirect_after(work, index, edit.path, target)


def replaced(index: int, edit: Replace, data: bytes, max_size: int) -> bytes:
    """``data`` with ``edit.old`` replaced by ``edit.new``; the result's size is checked before it is
    built (a ``replace_all`` multiplies its input)."""
    old, new = edit.old.encode("utf-8"), edit.new.encode("utf-8")
    if not old:
        raise BatchRejected("INVALID_BATCH", "replace needs a non-empty 'old'", index)
    count = data.count(old)
    if count == 0:
        raise BatchRejected(
            "OLD_NOT_FOUND",
            f"'old' does not occur in {edit.path!r}; read the page raw and copy it",
            index,
        )
    check_count(edit.expected_count, count, f"'old' occurs {count} times in {edit.path!r}", index)
    if count > 1 and not edit.replace_all:
        raise BatchRejected(
            "OLD_NOT_UNIQUE",
            f"'old' occurs {count} times in {edit.path!r}; add context to make it unique, or set "
            "replace_all=true (with expected_count to guard the number)",
            index,
        )
    size = len(data) + (count if edit.replace_all else 1) * (len(new) - len(old))
    if size > max_size:  # refused before the result is built: it may be huge
        raise BatchRejected(
            "BATCH_TOO_LARGE",
            f"the replace would make {edit.path!r} {size} bytes, over the limit of {max_size} bytes a "
            "file; split the page",
            index,
        )
    return data.replace(old, new) if edit.replace_all else data.replace(old, new, 1)
