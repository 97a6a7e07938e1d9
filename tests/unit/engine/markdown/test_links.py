"""Finding links outside code, and wikiq's resolution rule."""

from __future__ import annotations

import pytest

from worker.engine.markdown.links import (
    FileIndex,
    backlinks,
    broken_links,
    find_links,
    resolve,
    resolve_target,
)


def shapes(text: str) -> list[tuple[str, bool, str, str | None, str | None]]:
    """(kind, embed, target, fragment, label) of each link found in ``text``."""
    return [(link.kind, link.embed, link.target, link.fragment, link.label) for link in find_links(text)]


def test_wikilink_forms() -> None:
    """Every wikilink form is found with its target, fragment and label."""
    text = "[[a]] [[b|B]] [[c#Head]] [[d#^blk]] [[e#H|E]] ![[f.png]] [[folder/g]] [[ spaced ]]\n"
    assert shapes(text) == [
        ("wikilink", False, "a", None, None),
        ("wikilink", False, "b", None, "B"),
        ("wikilink", False, "c", "Head", None),
        ("wikilink", False, "d", "^blk", None),
        ("wikilink", False, "e", "H", "E"),
        ("wikilink", True, "f.png", None, None),
        ("wikilink", False, "folder/g", None, None),
        ("wikilink", False, "spaced", None, None),
    ]


def test_markdown_link_forms() -> None:
    """Inline links, images, angle destinations, titles, fragments and reference definitions."""
    text = (
        '[l](rel/p.md) [f](p.md#frag) ![alt](img.png) [a](<my page.md>) [t](a.md "title")'
        " [e](my%20page.md) [x](https://x.org) [m](mailto:a@b) [h](#local)\n\n[id]: ref.md 'T'\n"
    )
    found = find_links(text)
    assert [(link.kind, link.embed, link.target, link.fragment) for link in found] == [
        ("markdown", False, "rel/p.md", None),
        ("markdown", False, "p.md", "frag"),
        ("markdown", True, "img.png", None),
        ("markdown", False, "my page.md", None),
        ("markdown", False, "a.md", None),
        ("markdown", False, "my%20page.md", None),
        ("markdown", False, "https://x.org", None),
        ("markdown", False, "mailto:a@b", None),
        ("markdown", False, "", "local"),
        ("definition", False, "ref.md", None),
    ]
    assert found[3].angle and found[4].title == '"title"'
    assert found[5].path == "my page.md"
    assert [link.is_page_link for link in found] == [True] * 6 + [False] * 3 + [True]


def test_image_inside_a_link_both_found() -> None:
    """A badge (an image inside a link) yields both links, outer first."""
    found = find_links("[![badge](b.png)](page.md)\n")
    assert [(link.target, link.embed) for link in found] == [("page.md", False), ("b.png", True)]


def test_lines_and_spans() -> None:
    """``line`` is 1-based and the spans point at the link and at its target in the page text."""
    text = "# T\r\n\r\nsee [[x|X]] and [y](z/y.md#f)\r\n"
    first, second = find_links(text)
    assert (first.line, second.line) == (3, 3)
    assert text[first.start : first.end] == "[[x|X]]" == first.text
    assert text[first.target_start : first.target_end] == "x"
    assert text[second.target_start : second.target_end] == "z/y.md"


@pytest.mark.parametrize(
    "text",
    [
        "```\n[[a]] [b](b.md)\n```\n",
        "~~~md\n[[a]] [b](b.md)\n~~~\n",
        "para\n\n    [[a]] [b](b.md)\n",
        "`[[a]]` and `[b](b.md)`\n",
        "``[[a]] ` [b](b.md)``\n",
        "<div>\n[[a]] [b](b.md)\n</div>\n",
        "---\nlink: '[[a]]'\nother: '[b](b.md)'\n---\n",
        "- item\n\n  ```\n  [[a]]\n  ```\n",
        "> ```\n> [[a]]\n> ```\n",
        "`code that spans\n[[a]] lines` of a paragraph\n",
        "\\[[a]] is escaped\n",
    ],
)
def test_nothing_inside_code_is_a_link(text: str) -> None:
    """Fences (``` and ~~~), indented code, inline code (single and double backticks, across lines),
    HTML blocks, the front matter and escaped brackets hold no links."""
    assert find_links(text) == []


