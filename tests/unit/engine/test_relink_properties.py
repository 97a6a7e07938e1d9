"""Property tests of retarget_links and extract_section through preflight, against an independent reference.

Generated wikis: pages in a few folders, each a few sections with unique headings (at several levels)
holding links of every form — wikilinks bare or path-qualified, with labels, embeds, markdown links plain
or in ``<...>``, same-page links — with fragments naming headings by text (any case) or slug, block
references and broken fragments, in prose and in code (fences, indented blocks, inline code).

The reference is the scanner and resolver of ``markdown/test_rewrite_properties`` (regexes over
code-masked text, the resolution rule re-stated), the heading scanner of
``markdown/test_sections_properties``, and the fragment rule re-stated here (``ref_named``). It shares no
code with ``worker.engine.markdown``. After the op: every link that pointed to ``from`` (or to the
extracted section, or a subsection of it) resolves to the new target with the right fragment; every other
link resolves to exactly what it did before (for retarget_links: is byte for byte the same); the text
outside links and the code are unchanged (for extract_section: equal to the reference's cut and new page).
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from tests.unit.engine.markdown.test_rewrite_properties import (
    RefLink,
    code_and_links,
    masked_links,
    ref_resolve,
    spelling,
)
from tests.unit.engine.markdown.test_sections_properties import reference_headings
from worker.engine import DictHead, Plan, blob_id, preflight
from worker.schema.edits import Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
FOLDERS = ["wiki", "wiki/a", "wiki/b", "raw"]
NAMES = ["runbook", "x", "my note"]
HEADINGS = ["Head", "Redis failover", "Sub", "Other"]
WIKI_FRAGMENTS = [
    "",
    "#Head",
    "#head",
    "#Redis failover",
    "#redis  FAILOVER",
    "#Sub",
    "#Other",
    "#^blk",
    "#Nope",
]
MD_FRAGMENTS = [
    "",
    "#head",
    "#Head",
    "#redis-failover",
    "#Redis%20failover",
    "#sub",
    "#other",
    "#^blk",
    "#nope",
]
WORDS = ["alpha", "beta", "see:"]


# ---------------------------------------------------------------- the reference fragment rule


def ref_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def ref_same(one: str, other: str) -> bool:
    return " ".join(one.split()).casefold() == " ".join(other.split()).casefold()


def ref_named(link: RefLink, headings: list[str]) -> str | None:
    """The first of ``headings`` the link's fragment names (wikilink: text; markdown: slug or text)."""
    if not link.fragment:
        return None
    fragment = link.fragment[1:]
    for heading in headings:
        if link.kind == "wiki":
            part = fragment.rsplit("#", 1)[-1]
            if part.strip() and not part.strip().startswith("^") and ref_same(part, heading):
                return heading
        else:
            decoded = unquote(fragment)
            if decoded and (decoded == ref_slug(heading) or ref_same(decoded, heading)):
                return heading
    return None


def ref_points(link: RefLink, page: str, files: set[str]) -> str | None:
    """Where a link points: its own page for a same-page link, else the reference resolution."""
    if not link.target and link.fragment:
        return page
    return ref_resolve(link, page, files)


def headings_of(text: str) -> list[str]:
    return [name for _, _, name in reference_headings(text)]


# ---------------------------------------------------------------- generated wikis


def link_text(draw: st.DrawFn, page: str, files: list[str]) -> str:
    """One link in any form to one of ``files``, to its own page, or to a missing page."""
    target = draw(st.sampled_from([*files, "", "wiki/missing.md"]))
    form = draw(st.sampled_from(["bare", "wiki", "root", "md", "md-angle"]))
    embed = draw(st.sampled_from(["", "", "!"]))
    if form.startswith("md"):
        fragment = draw(st.sampled_from(MD_FRAGMENTS if target else MD_FRAGMENTS[1:]))
        rel = posixpath.relpath(target, posixpath.dirname(page)) if target else ""
        if form == "md-angle" or " " in rel:
            return f"{embed}[label](<{rel}{fragment}>)"
        return f"{embed}[label]({rel.replace(' ', '%20')}{fragment})"
    fragment = draw(st.sampled_from(WIKI_FRAGMENTS if target else WIKI_FRAGMENTS[1:]))
    label = draw(st.sampled_from(["", "|Label"]))
    return f"{embed}[[{spelling(target, form) if target else ''}{fragment}{label}]]"


