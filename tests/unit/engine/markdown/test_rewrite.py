"""rewrite_links: every link that pointed to a moved file points to its new place, in its own form."""

from __future__ import annotations

import pytest

from worker.engine.markdown.rewrite import encode_destination, may_rewrite, relative_path, rewrite_links

FILES = {
    "index.md",
    "wiki/old.md",
    "wiki/other.md",
    "wiki/topics/deep.md",
    "wiki/topics/img.png",
    "raw/my page.md",
}


def rewrite(text: str, moves: dict[str, str], path: str = "wiki/other.md") -> tuple[str, int]:
    """``rewrite_links`` over ``FILES``."""
    return rewrite_links(path, text, moves, FILES)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("[[old]]", "[[new]]"),
        ("[[old|Label]]", "[[new|Label]]"),
        ("[[old#Heading]]", "[[new#Heading]]"),
        ("[[old#^block]]", "[[new#^block]]"),
        ("[[old#H|L]]", "[[new#H|L]]"),
        ("![[old]]", "![[new]]"),
        ("[[old.md]]", "[[new.md]]"),
        ("[[ old ]]", "[[ new ]]"),
        ("[[wiki/old]]", "[[wiki/new]]"),
        ("[t](old.md)", "[t](new.md)"),
        ("[t](old.md#frag)", "[t](new.md#frag)"),
        ("[t](./old.md)", "[t](./new.md)"),
        ("[t](old)", "[t](new)"),
        ('[t](old.md "Title")', '[t](new.md "Title")'),
        ("[t](<old.md>)", "[t](<new.md>)"),
        ("[t](/wiki/old.md)", "[t](/wiki/new.md)"),
        ("![i](old.md)", "![i](new.md)"),
        ("[id]: old.md 'T'", "[id]: new.md 'T'"),
    ],
)
def test_rename_in_place_keeps_each_form(before: str, after: str) -> None:
    """A rename within a folder changes only the target, keeping !, #fragment, |label, title, <>."""
    assert rewrite(before + "\n", {"wiki/old.md": "wiki/new.md"}) == (after + "\n", 1)


def test_move_to_another_folder_leaves_a_still_unique_bare_name() -> None:
    """A file that keeps its name in another folder: bare names stay; markdown paths change."""
    text = "[[old]] [[old|x]] [t](old.md)\n"
    assert rewrite(text, {"wiki/old.md": "wiki/topics/old.md"}) == (
        "[[old]] [[old|x]] [t](topics/old.md)\n",
        1,
    )


def test_move_that_makes_the_name_ambiguous_qualifies_the_link() -> None:
    """When the new name is taken elsewhere, the wikilink gets the path under wiki/ (without .md)."""
    files = {*FILES, "wiki/topics/new.md"}
    text = "[[old]] and [[old.md|x]]\n"
    moved = rewrite_links("index.md", text, {"wiki/old.md": "wiki/archive/new.md"}, files)
    assert moved == ("[[archive/new]] and [[archive/new.md|x]]\n", 2)


def test_qualified_link_stays_qualified() -> None:
    """A path-qualified wikilink is rewritten to a path-qualified one even when a bare name would do."""
    text = "[[topics/deep]]\n"
    assert rewrite(text, {"wiki/topics/deep.md": "wiki/areas/deep.md"}) == ("[[areas/deep]]\n", 1)


def test_root_level_target_unambiguous_after_move() -> None:
    """A page moved to the root keeps a bare name when unique, else gets /path."""
    files = {*FILES, "wiki/index2.md"}
    moved = rewrite_links("wiki/other.md", "[[old]]\n", {"wiki/old.md": "index2.md"}, files)
    assert moved == ("[[/index2]]\n", 1)


def test_collision_created_by_another_move_is_fixed() -> None:
    """A bare link to an unmoved file that a move made ambiguous is qualified so it still resolves."""
    text = "[[deep]]\n"
    moved = rewrite(text, {"wiki/old.md": "wiki/deep.md"})
    assert moved == ("[[topics/deep]]\n", 1)


def test_moved_linking_page_fixes_its_relative_links() -> None:
    """Relative markdown links inside a page that moved are adjusted even when their targets did not."""
    text = "[d](topics/deep.md) [i](../index.md) [[deep]] ![p](topics/img.png)\n"
    moved = rewrite(text, {"wiki/other.md": "wiki/a/b/other.md"})
    assert moved == (
        "[d](../../topics/deep.md) [i](../../../index.md) [[deep]] ![p](../../topics/img.png)\n",
        3,
    )


def test_moved_linking_page_and_target_together() -> None:
    """A folder move of both page and target keeps relative links between them unchanged."""
    files = {"wiki/a/p.md", "wiki/a/q.md", "wiki/z.md"}
    moves = {"wiki/a/p.md": "wiki/b/p.md", "wiki/a/q.md": "wiki/b/q.md"}
    assert rewrite_links("wiki/a/p.md", "[q](q.md) [z](../z.md)\n", moves, files) == (
        "[q](q.md) [z](../z.md)\n",
        0,
    )
    assert rewrite_links("wiki/z.md", "[q](a/q.md) [[a/q]]\n", moves, files) == (
        "[q](b/q.md) [[b/q]]\n",
        2,
    )