def test_links_next_to_code_are_found() -> None:
    """Code spans end where CommonMark ends them: links around them are still found."""
    text = "`a` [[x]] ``b ` c`` [y](y.md) \\`[[z]]\\` ` unclosed [[w]]\n"
    assert [link.target for link in find_links(text)] == ["x", "y.md", "z", "w"]


def test_links_in_quotes_lists_and_headings() -> None:
    """Block quotes, list items and headings hold links."""
    text = "# About [[h]]\n\n> quoted [[q]]\n\n- item [i](i.md)\n  1. nested [[n]]\n"
    assert [link.target for link in find_links(text)] == ["h", "q", "i.md", "n"]


FILES = FileIndex(
    [
        "index.md",
        "wiki/a.md",
        "wiki/dup.md",
        "wiki/sub/dup.md",
        "wiki/sub/deep/c.md",
        "wiki/Case.md",
        "wiki/v1.2 notes.md",
        "raw/img.png",
        "raw/my page.md",
        "sub/x.md",
        "wiki/sub/x.md",
    ]
)


def target(text: str, from_path: str = "wiki/a.md") -> str | None:
    """Where the only link of ``text`` resolves from ``from_path``."""
    (link,) = find_links(text)
    return resolve(link, from_path, FILES)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[a]]", "wiki/a.md"),
        ("[[a.md]]", "wiki/a.md"),
        ("[[a#x|y]]", "wiki/a.md"),
        ("![[img.png]]", "raw/img.png"),
        ("[[v1.2 notes]]", "wiki/v1.2 notes.md"),
        ("[[c]]", "wiki/sub/deep/c.md"),
        ("[[dup]]", None),
        ("[[sub/dup]]", "wiki/sub/dup.md"),
        ("[[wiki/dup]]", "wiki/dup.md"),
        ("[[deep/c]]", "wiki/sub/deep/c.md"),
        ("[[sub/x]]", "sub/x.md"),
        ("[[/wiki/sub/x]]", "wiki/sub/x.md"),
        ("[[/sub/deep/c]]", None),
        ("[[case]]", "wiki/Case.md"),
        ("[[CASE]]", "wiki/Case.md"),
        ("[[missing]]", None),
        ("[[../a]]", None),
    ],
)
def test_wikilink_resolution(text: str, expected: str | None) -> None:
    """Bare names anywhere, path-qualified from the root, then under wiki/, then by suffix; case last."""
    assert target(text) == expected


def test_ambiguous_bare_name_reports_candidates() -> None:
    """Several files with the name: unresolved, reason ``ambiguous``, candidates listed."""
    (link,) = find_links("[[dup]]")
    resolution = resolve_target(link, "index.md", FILES)
    assert resolution.path is None
    assert resolution.reason == "ambiguous"
    assert resolution.candidates == ("wiki/dup.md", "wiki/sub/dup.md")


def test_case_sensitive_match_wins_over_folded() -> None:
    """A file matching exactly is chosen even when another matches ignoring case."""
    files = FileIndex(["wiki/note.md", "wiki/x/Note.md"])
    (link,) = find_links("[[Note]]")
    assert resolve(link, "index.md", files) == "wiki/x/Note.md"
    (link,) = find_links("[[NOTE]]")
    assert resolve_target(link, "index.md", files).reason == "ambiguous"


