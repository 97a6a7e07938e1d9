"""Property tests of a dry run's checks against a reference computed from the two trees alone.

Generated wikis (``markdown/test_rewrite_properties``: pages in a few folders, links of every form, in
prose and in code: fences, tildes, indented blocks, inline spans) get a batch of up to three edits: a
replace (in prose or in code), a rename of a file or a folder (links rewritten or not), a delete (links
redirected or not), a created page. The reference reads only the head's files and the files of the plan's
result, with a scanner that shares no code with ``worker.engine``:

- links: ``code_and_links`` finds the links outside code, a resolution re-stated here (``ref_resolution``)
  says which resolve to nothing and which of those are ambiguous. The pages a batch cannot affect (not
  changed, naming no file it adds or removes) have the same broken links before and after, so
  ``broken_after - broken_before`` is the whole wiki's difference; over a view that cannot say which
  pages mention a file (``Blind``) a batch that adds or removes files looks at every page, so the counts
  are the whole wiki's;
- code: the code pieces of a page (fenced blocks from fence to fence, indented blocks across blank lines,
  inline spans), as multisets. A piece moved unchanged between changed pages counts nowhere, so the
  pieces gained and lost in all are the multiset differences between the whole wiki's code after and
  before; a page that keeps its path and its code counts none.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.unit.engine.markdown.test_rewrite_properties import block, code_and_links, ref_resolution, wikis
from tests.unit.engine.test_relink_properties import headings_of
from tests.unit.engine.test_relink_properties import wikis as section_wikis
from worker.engine import DictHead, blob_id, preflight, review
from worker.engine.paths import DEFAULT_POLICY
from worker.errors import BatchRejected
from worker.schema.edits import Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
DESTINATIONS = ["wiki/d", "wiki/b", "wiki/a/c", "wiki/e/f"]
CODE_SPAN = re.compile(r"``(?:[^`]|`(?!`))*?``|`[^`]*`")


class Blind(DictHead):
    """A head that cannot tell cheaply which pages mention a name (as a commit group's pending tree)."""

    def mentioning(self, needles: Any) -> None:  # type: ignore[override]
        return None


# ---------------------------------------------------------------- the reference


def ref_broken(tree: dict[str, bytes]) -> tuple[int, int]:
    """The links of every page of ``tree`` that resolve to no file, and how many of them are ambiguous."""
    files = set(tree)
    broken = ambiguous = 0
    for path, data in tree.items():
        if not path.endswith(".md"):
            continue
        for link in code_and_links(data.decode())[1]:
            if not link.target:
                continue  # a same-page link: no file to resolve
            where = ref_resolution(link, path, files)
            if where in ("missing", "ambiguous"):
                broken += 1
                ambiguous += where == "ambiguous"
    return broken, ambiguous


def ref_code(text: str) -> list[str]:
    """The code pieces of a page of the generated shapes: each fenced block (its lines from fence to
    closing fence, or to the end), each indented block (indented lines and the blank lines between
    them), without line endings; then the inline spans of the other lines."""
    lines = [line.rstrip("\r\n") for line in re.findall(r"[^\n]*\n|[^\n]+", text)]
    pieces: list[str] = []
    spans: list[str] = []
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith(("```", "~~~")):
            end = number + 1
            while end < len(lines) and lines[end] != line[:3]:
                end += 1
            pieces.append("\n".join(lines[number : end + 1]))
            number = end + 1
            continue
        if line.startswith("    ") and (number == 0 or not lines[number - 1].strip()):
            end = number + 1
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            while not lines[end - 1].strip():
                end -= 1
            pieces.append("\n".join(lines[number:end]))
            number = end
            continue
        spans += CODE_SPAN.findall(line)
        number += 1
    return pieces + spans


def all_code(tree: dict[str, bytes]) -> Counter[str]:
    return Counter(
        piece for path, data in tree.items() if path.endswith(".md") for piece in ref_code(data.decode())
    )


# ---------------------------------------------------------------- generated batches


@st.composite
def batches(draw: st.DrawFn, files: set[str], texts: dict[str, str]) -> list[dict[str, Any]]:
    """Up to three edits on distinct pages: a replace first (a word, or a wikilink in prose or in code),
    then a rename or a delete, then a created page."""
    head = {path: (texts[path].encode() if path in texts else b"PNG") for path in files}
    mine = sorted(p for p in files if p.startswith("wiki/"))
    pages = [p for p in mine if p.endswith(".md")]
    edits: list[dict[str, Any]] = []
    touched: set[str] = set()
    if pages and draw(st.booleans()):
        page = draw(st.sampled_from(pages))
        text = texts[page]
        # whole wikilinks (in prose or in code) and words: a replace keeps the generated shapes
        candidates = sorted({m.group() for m in re.finditer(r"\[\[[^\]]*\]\]|alpha|beta", text)})
        if candidates:
            old = draw(st.sampled_from(candidates))
            new = draw(st.sampled_from(["gamma", "[[x]]", "[[wiki/missing]]"]))
            edits.append(
                {"op": "replace", "path": page, "old": old, "new": new, "replace_all": True}
                | {"expected_version": blob_id(head[page])}
            )
            touched.add(page)
    kind = draw(st.sampled_from(["rename", "rename-folder", "delete", "none"]))
    sources = [p for p in mine if p not in touched]
    if kind == "rename" and sources:
        source = draw(st.sampled_from(sources))
        folder = draw(st.sampled_from(DESTINATIONS))
        target = f"{folder}/{draw(st.sampled_from(['moved', source.rsplit('/', 1)[1].removesuffix('.md')]))}"
        target += ".md" if source.endswith(".md") else ".png"
        edits.append(
            {"op": "rename", "path": source, "new_path": target, "rewrite_links": draw(st.booleans())}
            | {"expected_version": blob_id(head[source])}
        )
    elif kind == "rename-folder":
        folders = sorted({p.rsplit("/", 1)[0] for p in mine if p.count("/") >= 2})
        if folders:
            source = draw(st.sampled_from(folders))
            target = draw(st.sampled_from([d for d in DESTINATIONS if not d.startswith(source)]))
            edits.append(
                {"op": "rename", "path": source, "new_path": target, "rewrite_links": draw(st.booleans())}
            )
    elif kind == "delete" and sources:
        source = draw(st.sampled_from(sources))
        delete: dict[str, Any] = {"op": "delete", "path": source, "expected_version": blob_id(head[source])}
        others = [p for p in pages if p != source]
        if others and draw(st.booleans()):
            delete["redirect_links_to"] = draw(st.sampled_from(others))
        edits.append(delete)
    if draw(st.booleans()):
        ordered = sorted(files)
        content = "\n\n".join(draw(st.lists(block("wiki/fresh.md", ordered), min_size=1, max_size=3))) + "\n"
        edits.append({"op": "create", "path": "wiki/fresh.md", "content": content})
    assume(edits)
    return edits


def result_tree(head: dict[str, bytes], changes: dict[str, Any]) -> dict[str, bytes]:
    """The files after a plan: the head with each change applied."""
    after = dict(head)
    for path, file in changes.items():
        if file is None:
            after.pop(path, None)
        else:
            after[path] = file.data if file.data is not None else head[file.source or path]
    return after


def total(counts: Iterable[int]) -> int:
    return sum(counts)


# ---------------------------------------------------------------- the properties


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.data())
def test_the_checks_are_what_the_two_trees_say(data: st.DataObject) -> None:
    """Broken links: the change the checks count is the whole wiki's, and the whole wiki's counts when
    every page is looked at; code: the pieces gained and lost in all are the multiset differences of the
    whole wiki's code, and a page that kept its path and its code counts none; every changed file is
    listed once, named unless its only entries are link rewrites."""
    files, texts = data.draw(wikis())
    edits = data.draw(batches(files, texts))
    head = {path: (texts[path].encode() if path in texts else b"PNG") for path in files}
    typed = [EDIT.validate_python(edit) for edit in edits]
    for view in (DictHead(head), Blind(head)):
        try:
            plan = preflight(view, typed)
        except BatchRejected as refused:
            event(f"refused {refused.code}")
            assume(False)
            return
        checks = review(view, plan, DEFAULT_POLICY).checks
        after = result_tree(head, plan.changes)
        assert checks.unchecked == []
        before_broken, _ = ref_broken(head)
        after_broken, after_ambiguous = ref_broken(after)
        links = checks.links
        assert links is not None
        assert links.broken_after - links.broken_before == after_broken - before_broken
        assert links.broken_before <= before_broken and links.broken_after <= after_broken
        assert links.ambiguous_after <= min(after_ambiguous, links.broken_after)
        if isinstance(view, Blind) and set(after) != set(head):
            assert (links.broken_before, links.broken_after, links.ambiguous_after) == (
                before_broken,
                after_broken,
                after_ambiguous,
            )
            event("every page looked at")
        event(f"broken {before_broken} -> {after_broken}")

        code_before, code_after = all_code(head), all_code(after)
        gained, lost = code_after - code_before, code_before - code_after
        assert checks.code_changed == total(gained.values()) + total(lost.values())
        assert total(f.code_added for f in checks.files) == total(gained.values())
        assert total(f.code_removed for f in checks.files) == total(lost.values())
        event(f"code changed: {checks.code_changed > 0}")
        listed = {f.path: f for f in checks.files}
        assert len(listed) == len(checks.files)
        for path, file in listed.items():
            kept = file.old_path is None and path in head and path in after and path.endswith(".md")
            if kept and Counter(ref_code(head[path].decode())) == Counter(ref_code(after[path].decode())):
                assert (file.code_added, file.code_removed) == (0, 0), path
        moved_from = {f.old_path for f in checks.files if f.old_path is not None}
        changed = {p for p in set(head) | set(after) if head.get(p) != after.get(p)} - moved_from
        assert changed <= set(listed), changed - set(listed)
        only_rewritten = {a.path for a in plan.applied if a.op == "rewrite_links"} - {
            p for a in plan.applied if a.op != "rewrite_links" for p in (a.path, a.new_path)
        }
        for path, file in listed.items():
            if not file.named:
                assert path in only_rewritten or file.old_path in only_rewritten, path
        assert checks.unnamed == sum(not f.named for f in checks.files)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_code_an_extracted_section_carries_counts_nowhere(data: st.DataObject) -> None:
    """extract_section moves a section and its code to a new page: the code pieces counted are the whole
    wiki's multiset differences (none: what left the page arrived whole in the new one), and, every page
    looked at (a page was added), the broken links are the whole wiki's."""
    files, texts = data.draw(section_wikis())
    pages = [p for p in sorted(texts) if p.startswith("wiki/") and headings_of(texts[p])]
    assume(pages)
    source = data.draw(st.sampled_from(pages))
    heading = data.draw(st.sampled_from(headings_of(texts[source])))
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    edit = {"op": "extract_section", "path": source, "heading": heading, "new_path": "wiki/new.md"}
    edit |= {"leave_link": data.draw(st.booleans()), "expected_version": blob_id(head[source])}
    view = Blind(head)
    plan = preflight(view, [EDIT.validate_python(edit)])
    checks = review(view, plan, DEFAULT_POLICY).checks
    after = result_tree(head, plan.changes)
    code_before, code_after = all_code(head), all_code(after)
    gained, lost = code_after - code_before, code_before - code_after
    assert checks.code_changed == total(gained.values()) + total(lost.values())
    assert total(f.code_added for f in checks.files) == total(gained.values())
    assert total(f.code_removed for f in checks.files) == total(lost.values())
    assert checks.code_changed == 0
    moved = Counter(ref_code(texts[source])) - Counter(ref_code(after[source].decode()))
    event(f"code moved: {bool(moved)}")
    links = checks.links
    assert links is not None
    assert (links.broken_before, links.broken_after) == (ref_broken(head)[0], ref_broken(after)[0])