@st.composite
def block(draw: st.DrawFn, page: str, files: list[str]) -> str:
    """A paragraph (words, links, inline code), or a fenced or indented code block with a link."""
    kind = draw(st.sampled_from(["paragraph", "paragraph", "paragraph", "fence", "indented"]))
    if kind == "fence":
        return "```\n" + link_text(draw, page, files) + "\n```"
    if kind == "indented":
        return "    " + link_text(draw, page, files)
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        choice = draw(st.sampled_from(["word", "link", "link", "code"]))
        if choice == "word":
            parts.append(draw(st.sampled_from(WORDS)))
        elif choice == "link":
            parts.append(link_text(draw, page, files))
        else:
            parts.append("`" + link_text(draw, page, files) + "`")
    return " ".join(parts)


@st.composite
def wikis(draw: st.DrawFn) -> tuple[set[str], dict[str, str]]:
    """A few pages (and an image) with sections under unique headings, and each page's text."""
    places = draw(
        st.sets(st.tuples(st.sampled_from(FOLDERS), st.sampled_from(NAMES)), min_size=2, max_size=5)
    )
    files = {f"{folder}/{name}.md" for folder, name in places}
    files |= {f"{f}/pic.png" for f in draw(st.sets(st.sampled_from(FOLDERS), max_size=1))}
    ordered = sorted(files)
    texts = {}
    for page in sorted(p for p in files if p.endswith(".md")):
        blocks = draw(st.lists(block(page, ordered), max_size=2))
        order = draw(st.permutations(HEADINGS))
        for heading in order[: draw(st.integers(0, len(order)))]:
            blocks.append("#" * draw(st.integers(1, 3)) + " " + heading)
            blocks += draw(st.lists(block(page, ordered), max_size=3))
        texts[page] = "\n\n".join(blocks or ["empty"]) + "\n"
    return files, texts


def page_text(plan: Plan, head: dict[str, bytes], path: str) -> str:
    file = plan.changes.get(path)
    return (head[path] if file is None or file.data is None else file.data).decode()


# ---------------------------------------------------------------- retarget_links


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_retarget_repoints_exactly_the_links_to_from(data: st.DataObject) -> None:
    """Every link that pointed to from (its page, but not a same-page link in it; or its heading,
    same-page links included) resolves to to's page with to's heading as fragment (none when only from
    named one, the old one when neither did); every other link, the text around the links and all code
    stay byte for byte; raw/ pages never change and are reported when they hold such a link that must
    change; applied counts the changed links."""
    files, texts = data.draw(wikis())
    pages = sorted(p for p in texts if p.startswith("wiki/"))
    assume(pages)
    source = data.draw(st.sampled_from(pages))
    target = data.draw(st.sampled_from(pages))
    heading = data.draw(st.sampled_from([None, *headings_of(texts[source])]))
    wanted = data.draw(st.sampled_from([None, *headings_of(texts[target])]))
    assume((source, heading) != (target, wanted))
    edit = EDIT.validate_python(
        {
            "op": "retarget_links",
            "from": source + (f"#{heading}" if heading else ""),
            "to": target + (f"#{wanted}" if wanted else ""),
        }
    )
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    plan = preflight(DictHead(head), [edit])
    rewritten = {a.path: a.count for a in plan.applied}
    assert all(a.op == "rewrite_links" for a in plan.applied)
    warned = {w.path for w in plan.warnings if w.code == "NOT_REWRITTEN"}
    source_headings = headings_of(texts[source])

    def there(link: RefLink, page: str) -> bool:
        """The link already points where to says (page, and fragment as the rule wants)."""
        if ref_points(link, page, files) != target:
            return False
        if wanted is not None:
            return ref_named(link, headings_of(texts[target])) == wanted
        return heading is None or link.fragment is None

    for page, text in texts.items():
        new_text = page_text(plan, head, page)
        code_before, links_before = code_and_links(text)
        code_after, links_after = code_and_links(new_text)
        matched = [
            link
            for link in links_before
            if ref_points(link, page, files) == source
            and (ref_named(link, source_headings) == heading if heading else bool(link.target))
        ]
        if page.startswith("raw/"):
            # reported when a link there must change; a link already as wanted may be (a respelled fragment)
            assert new_text == text
            assert page not in warned or matched, page
            assert page in warned or all(there(link, page) for link in matched), page
            continue
        assert code_after == code_before
        assert masked_links(new_text, links_after) == masked_links(text, links_before)
        changed = 0
        for old, new in zip(links_before, links_after, strict=True):
            same = text[old.start : old.end] == new_text[new.start : new.end]
            changed += not same
            if old not in matched:
                assert same, (page, old, new)
                continue
            assert (old.kind, old.embed, old.label) == (new.kind, new.embed, new.label)
            assert ref_points(new, page, files) == target, (page, old, new)
            if wanted is not None:
                assert ref_named(new, headings_of(texts[target])) == wanted, (old, new)
            elif heading is not None:
                assert new.fragment is None, (old, new)
            else:
                assert new.fragment == old.fragment
        assert rewritten.get(page, 0) == changed
        event(f"links repointed: {changed > 0}")