def test_self_link_of_a_moved_page() -> None:
    """A page's link to itself follows it."""
    moved = rewrite("[me](other.md) [[other]]\n", {"wiki/other.md": "wiki/x/renamed.md"})
    assert moved == ("[me](renamed.md) [[renamed]]\n", 2)


def test_percent_encoding_follows_the_link() -> None:
    """An escaped destination gets an escaped new path; an angle one stays raw; a raw one escapes blanks."""
    moves = {"raw/my page.md": "raw/your page.md"}
    text = "[a](../raw/my%20page.md) [b](<../raw/my page.md>) [[my page]]\n"
    assert rewrite(text, moves) == (
        "[a](../raw/your%20page.md) [b](<../raw/your page.md>) [[your page]]\n",
        3,
    )
    assert rewrite("[c](old.md)\n", {"wiki/old.md": "wiki/a b(1).md"}) == ("[c](a%20b%281%29.md)\n", 1)


def test_code_and_unrelated_text_untouched() -> None:
    """Links in code and links to files that did not move are byte-identical; line endings kept."""
    text = (
        "[[old]]\r\n\r\n```\r\n[[old]]\r\n```\r\n`[[old]]` [[other]] [x](https://old.md)\r\n\r\n    [[old]]"
    )
    moved, count = rewrite(text, {"wiki/old.md": "wiki/new.md"})
    assert count == 1
    assert moved == text.replace("[[old]]\r\n\r\n```", "[[new]]\r\n\r\n```", 1)


def test_broken_links_are_left_alone() -> None:
    """A link that resolved to nothing before the moves is not touched."""
    assert rewrite("[[gone]] [g](gone.md)\n", {"wiki/old.md": "wiki/new.md"}) == (
        "[[gone]] [g](gone.md)\n",
        0,
    )


def test_folder_rename_is_many_moves() -> None:
    """Every file under a folder moves; links into it follow, in every form."""
    files = {"wiki/a/x.md", "wiki/a/y/z.md", "wiki/p.md"}
    moves = {path: "wiki/b/" + path[len("wiki/a/") :] for path in files if path.startswith("wiki/a/")}
    text = "[[a/x]] [[a/y/z|Z]] [x](a/x.md) [z](a/y/z.md#top) [[x]] [[z]]\n"
    assert rewrite_links("wiki/p.md", text, moves, files) == (
        "[[b/x]] [[b/y/z|Z]] [x](b/x.md) [z](b/y/z.md#top) [[x]] [[z]]\n",
        4,
    )


def test_name_that_cannot_be_a_wikilink_is_left() -> None:
    """A new name with ``#`` or ``|`` cannot be written as a wikilink target: the link is left as is."""
    assert rewrite("[[old]] [m](old.md)\n", {"wiki/old.md": "wiki/a#b.md"}) == (
        "[[old]] [m](a%23b.md)\n",
        1,
    )


def test_relative_path() -> None:
    """Relative paths between folders, the root being ''."""
    assert relative_path("wiki/a/b.md", "wiki/a") == "b.md"
    assert relative_path("wiki/a/b.md", "wiki/c/d") == "../../a/b.md"
    assert relative_path("index.md", "wiki") == "../index.md"
    assert relative_path("wiki/x.md", "") == "wiki/x.md"
    assert relative_path("wiki/wiki/x.md", "wiki") == "wiki/x.md"


def test_encode_destination_styles() -> None:
    """Full percent-encoding when the original had escapes; else only what a destination needs."""
    assert encode_destination("a b/é.md", "x%20y.md", angle=False) == "a%20b/%C3%A9.md"
    assert encode_destination("a b/é.md", "x.md", angle=False) == "a%20b/é.md"
    assert encode_destination("a b/é.md", "x.md", angle=True) == "a b/é.md"
    assert encode_destination("100%#.md", "x.md", angle=True) == "100%25%23.md"


def test_table_row_wikilink_keeps_its_escaped_pipe() -> None:
    """In ``[[old\\|label]]`` only the target changes."""
    assert rewrite("| [[old\\|Old]] |\n", {"wiki/old.md": "wiki/new.md"}) == ("| [[new\\|Old]] |\n", 1)


def test_may_rewrite_filters_pages_without_the_moved_names() -> None:
    """Pages that cannot be affected are skipped; escaped, encoded or differently cased names are not."""
    moves = {"wiki/my page.md": "wiki/new_name.md"}
    assert not may_rewrite("wiki/p.md", "[[other]] [x](y.md)\n", moves)
    assert may_rewrite("wiki/p.md", "[x](My%20Page.md)\n", moves)
    assert may_rewrite("wiki/p.md", "[[new\\_name]]\n", moves)
    assert may_rewrite("wiki/my page.md", "no links\n", moves)
