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

Cost: the pages to read are found with ``HeadView.mentioning`` (a text search for the moved files' names,
``mentions.link_needles``), filtered with ``markdown.may_rewrite``; the file index of the wiki is built
once before and once after the moves.
"""

from __future__ import annotations

from worker.engine.markdown import FileIndex, may_rewrite, rewrite_links
from worker.engine.markdown.bounds import TooLarge
from worker.engine.mentions import is_page, link_needles
from worker.engine.paths import check_path
from worker.engine.plan import Applied, NewFile, blob_id
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import Rename

PREFETCH = 512  # head pages read in one go


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
    pages = sorted(page for page in _candidates(work, moves) if is_page(page))
    for start in range(0, len(pages), PREFETCH):
        chunk = pages[start : start + PREFETCH]
        work.prefetch(chunk)
        for page in chunk:
            _rewrite_page(work, index, page, inverse.get(page, page), moves, before, after)
        work.forget()


def _rewrite_page(
    work: BatchState,
    index: int,
    page: str,
    old_place: str,
    moves: dict[str, str],
    before: FileIndex,
    after: FileIndex,
) -> None:
    """Rewrite the links of one page (at ``page`` now, at ``old_place`` before the moves)."""
    file = work.current(page)
    if file is None:
        return
    try:
        text = work.content(file).decode("utf-8")
    except UnicodeDecodeError:
        return
    if not may_rewrite(old_place, text, moves):
        return
    try:
        new_text, count = rewrite_links(
            old_place, text, moves, before, after, max_size=work.limits.max_file_bytes
        )
    except TooLarge as exc:  # at least exc.size characters, so at least as many bytes
        work.check_file_size(index, page, exc.size)
        raise AssertionError("unreachable: over max_file_bytes") from exc
    if not count:
        return
    if not work.zone_allows("rewrite_links", page):
        work.warn(
            "NOT_REWRITTEN",
            page,
            f"{count} link(s) in {page!r} point to moved files, but this zone allows no in-place "
            "change (raw/ is create-only): they are left as they are and will not resolve",
        )
        return
    data = new_text.encode("utf-8")
    version = blob_id(data)
    work.put(index, page, NewFile(version, data))
    work.applied.append(Applied(index, "rewrite_links", page, version, count=count))


def _candidates(work: BatchState, moves: dict[str, str]) -> set[str]:
    """The pages (as the batch left them) whose links the moves may change: the moved pages, the pages
    the batch changed before, and the head pages that mention a moved file's old or new name."""
    found = set(moves.values())
    found |= {path for path, file in work.state.items() if file is not None}
    needles = link_needles([*moves, *moves.values()])
    mentioned = work.head.mentioning(needles) if needles is not None else None
    heads = work.head.file_index().files if mentioned is None else mentioned
    found |= {path for path in heads if path not in work.state}
    return found
