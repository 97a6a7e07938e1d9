"""Property test: after any move of a file or a folder, rewrite_links leaves every link pointing where
it pointed before, touches nothing else, and never changes code.

The checks use a reference scanner and resolver written here for the generated shapes only (one-line
paragraphs and headings, closed fences, indented blocks after a blank line, inline code spans without
stray backticks). They share no code with ``worker.engine.markdown``: links are found by two regular expr.
on text whose code has been masked, and resolution re-states wikiq's rule in a few lines.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.engine.markdown.rewrite import may_rewrite, rewrite_links

FOLDERS = ["", "wiki", "wiki/a", "wiki/b", "wiki/a/c", "raw"]
NAMES = ["x", "y", "Note", "my note"]
WORDS = ["alpha", "beta", "see:", "and", "x"]
MOVE_FOLDERS = ["wiki", "wiki/a", "wiki/b", "wiki/d", "wiki/a/c", "archive", ""]


def join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


# ---------------------------------------------------------------- the reference scanner and resolver


WIKILINK = re.compile(r"(!?)\[\[([^\[\]|#]*)(#[^\[\]|]*)?(\|[^\[\]]*)?\]\]")
MDLINK = re.compile(r"(!?)\[([^\[\]]*)\]\((?:<([^<>#]*)(#[^<>]*)?>|([^()\s#<]*)(#[^()\s]*)?)\)")
CODE_SPAN = re.compile(r"``(?:[^`]|`(?!`))*?``|`[^`]*`")


@dataclass(frozen=True)
class RefLink:
    kind: str
    embed: bool
    target: str
    fragment: str | None
    label: str | None
    start: int
    end: int


def code_and_links(text: str) -> tuple[list[str], list[RefLink]]:
    """The code pieces of ``text`` (fenced and indented lines, inline spans) and its links, in order."""
    code: list[str] = []
    masked = list(text)
    fence: str | None = None
    position = 0
    for line in re.findall(r"[^\n]*\n|[^\n]+", text):
        start, body = position, line.rstrip("\r\n")
        position += len(line)
        if fence is not None or body.startswith(("```", "~~~")):
            code.append(line)
            masked[start : start + len(line)] = "\0" * len(line)
            if fence is None:
                fence = body[:3]
            elif body == fence:
                fence = None
            continue
        if body.startswith("    "):
            code.append(line)
            masked[start : start + len(line)] = "\0" * len(line)
            continue
        for span in CODE_SPAN.finditer(body):
            code.append(span.group())
            masked[start + span.start() : start + span.end()] = "\0" * len(span.group())
    flat = "".join(masked)
    links = [
        RefLink("wiki", bool(m[1]), m[2], m[3], m[4], m.start(), m.end()) for m in WIKILINK.finditer(flat)
    ]
    links += [
        RefLink("md", bool(m[1]), m[3] or m[5] or "", m[4] or m[6], m[2], m.start(), m.end())
        for m in MDLINK.finditer(flat)
    ]
    return code, sorted(links, key=lambda link: link.start)


def ref_resolution(link: RefLink, page: str, files: set[str]) -> str:
    """Where a link points, by wikiq's resolution rule re-stated for the generated shapes: its file,
    ``ambiguous`` or ``missing``."""
    if link.kind == "md":
        path = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(link.target)))
        if path in files:
            return path
        return path + ".md" if path + ".md" in files else "missing"
    target = link.target.strip()
    names = [target] if target.endswith(".md") else [target + ".md", target]
    for fold in (False, True):

        def same(a: str, b: str, fold: bool = fold) -> bool:
            return a.lower() == b.lower() if fold else a == b

        for name in names:
            if name.startswith("/"):
                found = [f for f in files if same(f, name[1:])]
            elif "/" in name:
                found = [f for f in files if same(f, name)]
                found = found or [f for f in files if same(f, "wiki/" + name)]
                found = found or [f for f in files if same(f[-len(name) - 1 :], "/" + name)]
            else:
                found = [f for f in files if same(f.rsplit("/", 1)[-1], name)]
            if found:
                return found[0] if len(found) == 1 else "ambiguous"
    return "missing"


def ref_resolve(link: RefLink, page: str, files: set[str]) -> str | None:
    """The file a link resolves to, or None (missing or ambiguous)."""
    found = ref_resolution(link, page, files)
    return None if found in ("missing", "ambiguous") else found


def masked_links(text: str, links: list[RefLink]) -> str:
    """``text`` with each link replaced by one NUL: what must not change."""
    out, position = [], 0
    for link in links:
        out += [text[position : link.start], "\0"]
        position = link.end
    return "".join(out) + text[position:]


# ---------------------------------------------------------------- generated wikis


@st.composite
def wikis(draw: st.DrawFn) -> tuple[set[str], dict[str, str]]:
    """A few files (pages and images) in a few folders, and each page's text."""
    pages = draw(st.sets(st.tuples(st.sampled_from(FOLDERS), st.sampled_from(NAMES)), min_size=2, max_size=7))
    files = {join(folder, name + ".md") for folder, name in pages}
    files |= {join(f, "pic.png") for f in draw(st.sets(st.sampled_from(FOLDERS), max_size=2))}
    ordered = sorted(files)
    texts = {}
    for page in sorted(p for p in files if p.endswith(".md")):
        newline = draw(st.sampled_from(["\n", "\r\n"]))
        blocks = draw(st.lists(block(page, ordered), min_size=1, max_size=6))
        texts[page] = (newline + newline).join(b.replace("\n", newline) for b in blocks) + newline
    return files, texts


