"""The heading tree, section addressing and the five section ops."""

from __future__ import annotations

import hashlib

import pytest

from worker.engine.markdown.sections import (
    append_section,
    find_section,
    insert_section_after,
    locate,
    outline,
    remove_section,
    rename_section,
    replace_section,
)
from worker.errors import BatchRejected

PAGE = """---
title: '# not a heading'
---
# Guide

Intro.

## Install

Steps.

### Notes

Install notes.

## Usage

```
# not a heading either
```

    # nor this

### Notes

Usage notes.
"""


def git_blob_id(data: bytes) -> str:
    """What ``git hash-object`` prints, computed here independently."""
    header = f"blob {len(data)}\0".encode()
    return hashlib.sha1(header + data).hexdigest()


def test_outline_nests_and_ignores_code_and_front_matter() -> None:
    """Only real headings count; paths follow nesting; each version is the blob id of the section text."""
    sections = outline(PAGE)
    assert [(s.level, " > ".join(s.path), s.start + 1, s.end) for s in sections] == [
        (1, "Guide", 4, 26),
        (2, "Guide > Install", 8, 15),
        (3, "Guide > Install > Notes", 12, 15),
        (2, "Guide > Usage", 16, 26),
        (3, "Guide > Usage > Notes", 24, 26),
    ]
    lines = PAGE.splitlines(keepends=True)
    for section in sections:
        assert section.version == git_blob_id("".join(lines[section.start : section.end]).encode())
    assert sections[1].to_dict() == {
        "level": 2,
        "heading": "Install",
        "path": "Guide > Install",
        "address": "Install",
        "line": 8,
        "end_line": 15,
        "version": sections[1].version,
    }


def test_duplicate_heading_is_ambiguous_then_found_by_path() -> None:
    """``Notes`` matches twice: SECTION_AMBIGUOUS lists addresses that work; a path tail finds one."""
    with pytest.raises(BatchRejected) as caught:
        find_section(PAGE, "Notes", index=3)
    assert caught.value.code == "SECTION_AMBIGUOUS"
    assert caught.value.index == 3
    assert "'Install > Notes'" in caught.value.message and "'Usage > Notes'" in caught.value.message
    assert find_section(PAGE, "Usage > Notes").start == 23
    assert find_section(PAGE, "Guide > Usage > Notes").start == 23
    assert find_section(PAGE, "  Install  >Notes ").start == 11


def test_not_found_names_the_closest_headings() -> None:
    """A typo gets SECTION_NOT_FOUND with the nearest existing headings; a non-tail path finds nothing."""
    with pytest.raises(BatchRejected) as caught:
        find_section(PAGE, "Instal", index=0)
    assert caught.value.code == "SECTION_NOT_FOUND"
    assert "'Install'" in caught.value.message
    with pytest.raises(BatchRejected) as caught:
        find_section(PAGE, "Guide > Notes")
    assert caught.value.code == "SECTION_NOT_FOUND"
    with pytest.raises(BatchRejected) as caught:
        find_section("no headings\n", "x")
    assert "no headings" in caught.value.message


def test_identical_paths_use_an_ordinal_address() -> None:
    """Two sections with the same full path get addresses ``path [n]`` that find each of them."""
    text = "# A\n## Log\none\n## Log\ntwo\n"
    sections = outline(text)
    assert [s.address for s in sections] == ["A", "A > Log [1]", "A > Log [2]"]
    for section in sections:
        assert find_section(text, section.address) == section
    assert find_section(text, "Log [2]").start == 3
    with pytest.raises(BatchRejected):
        find_section(text, "Log [3]")


def test_setext_headings() -> None:
    """Setext headings (=== and ---, over several lines) are sections; a --- after a blank is a rule."""
    text = "Title\nline two\n=====\nbody\n\n---\n\nSub\n---\nsub body\n"
    sections = outline(text)
    assert [(s.level, s.text, s.start, s.body_start, s.end) for s in sections] == [
        (1, "Title line two", 0, 3, 10),
        (2, "Sub", 7, 9, 10),
    ]


def test_replace_section_keeps_heading_and_drops_subsections() -> None:
    """The body up to the next heading of the same or higher level is replaced, subsections included."""
    result = replace_section(locate(PAGE, "Install"), "New steps.\n\n")
    assert "## Install\nNew steps.\n\n## Usage\n" in result
    assert "Install notes" not in result
    assert result.startswith(PAGE[: PAGE.index("## Install")])
    assert result.endswith(PAGE[PAGE.index("## Usage") :])


def test_replace_last_section_without_trailing_newline() -> None:
    """At the end of the page the content is written as given; a heading without newline gets one."""
    assert replace_section(locate("# A\nold", "A"), "new") == "# A\nnew"
    assert replace_section(locate("# A", "A"), "new") == "# A\nnew"
    assert replace_section(locate("# A\nold\n# B\n", "A"), "new") == "# A\nnew\n# B\n"
    assert replace_section(locate("# A\nold\n# B\n", "A"), "") == "# A\n# B\n"


