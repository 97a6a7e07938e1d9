"""Links in a page, and which file of the wiki each one points to.

Forms (``find_links``): wikilinks ``[[name]]``, ``[[name|label]]``, ``[[name#heading]]``,
``[[name#^block]]``, ``[[folder/name#heading|label]]``, embeds ``![[name]]``; inline markdown links and
images ``[label](path.md#fragment "title")``, ``![alt](img.png)``, ``[label](<my page.md>)``; link
reference definitions ``[id]: path.md "title"``. Only paragraphs and headings hold links: nothing inside
fenced or indented code blocks, HTML blocks, the front matter or inline code spans is a link (see
``document`` and ``inline``).

A markdown destination is a page link unless it is empty, starts with ``#`` (same page) or ``//``, ends
with ``/`` (a folder), or has a URL scheme (``http:``, ``mailto:``, any ``[A-Za-z][A-Za-z0-9+.-]{1,31}:``).
Its path (the part before the first ``#``) is read with backslash escapes removed and percent-escapes
decoded (``my%20page.md`` names ``my page.md``). A wikilink is a page link unless its target is empty
(``[[#heading]]`` points into the same page).

Resolution — wikiq's rule, against ``files``, the set of every file path in the wiki (``FileIndex``):

1. Markdown link: the path is taken relative to the linking page's folder (``/path`` from the wiki root);
   ``.`` and empty segments are dropped, ``..`` goes up one folder and may not leave the wiki (then the
   link is broken, reason ``outside``). It resolves to the file at that path; failing that, when the path
   does not end in ``.md``, to the path plus ``.md``. Matching is case-sensitive.
2. Wikilink target T (the text before ``#`` / ``|``, blanks trimmed): the names tried are ``T`` alone when
   T ends with ``.md``, else ``T.md`` first and then ``T`` (so ``[[diagram.png]]`` finds ``diagram.png``
   and ``[[v1.2 notes]]`` finds ``v1.2 notes.md``). For each name in turn:

   - T starting with ``/``: only the file at exactly that path from the root;
   - T holding a ``/`` (path-qualified): the file at that path from the root; else the file at that path
     under ``wiki/``; else every file whose path ends with ``/name``;
   - a bare name: every file, in any folder, whose file name is the name.

   The first step that finds any file decides: one file resolves, several are ambiguous (broken, reason
   ``ambiguous``, with the candidates). All of this is tried case-sensitively first; only when it finds
   nothing at all is it tried again ignoring case (as Obsidian does on case-insensitive systems). A
   target with an empty, ``.`` or ``..`` segment resolves to nothing.

A link that resolves to nothing is broken (reason ``missing``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote

from worker.engine.budget import checked
from worker.engine.markdown.document import parse, strip_ending
from worker.engine.markdown.inline import PUNCTUATION, RawLink, scan_definition, scan_links

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{1,31}:")


@dataclass(frozen=True)
class Link:
    """One link of a page. Offsets are characters of the page text; ``line`` is 1-based.

    ``kind`` is ``wikilink``, ``markdown`` (inline link or image) or ``definition`` (``[id]: dest``);
    ``embed`` marks ``![[...]]`` and ``![...](...)``. ``target`` is the target as written (wikilink name;
    markdown path before ``#``, escapes and percent-escapes as written) at ``target_start:target_end``;
    ``path`` is what resolution reads (wikilink: ``target``; markdown: decoded). ``fragment`` is the text
    after ``#`` (None without ``#``), ``label`` the wikilink's ``|label`` or the markdown ``[label]``,
    ``title`` the markdown title with its quotes, ``angle`` a ``<...>`` destination.
    """

    kind: str
    embed: bool
    text: str
    target: str
    path: str
    fragment: str | None
    label: str | None
    title: str | None
    angle: bool
    line: int
    start: int
    end: int
    target_start: int
    target_end: int

    @property
    def is_page_link(self) -> bool:
        """True when the link points to a file of the wiki (not a URL, not the same page)."""
        if self.kind == "wikilink":
            return bool(self.path)
        raw = self.target
        return bool(self.path) and not (
            raw.startswith("//") or raw.endswith("/") or _SCHEME.match(raw) is not None
        )


class FileIndex:
    """The files of a wiki, indexed for resolution (build it once per state, reuse it for every page).

    Lookups by exact file name are built at once; those ignoring case (only needed when an exact
    resolution finds nothing) on first use. ``changed`` derives the index of a slightly different set of
    files from this one without rebuilding it."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = frozenset(files)
        self._by_name: dict[str, list[str]] = {}
        for path in self.files:
            self._by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
        for paths in self._by_name.values():
            if len(paths) > 1:
                paths.sort()
        self._folded: tuple[dict[str, list[str]], dict[str, list[str]]] | None = None

    def _fold(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """The lookups ignoring case: by lowered file name, by lowered path."""
        if self._folded is None:
            by_lower_name: dict[str, list[str]] = {}
            by_lower_path: dict[str, list[str]] = {}
            for path in sorted(self.files):
                by_lower_name.setdefault(path.rsplit("/", 1)[-1].lower(), []).append(path)
                by_lower_path.setdefault(path.lower(), []).append(path)
            self._folded = (by_lower_name, by_lower_path)
        return self._folded

    def changed(self, removed: Iterable[str] = (), added: Iterable[str] = ()) -> FileIndex:
        """The index of these files without ``removed`` and with ``added``, derived from this one (a copy
        of the name lookup with only those entries changed)."""
        result = (self.files - frozenset(removed)) | frozenset(added)
        gone, new = self.files - result, result - self.files
        out = FileIndex.__new__(FileIndex)
        out.files = result
        out._by_name = dict(self._by_name)
        out._folded = None
        for path in gone:
            name = path.rsplit("/", 1)[-1]
            kept = [p for p in out._by_name[name] if p != path]
            if kept:
                out._by_name[name] = kept
            else:
                del out._by_name[name]
        for path in new:
            name = path.rsplit("/", 1)[-1]
            out._by_name[name] = sorted([*out._by_name.get(name, ()), path])
        return out

    def moved(self, moves: Mapping[str, str]) -> FileIndex:
        """The index of these files after ``moves`` (old path -> new path)."""
        return self.changed(moves.keys(), moves.values())

    @classmethod
    def of(cls, files: FileIndex | Iterable[str]) -> FileIndex:
        """``files`` itself when it is an index already, else a new index of it."""
        return files if isinstance(files, FileIndex) else cls(files)

    def __contains__(self, path: object) -> bool:
        return path in self.files

    def at(self, path: str, fold: bool) -> list[str]:
        """The file at ``path`` (every file whose path equals it ignoring case, when ``fold``)."""
        if fold:
            return list(self._fold()[1].get(path.lower(), ()))
        return [path] if path in self.files else []

    def named(self, name: str, fold: bool) -> list[str]:
        """Every file whose file name is ``name`` (ignoring case, when ``fold``)."""
        if fold:
            return list(self._fold()[0].get(name.lower(), ()))
        return list(self._by_name.get(name, ()))


Files = FileIndex | Iterable[str]


@dataclass(frozen=True)
class Resolution:
    """Where a link points: ``path`` when it resolves, else ``reason`` (``missing``, ``ambiguous`` with
    its ``candidates``, ``outside``) — or ``not a page link``."""

    path: str | None
    reason: str = "resolved"
    candidates: tuple[str, ...] = ()


class Backlink(NamedTuple):
    """A link to a page: the linking page, the link's 1-based line, its source text."""

    path: str
    line: int
    text: str


class BrokenLink(NamedTuple):
    """A page link that resolves to no file, and why (``missing``, ``ambiguous``, ``outside``)."""

    link: Link
    resolution: Resolution


def find_links(text: str) -> list[Link]:
    """Every link of the page ``text`` outside code, in source order (see the module docstring)."""
    doc = parse(text)
    raws: list[RawLink] = []
    for start_line, end_line in checked(doc.inlines, "reading links", every=64):
        start = doc.offsets[start_line]
        end = doc.offsets[end_line] if end_line < len(doc.lines) else len(text)
        raws.extend(scan_links(text, start, end))
    for start_line, _ in doc.definitions:
        start = doc.offsets[start_line]
        found = scan_definition(text, start, start + len(strip_ending(doc.lines[start_line])))
        if found is not None:
            raws.append(found)
    raws.sort(key=lambda raw: raw.start)
    return [_link(text, raw, doc.line_at(raw.start) + 1) for raw in checked(raws, "reading links")]


def _link(text: str, raw: RawLink, line: int) -> Link:
    def part(span: tuple[int, int] | None) -> str | None:
        return None if span is None else text[span[0] : span[1]]

    target = text[raw.target[0] : raw.target[1]]
    path = target if raw.kind == "wikilink" else decode_destination(target)
    return Link(
        kind=raw.kind,
        embed=raw.embed,
        text=text[raw.start : raw.end],
        target=target,
        path=path,
        fragment=part(raw.fragment),
        label=part(raw.label),
        title=part(raw.title),
        angle=raw.angle,
        line=line,
        start=raw.start,
        end=raw.end,
        target_start=raw.target[0],
        target_end=raw.target[1],
    )


def decode_destination(raw: str) -> str:
    """A markdown destination's path as a file path: backslash escapes removed, percent-escapes decoded."""
    out: list[str] = []
    position = 0
    while position < len(raw):
        char = raw[position]
        if char == "\\" and position + 1 < len(raw) and raw[position + 1] in PUNCTUATION:
            out.append(raw[position + 1])
            position += 2
            continue
        out.append(char)
        position += 1
    return unquote("".join(out), errors="replace") if "%" in raw else "".join(out)


def resolve(link: Link, from_path: str, files: Files) -> str | None:
    """The path of the file ``link`` (found in the page at ``from_path``) points to, or None."""
    return resolve_target(link, from_path, files).path


def resolve_target(link: Link, from_path: str, files: Files) -> Resolution:
    """Where ``link`` points from the page at ``from_path``, with the reason when it is broken."""
    if not link.is_page_link:
        return Resolution(None, "not a page link")
    index = FileIndex.of(files)
    if link.kind == "wikilink":
        return resolve_wikilink(link.path, index)
    return resolve_markdown(link.path, from_path, index)


def resolve_markdown(path: str, from_path: str, index: FileIndex) -> Resolution:
    """Resolve a markdown destination's (decoded) path from the page at ``from_path`` (rule 1)."""
    if path.startswith("/"):
        joined = path[1:]
    else:
        folder = from_path.rsplit("/", 1)[0] if "/" in from_path else ""
        joined = f"{folder}/{path}"
    segments: list[str] = []
    for segment in joined.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                return Resolution(None, "outside")
            segments.pop()
        else:
            segments.append(segment)
    full = "/".join(segments)
    if full in index:
        return Resolution(full)
    if not full.lower().endswith(".md") and full + ".md" in index:
        return Resolution(full + ".md")
    return Resolution(None, "missing")


def wikilink_names(target: str) -> tuple[str, ...]:
    """The file names a wikilink target stands for, in the order they are tried (``.md`` implied)."""
    return (target,) if target.lower().endswith(".md") else (target + ".md", target)


def resolve_wikilink(target: str, index: FileIndex) -> Resolution:
    """Resolve a wikilink target (without ``#``/``|`` parts) against the wiki's files (rule 2)."""
    rooted = target.startswith("/")
    body = target[1:] if rooted else target
    if not body or any(segment in ("", ".", "..") for segment in body.split("/")):
        return Resolution(None, "missing")
    for fold in (False, True):
        for name in wikilink_names(body):
            found = _wikilink_candidates(name, rooted, index, fold)
            if len(found) == 1:
                return Resolution(found[0])
            if found:
                return Resolution(None, "ambiguous", tuple(found))
    return Resolution(None, "missing")


def _wikilink_candidates(name: str, rooted: bool, index: FileIndex, fold: bool) -> list[str]:
    if rooted:
        return index.at(name, fold)
    if "/" not in name:
        return index.named(name, fold)
    for path in (name, "wiki/" + name):
        found = index.at(path, fold)
        if found:
            return found
    tail = "/" + (name.lower() if fold else name)
    return [
        path
        for path in index.named(name.rsplit("/", 1)[-1], fold)
        if (path.lower() if fold else path).endswith(tail)
    ]


def backlinks(target_path: str, pages: Mapping[str, str], files: Files) -> list[Backlink]:
    """Every link in ``pages`` (path -> text) that resolves to ``target_path``, by page then line."""
    index = FileIndex.of(files)
    found: list[Backlink] = []
    for path in sorted(pages):
        for link in checked(find_links(pages[path]), "finding backlinks"):
            if resolve_target(link, path, index).path == target_path:
                found.append(Backlink(path, link.line, link.text))
    return found


def broken_links(from_path: str, text: str, files: Files) -> list[BrokenLink]:
    """The page links of ``text`` (the page at ``from_path``) that resolve to no file, in order."""
    index = FileIndex.of(files)
    broken: list[BrokenLink] = []
    for link in checked(find_links(text), "checking links"):
        resolution = resolve_target(link, from_path, index)
        if link.is_page_link and resolution.path is None:
            broken.append(BrokenLink(link, resolution))
    return broken
