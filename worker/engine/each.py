"""``each``: one edit for many pages. A selector picks the pages, the op ``do`` is applied to each.

The pages are the ``.md`` files that exist at this point of the batch (the head as the earlier edits left
it), in path order, that pass every test of the selector (``Selector``): the path starts with ``prefix``
and matches ``glob`` (``*`` and ``?`` within one folder, ``**`` across folders; matched by RE2, so in
linear time), the front matter holds each key of ``frontmatter`` at that value (``null``: the key is
absent or null; a page whose front matter is not a mapping matches no key), the text holds ``contains``
(with ``outside_code``, wholly inside prose: not in code blocks, code spans, HTML blocks or the front
matter). Reading the pages is charged to the batch's budget.

``expected_count`` must equal the number of pages picked, else ``COUNT_MISMATCH`` names the count and the
first pages (also in its details); it stands for the versions a writer would otherwise give page by page.
Without it (a dry run learning the selection, or a checked plan being committed: ``check_static`` refuses
it elsewhere) every page picked is taken. ``expand`` then
makes one concrete edit per page, applied by the op's own code under the ``each`` edit's index, so every
rule of that op holds (zones, sizes, ``PATH_EXISTS``, link rewriting): ``frontmatter {set, unset}``,
``append {content}`` (no version: they merge into what the page holds), ``delete {redirect_links_to}``
and ``rename`` into the folder ``new_path`` (``{rewrite_links}``) with the page's head version (the
selection is the guard: these act on the pages as the check finds them).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Any

from worker.engine.budget import checked, current
from worker.engine.markdown import compile_pattern, read_frontmatter
from worker.engine.markdown.prose import prose_spans
from worker.engine.mentions import is_page
from worker.engine.state import BatchState
from worker.errors import BatchRejected
from worker.schema.edits import Append, Delete, Each, EditModel, Frontmatter, PageTests, Rename, Selector

SHOWN = 20  # pages a COUNT_MISMATCH names
PREFETCH = 512  # pages read in one go


def expand(work: BatchState, index: int, edit: Each) -> Iterator[EditModel]:
    """The concrete edits ``edit`` stands for, one per selected page (see the module), after checking
    ``expected_count``."""
    pages = select(work, index, edit.select)
    if edit.expected_count is not None and len(pages) != edit.expected_count:
        shown = ", ".join(pages[:SHOWN]) + (f" and {len(pages) - SHOWN} more" if len(pages) > SHOWN else "")
        raise BatchRejected(
            "COUNT_MISMATCH",
            f"the selector matches {len(pages)} page(s), expected_count is {edit.expected_count}"
            + (f": {shown}" if pages else "")
            + "; check the selector, or set expected_count to the pages you mean to change",
            index,
            {"actual_count": len(pages), "pages": pages[:SHOWN]},
        )
    for page in pages:
        yield _one(work, edit, page)


def _one(work: BatchState, edit: Each, page: str) -> EditModel:
    if edit.do == "frontmatter":
        return Frontmatter.model_construct(op="frontmatter", path=page, set=edit.set, unset=edit.unset)
    if edit.do == "append":
        return Append.model_construct(op="append", path=page, content=edit.content or "")
    version = work.head.version(page)
    if edit.do == "delete":
        return Delete.model_construct(
            op="delete", path=page, expected_version=version, redirect_links_to=edit.redirect_links_to
        )
    folder = (edit.new_path or "").rstrip("/")
    return Rename.model_construct(
        op="rename",
        path=page,
        new_path=posixpath.join(folder, posixpath.basename(page)),
        expected_version=version,
        rewrite_links=edit.rewrite_links,
    )


def select(work: BatchState, index: int, selector: Selector) -> list[str]:
    """The pages ``selector`` picks at this point of the batch, in path order."""
    paths = sorted(p for p in work.files() if p.startswith(selector.prefix) and is_page(p))
    return narrow(work, index, selector, paths)


def narrow(work: BatchState, index: int, tests: PageTests, paths: list[str]) -> list[str]:
    """Those of ``paths`` that pass ``tests`` (glob, front matter, text) at this point of the batch."""
    if tests.glob is not None:
        regex = compile_pattern(glob_pattern(tests.glob), index)
        paths = [p for p in checked(paths, "selecting pages") if regex.fullmatch(p)]
    if tests.frontmatter is None and tests.contains is None:
        return paths
    spend = current()
    picked = []
    for start in range(0, len(paths), PREFETCH):
        chunk = paths[start : start + PREFETCH]
        work.prefetch(chunk)
        for page in chunk:
            text = work.page_text(page)
            if text is None:
                continue
            spend.scan(len(text), "selecting pages")
            if _passes(text, tests, index):
                picked.append(page)
        work.forget()
    return picked


def _passes(text: str, selector: PageTests, index: int) -> bool:
    if selector.contains is not None:
        if selector.contains not in text:
            return False
        if selector.outside_code and not any(
            selector.contains in text[start:end] for start, end in prose_spans(text)
        ):
            return False
    if selector.frontmatter is not None:
        try:
            found: dict[str, Any] = read_frontmatter(text, index) or {}
        except BatchRejected as exc:  # a block that is no mapping holds no key
            if exc.code != "FRONTMATTER_INVALID":
                raise
            found = {}
        if any(found.get(key) != value for key, value in selector.frontmatter.items()):
            return False
    return True


def glob_pattern(glob: str) -> str:
    """``glob`` as an RE2 pattern over whole paths: ``**/`` any folders (or none), ``**`` anything,
    ``*`` anything within a folder, ``?`` one character within a folder, ``[a-c]`` one of those
    characters (``[!a-c]`` one character not among them, nor ``/``), the rest literal."""
    out = []
    position = 0
    while position < len(glob):
        if glob.startswith("**/", position):
            out.append("(?:.*/)?")
            position += 3
        elif glob.startswith("**", position):
            out.append(".*")
            position += 2
        elif glob[position] == "*":
            out.append("[^/]*")
            position += 1
        elif glob[position] == "?":
            out.append("[^/]")
            position += 1
        elif glob[position] == "[" and (end := _class_end(glob, position)) > 0:
            body = glob[position + 1 : end]
            negated = body.startswith("!")
            members = "".join("\\" + c if c in "\\^[]" else c for c in body[negated:])
            out.append("[" + ("^/" if negated else "") + members + "]")
            position = end + 1
        else:
            out.append(re.escape(glob[position]))
            position += 1
    return "".join(out)


def _class_end(glob: str, start: int) -> int:
    """The index of the ``]`` closing the class that opens at ``start`` (a ``]`` right after ``[`` or
    ``[!`` is a member), or -1 when there is none: then ``[`` is literal."""
    first = start + 1 + (glob[start + 1 : start + 2] == "!")
    end = glob.find("]", first + 1)
    return end if end > first else -1