def test_crlf_page_gets_crlf_separators() -> None:
    """Line breaks the ops add copy the page's CRLF; everything else is kept byte for byte."""
    text = "# A\r\nold\r\n# B\r\nb\r\n"
    assert replace_section(locate(text, "A"), "new") == "# A\r\nnew\r\n# B\r\nb\r\n"
    assert append_section(locate(text, "A"), "more") == "# A\r\nold\r\nmore\r\n# B\r\nb\r\n"
    assert insert_section_after(locate(text, "A"), "N", 2, "n") == "# A\r\nold\r\n## N\r\nn\r\n# B\r\nb\r\n"
    assert remove_section(locate(text, "A")) == "# B\r\nb\r\n"
    assert rename_section(locate(text, "B"), "Bee") == "# A\r\nold\r\n# Bee\r\nb\r\n"


def test_append_goes_after_subsections_and_before_trailing_blanks() -> None:
    """Appended content ends the section (subsections included); its trailing blank lines stay below."""
    text = "# A\n- one\n## A1\n- two\n\n# B\n"
    assert append_section(locate(text, "A"), "- three") == "# A\n- one\n## A1\n- two\n- three\n\n# B\n"
    assert append_section(locate("# A\n\n# B\n", "A"), "x\n") == "# A\nx\n\n# B\n"
    assert append_section(locate("# A\ntext", "A"), "more") == "# A\ntext\nmore"
    assert append_section(locate("# A\n", "A"), "") == "# A\n"


def test_insert_after_whole_section_keeps_spacing() -> None:
    """The new section follows the addressed one and its subsections, with the same trailing blanks."""
    text = "# A\na\n## A1\nx\n\n# B\n"
    assert (
        insert_section_after(locate(text, "A"), "New", 1, "body")
        == "# A\na\n## A1\nx\n\n# New\nbody\n\n# B\n"
    )
    assert insert_section_after(locate("# A\na", "A"), "Z", 2, "") == "# A\na\n## Z\n"


@pytest.mark.parametrize(("level", "heading"), [(0, "x"), (7, "x"), (2, ""), (2, "two\nlines"), (2, "x #")])
def test_insert_refuses_bad_level_or_heading(level: int, heading: str) -> None:
    """Level 1-6 and a one-line heading that reads back as itself, else INVALID_BATCH."""
    with pytest.raises(BatchRejected) as caught:
        insert_section_after(locate("# A\n", "A", index=2), heading, level, "")
    assert (caught.value.code, caught.value.index) == ("INVALID_BATCH", 2)


def test_remove_section_with_subsections() -> None:
    """The heading, its body and its subsections go; the rest stays."""
    result = remove_section(locate(PAGE, "Guide > Install"))
    assert "Install" not in result
    assert result == PAGE[: PAGE.index("## Install")] + PAGE[PAGE.index("## Usage") :]
    assert remove_section(locate("# A\na\n# B\nb", "B")) == "# A\na\n"


def test_rename_keeps_level_and_style() -> None:
    """ATX markers, closing hashes and indentation stay; a setext heading keeps its underline."""
    assert rename_section(locate(" ## Old ##  \nx\n", "Old"), "New") == " ## New ##  \nx\n"
    assert rename_section(locate("Old\ntitle\n---\nx\n", "Old title"), "New") == "New\n---\nx\n"
    assert rename_section(locate("#\tOld", "Old"), "New") == "#\tNew"
    with pytest.raises(BatchRejected) as caught:
        rename_section(locate("# Old\n", "Old"), "ends with #")
    assert caught.value.code == "INVALID_BATCH"


def test_empty_body_sections() -> None:
    """A heading directly followed by another has an empty body that can be filled."""
    text = "# A\n## B\n## C\n"
    assert [(s.text, s.body_start, s.end) for s in outline(text)] == [("A", 1, 3), ("B", 2, 2), ("C", 3, 3)]
    assert replace_section(locate(text, "B"), "b") == "# A\n## B\nb\n## C\n"
    assert append_section(locate(text, "C"), "c") == "# A\n## B\n## C\nc"


def test_expected_section_version_guards_the_located_section() -> None:
    """The current section version passes; a stale one is VERSION_MISMATCH telling to re-read, naming the
    edit (every section op edits a located section)."""
    version = find_section(PAGE, "Usage").version
    located = locate(PAGE, "Usage", expected_section_version=version)
    assert replace_section(located, "x\n").endswith("## Usage\nx\n")
    with pytest.raises(BatchRejected) as caught:
        locate(PAGE, "Usage", index=4, expected_section_version="0" * 40)
    assert (caught.value.code, caught.value.index) == ("VERSION_MISMATCH", 4)
    assert "sections" in caught.value.message


def test_other_sections_keep_their_version() -> None:
    """Changing one section leaves the versions of sections that do not contain it unchanged."""
    before = {s.address: s.version for s in outline(PAGE)}
    after = {
        s.address: s.version for s in outline(replace_section(locate(PAGE, "Usage > Notes"), "changed\n"))
    }
    assert after["Install"] == before["Install"]
    assert after["Install > Notes"] == before["Install > Notes"]
    assert after["Usage"] != before["Usage"]


def test_many_identical_headings_are_addressed_by_ordinal() -> None:
    """Twelve thousand identical headings each get their own ``h [n]`` address (without quadratic cost)."""
    sections = outline("# h\n\ntext\n\n" * 12_000)
    assert len(sections) == 12_000
    assert sections[0].address == "h [1]" and sections[-1].address == "h [12000]"
    assert find_section("# h\n# h\n# h\n", "h [3]").start == 2
