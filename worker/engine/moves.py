"""``rename``: a file, or a folder with every file under it, and with ``rewrite_links`` every link to them.

A file rename needs its ``expected_version`` (rule 2); a folder has no version, so a folder rename takes
none and moves whatever files are under it when the batch runs. Every moved file is checked as a rename
(path shape of its new place, zones at both ends) and must not land on a file that stays (``PATH_EXISTS``);
files of the folder may land on each other's old places (``wiki/a`` to ``wiki/a/b``). ``applied`` gets
one ``rename`` entry per moved file.

With ``rewrite_links`` (contract section 7), the links to the moved files are rewritten in every page
of the wiki as the batch left it so far (``markdown.rewrite_links``: each link keeps its form; a bare
name that still resolves is left alone; relative links inside moved pages are fixed). Only UTF-8 ``.md``
pages are read. A page where the zone policy forbids in-place changes (``raw/``, create-only) is never
changed: it is reported as a ``NOT_REWRITTEN`` warning instead. ``applied`` gets one
``{"op": "rewrite_links", "path", "version", "count"}`` entry per rewritten page, in path order.

Cost: the pages to read are found as ``relink.rewrite_everywhere`` finds them (a text search for the
moved files' names), filtered with ``markdown.may_rewrite``; the file index of the wiki is built once
before and once after the moves.
"""

from __future__ import annotations

from worker.engine.markdown import FileIndex, may_rewrite, rewrite_links
from worker.engine.paths import check_path
from worker.engine.plan import Applied
from worker.engine.relink import rewrite_everywhere
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import Rename


def rename(work: BatchState, index: int, edit: Rename) -> None:
    """Apply a rename edit: move the file or folder, then rewrite links when asked."""
    moves = _moves(work, index, edit)
    files = {old: work.current(old) for old in moves}
    for old in moves:
        work.put(index, old, None)
    for old, new in moves.items():
        file = files[old]
        assert file is not None
        work.put(index, new, file)
        work.created.add(new)
        work.moved_from[new] = work.moved_from.pop(old, old)
        work.applied.append(Applied(index, "rename", old, file.version, new_path=new))
    if edit.rewrite_links:
        rewrite_after(work, index, moves)


def _moves(work: BatchState, index: int, edit: Rename) -> dict[str, str]:
    """``{old path: new path}`` of every file the edit moves, checked."""
    source, target = edit.path, edit.new_path
    if work.current(source) is not None:
        work.check_version(index, source, edit.expected_version)
        if work.current(target) is not None:
            raise BatchRejected("PATH_EXISTS", f"rename target {target!r} already exists", index)
        return {source: target}
    under = work.files_under(source)
    if not under:
        raise BatchRejected("NOT_FOUND", f"{source!r} does not exist at this point of the batch", index)
    if edit.expected_version is not None:
        raise BatchRejected(
            "INVALID_BATCH",
            f"{source!r} is a folder, which has no version: drop expected_version (every file under it "
            "moves as the batch finds it)",
            index,
        )
    if target == source:
        raise BatchRejected("PATH_EXISTS", f"rename target {target!r} is the folder itself", index)
    moves = {old: target + old[len(source) :] for old in under}
    for old, new in moves.items():
        check_path(new, index)
        work.check_zone("rename", old, index)
        work.check_zone("rename", new, index)
        if new not in moves and work.current(new) is not None:
            raise BatchRejected("PATH_EXISTS", f"moving {old!r} to {new!r}: a file is already there", index)
    return moves


def redirect_after(work: BatchState, index: int, deleted: str, target: str) -> None:
    """Rewrite, in every page as the batch left it, the links to ``deleted`` (just deleted) so that they
    point to ``target`` (a file that stays), as if the one had moved onto the other."""
    after = work.index()
    _rewrite_all(work, index, {deleted: target}, after.changed(removed=(), added=[deleted]), after, {})


def rewrite_after(work: BatchState, index: int, moves: dict[str, str]) -> None:
    """Rewrite, in every page as the batch left it, the links that ``moves`` (just applied) affect."""
    after = work.index()
    before = after.changed(removed=moves.values(), added=moves.keys())
    _rewrite_all(work, index, moves, before, after, {new: old for old, new in moves.items()})


def _rewrite_all(
    work: BatchState,
    index: int,
    moves: dict[str, str],
    before: FileIndex,
    after: FileIndex,
    inverse: dict[str, str],
) -> None:
    """Rewrite the links ``moves`` affect in every candidate page (``inverse``: a moved page's old place)."""

    def rewrite(page: str, text: str) -> tuple[str, int]:
        old_place = inverse.get(page, page)
        if not may_rewrite(old_place, text, moves):
            return text, 0
        return rewrite_links(old_place, text, moves, before, after, max_size=work.limits.max_file_bytes)

    names = [*moves, *moves.values()]
    why = "point to moved files and would no longer resolve"
    rewrite_everywhere(work, index, names, moves.values(), rewrite, why)