# ---------------------------------------------------------------- extract_section


def reference_cut(text: str, heading: str, title: str | None) -> tuple[str, list[str], str, str, str]:
    """The reference extraction: (new page, moved heading texts, lines before, trailing blank lines,
    lines after) of the section under ``heading`` (unique) in ``text``."""
    heads = reference_headings(text)
    lines = text.splitlines(keepends=True)
    number = next(n for n, (_, _, name) in enumerate(heads) if name == heading)
    start, level, _ = heads[number]
    end = next((line for line, lvl, _ in heads[number + 1 :] if lvl <= level), len(lines))
    moved = {line: (lvl, name) for line, lvl, name in heads if start <= line < end}
    at = end
    while at > start + 1 and not lines[at - 1].strip():
        at -= 1
    body = []
    for line_number in range(start + 1, at):
        line = lines[line_number]
        if line_number in moved:
            lvl = moved[line_number][0]
            line = "#" * (lvl - level + 1) + line[lvl:]
        body.append(line)
    page = "# " + (title or heading) + "\n" + "".join(body)
    page = page if page.endswith("\n") else page + "\n"
    names = [name for _, name in moved.values()]
    return page, names, "".join(lines[:start]), "".join(lines[at:end]), "".join(lines[end:])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_extract_moves_the_section_and_its_links_follow(data: st.DataObject) -> None:
    """The new page and the source are the reference's cut (outside links, byte for byte; code exactly);
    every link to the extracted heading now resolves to the new page without fragment, every link to a
    moved subsection to the new page with its fragment, every other link (same-page links moved with the
    text included) resolves to exactly what it pointed to before; leave_link's line resolves to the new
    page; raw/ pages never change."""
    files, texts = data.draw(wikis())
    pages = [p for p in sorted(texts) if p.startswith("wiki/") and headings_of(texts[p])]
    assume(pages)
    source = data.draw(st.sampled_from(pages))
    heading = data.draw(st.sampled_from(headings_of(texts[source])))
    new_path = data.draw(st.sampled_from(["wiki/new.md", "wiki/b/new.md", "wiki/a/c/new.md", "wiki/x.md"]))
    assume(new_path not in files)
    leave = data.draw(st.booleans())
    title = data.draw(st.sampled_from([None, "Moved"]))
    head = {path: texts[path].encode() if path in texts else b"PNG" for path in files}
    fields = {"path": source, "heading": heading, "new_path": new_path, "leave_link": leave, "title": title}
    edit = EDIT.validate_python(
        {"op": "extract_section", **fields, "expected_version": blob_id(head[source])}
    )
    plan = preflight(DictHead(head), [edit])
    after_files = files | {new_path}
    ref_page, moved, before, trailing, after = reference_cut(texts[source], heading, title)
    placeholder = "[[PLACEHOLDER]]\n"
    ref_rest = before + (placeholder + trailing if leave else "") + after
    source_headings = headings_of(texts[source])

    def check(ref_text: str, was_at: str, new_text: str, now_at: str) -> None:
        code_ref, links_ref = code_and_links(ref_text)
        code_new, links_new = code_and_links(new_text)
        assert code_new == code_ref
        assert masked_links(new_text, links_new) == masked_links(ref_text, links_ref)
        for old, new in zip(links_ref, links_new, strict=True):
            assert (old.kind, old.embed, old.label) == (new.kind, new.embed, new.label)
            now = ref_points(new, now_at, after_files)
            if old.target == "PLACEHOLDER":
                assert now == new_path and new.fragment is None
                continue
            was = ref_points(old, was_at, files)
            if was is None:
                assert ref_text[old.start : old.end] == new_text[new.start : new.end]
                continue
            named = ref_named(old, source_headings) if was == source else None
            if named == heading:
                assert (now, new.fragment) == (new_path, None), (old, new)
                event("link to the section")
            elif named in moved:
                assert (now, new.fragment) == (new_path, old.fragment), (old, new)
                event("link to a moved subsection")
            else:
                assert (now, new.fragment) == (was, old.fragment), (old, new)

    check(ref_rest, source, page_text(plan, head, source), source)
    check(ref_page, source, page_text(plan, {}, new_path), new_path)
    for page, text in texts.items():
        if page == source:
            continue
        new_text = page_text(plan, head, page)
        if page.startswith("raw/"):
            assert new_text == text
            continue
        check(text, page, new_text, page)
    assert [a.op for a in plan.applied[:2]] == ["extract_section", "create"]
    assert all(a.op == "rewrite_links" for a in plan.applied[2:])