@pytest.mark.parametrize(
    ("text", "from_path", "expected"),
    [
        ("[x](a.md)", "wiki/dup.md", "wiki/a.md"),
        ("[x](sub/deep/c.md)", "wiki/a.md", "wiki/sub/deep/c.md"),
        ("[x](../a.md)", "wiki/sub/dup.md", "wiki/a.md"),
        ("[x](../../index.md)", "wiki/sub/dup.md", "index.md"),
        ("[x](./../dup.md#part)", "wiki/sub/x.md", "wiki/dup.md"),
        ("[x](../raw/my%20page.md)", "wiki/a.md", "raw/my page.md"),
        ("[x](<../raw/my page.md>)", "wiki/a.md", "raw/my page.md"),
        ("[x](a)", "wiki/dup.md", "wiki/a.md"),
        ("[x](/raw/img.png)", "wiki/sub/deep/c.md", "raw/img.png"),
        ("[x](../../../index.md)", "wiki/sub/dup.md", None),
        ("[x](A.md)", "wiki/dup.md", None),
        ("[x](a.md)", "index.md", None),
    ],
)
def test_markdown_resolution(text: str, from_path: str, expected: str | None) -> None:
    """Markdown links resolve relative to the linking page's folder and never leave the wiki."""
    assert target(text, from_path) == expected


def test_leaving_the_wiki_is_reported_as_outside() -> None:
    """``..`` above the root: broken, reason ``outside``."""
    broken = broken_links("wiki/a.md", "[x](../../etc/passwd)\n", FILES)
    assert [(b.link.target, b.resolution.reason) for b in broken] == [("../../etc/passwd", "outside")]


def test_broken_links_lists_missing_and_ambiguous_only() -> None:
    """URLs, same-page fragments and resolving links are not broken; missing and ambiguous ones are."""
    text = "[[a]] [[nope]] [[dup]] [u](https://x) [f](#h) [[#h]] [m](gone.md)\n`[[inside code]]`\n"
    broken = broken_links("wiki/a.md", text, FILES)
    assert [(b.link.text, b.resolution.reason, b.link.line) for b in broken] == [
        ("[[nope]]", "missing", 1),
        ("[[dup]]", "ambiguous", 1),
        ("[m](gone.md)", "missing", 1),
    ]


def test_backlinks_by_page_and_line() -> None:
    """Every form of link to a page is a backlink, with its page, line and text; code is not."""
    pages = {
        "wiki/sub/dup.md": "x\n[up](../a.md#s)\n",
        "index.md": "[[a|A]]\n\n```\n[[a]]\n```\n![[wiki/a]] [[dup]]\n",
        "wiki/a.md": "[[a#self]]\n",
    }
    assert backlinks("wiki/a.md", pages, FILES) == [
        ("index.md", 1, "[[a|A]]"),
        ("index.md", 6, "![[wiki/a]]"),
        ("wiki/a.md", 1, "[[a#self]]"),
        ("wiki/sub/dup.md", 2, "[up](../a.md#s)"),
    ]


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("[a](" * 20_000, 0),
        ("[" * 20_000 + "]" * 20_000, 0),
        ("`" * 10_000 + " x " + "``" * 10_000, 0),
        ("[[a " * 20_000, 0),
        ('[a](b "' * 10_000, 0),
        ("[" * 3_000 + "![a](b.png)" + "](c.md)" * 3_000, 3_001),
    ],
)
def test_hostile_lines_are_read_in_linear_time(text: str, count: int) -> None:
    """Long lines of unclosed link syntax give the right answer (a quadratic scan would not finish)."""
    assert len(find_links(text)) == count


def test_wikilink_with_a_pipe_escaped_for_a_table() -> None:
    """``[[name\\|label]]`` (Obsidian in a table row) has target ``name`` and label ``label``."""
    (link,) = find_links("| col |\n|---|\n| [[a#h\\|A]] |\n")
    assert (link.target, link.fragment, link.label, link.line) == ("a", "h", "A", 3)


def test_reference_definitions_in_containers() -> None:
    """Definitions inside a block quote or a list item are found; one whose destination is on the next
    line is not (deliberately)."""
    text = '> [q]: q.md\n\n- [l]: <l l.md> "T"\n\n[n]:\n  n.md\n\n[use][q] [use][l]\n'
    found = [(link.kind, link.path, link.angle, link.line) for link in find_links(text)]
    assert found == [("definition", "q.md", False, 1), ("definition", "l l.md", True, 3)]