def link_text(draw: st.DrawFn, page: str, files: list[str]) -> str:
    """One link, in any form, to one of ``files`` or to a missing page."""
    target = draw(st.sampled_from([*files, "wiki/missing.md"]))
    fragment = draw(st.sampled_from(["", "#Head", "#^blk"]))
    form = draw(st.sampled_from(["bare", "folded", "wiki", "root", "md", "md-escaped"]))
    embed = draw(st.sampled_from(["", "!"])) if form != "folded" else ""
    if form in ("md", "md-escaped"):
        rel = posixpath.relpath(target, posixpath.dirname(page) or ".")
        if form == "md-escaped":
            return f"{embed}[label]({rel.replace(' ', '%20')}{fragment})"
        if " " in rel:
            return f"{embed}[label](<{rel}{fragment}>)"
        return f"{embed}[label]({rel}{fragment})"
    label = draw(st.sampled_from(["", "|Label"]))
    return f"{embed}[[{spelling(target, form)}{fragment}{label}]]"


def spelling(target: str, form: str) -> str:
    """How a wikilink of ``form`` spells ``target``: bare (its stem), folded (lowered), wiki (the path
    under wiki/, for a file there), else the path from the root; ``.md`` left out."""
    stem = target.rsplit("/", 1)[-1].removesuffix(".md")
    if form in ("bare", "folded"):
        return stem.lower() if form == "folded" else stem
    if form == "wiki" and target.startswith("wiki/"):
        return target[len("wiki/") :].removesuffix(".md")
    return target.removesuffix(".md")


@st.composite
def block(draw: st.DrawFn, page: str, files: list[str]) -> str:
    """A paragraph, heading, fenced or indented code block, each with links in it."""
    kind = draw(st.sampled_from(["paragraph", "paragraph", "heading", "fence", "tilde", "indented"]))
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        choice = draw(st.sampled_from(["word", "link", "link", "code", "double-code"]))
        if choice == "word":
            parts.append(draw(st.sampled_from(WORDS)))
        elif choice == "link" or kind in ("fence", "tilde", "indented"):
            parts.append(link_text(draw, page, files))
        elif choice == "code":
            parts.append("`" + link_text(draw, page, files) + "`")
        else:
            parts.append("``" + link_text(draw, page, files) + " ` x``")
    line = " ".join(parts)
    if kind == "heading":
        return "## " + line
    if kind == "fence":
        return "```\n" + line + "\n```"
    if kind == "tilde":
        return "~~~md\n" + line + "\n~~~"
    if kind == "indented":
        return "    " + line
    return line


@st.composite
def moves_of(draw: st.DrawFn, files: set[str]) -> dict[str, str]:
    """A file rename/move, or a folder rename, that lands on no existing file."""
    if draw(st.booleans()):
        source = draw(st.sampled_from(sorted(files)))
        folder = draw(st.sampled_from(MOVE_FOLDERS))
        name = source.rsplit("/", 1)[-1]
        if source.endswith(".md"):
            name = draw(st.sampled_from([name, "renamed.md", "x.md", "Note.md"]))
        moves = {source: join(folder, name)}
    else:
        folders = sorted({f.rsplit("/", 1)[0] for f in files if "/" in f})
        if not folders:
            return {}
        old = draw(st.sampled_from(folders))
        new = draw(
            st.sampled_from([f for f in MOVE_FOLDERS if f and f != old and not f.startswith(old + "/")])
        )
        moves = {f: new + f[len(old) :] for f in files if f.startswith(old + "/")}
    staying = files - moves.keys()
    if staying & set(moves.values()) or len(set(moves.values())) != len(moves):
        return {}
    return {old: new for old, new in moves.items() if old != new}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_rewrite_keeps_every_link_pointing_at_the_same_file(data: st.DataObject) -> None:
    """Every link that resolved to F resolves to F's new place; code, other text and broken links are
    byte-identical; a bare name that still finds the moved file is left as written; the cheap filter
    ``may_rewrite`` never skips a page that changes."""
    files, texts = data.draw(wikis())
    moves = data.draw(moves_of(files))
    after_files = {moves.get(f, f) for f in files}
    for page, text in texts.items():
        new_text, count = rewrite_links(page, text, moves, files, after_files)
        new_page = moves.get(page, page)
        code_before, links_before = code_and_links(text)
        code_after, links_after = code_and_links(new_text)
        assert code_after == code_before
        assert len(links_after) == len(links_before)
        assert masked_links(new_text, links_after) == masked_links(text, links_before)
        changed = 0
        for old, new in zip(links_before, links_after, strict=True):
            assert (old.kind, old.embed, old.fragment, old.label) == (
                new.kind,
                new.embed,
                new.fragment,
                new.label,
            )
            was = ref_resolve(old, page, files)
            if was is None:
                assert new == old or text[old.start : old.end] == new_text[new.start : new.end]
                continue
            assert ref_resolve(new, new_page, after_files) == moves.get(was, was), (old, new)
            old_text, new_text_of_link = text[old.start : old.end], new_text[new.start : new.end]
            if old.kind == "wiki" and ref_resolve(old, new_page, after_files) == moves.get(was, was):
                assert new_text_of_link == old_text
            changed += old_text != new_text_of_link
        assert changed == count
        assert may_rewrite(page, text, moves) or new_text == text
