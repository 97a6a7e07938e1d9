"""Property tests: the outline agrees with a reference heading scanner, and the ops touch only the
addressed section's lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.engine.markdown.sections import (
    append_section,
    find_section,
    locate,
    outline,
    remove_section,
    replace_section,
)

NAMES = ["Intro", "Notes", "Usage", "Notes"]


@st.composite
def pages(draw: st.DrawFn) -> str:
    """Headings of random levels and names, paragraphs, and fences holding heading-like lines."""
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    blocks = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["heading", "heading", "paragraph", "fence", "blank"]))
        if kind == "heading":
            blocks.append("#" * draw(st.integers(1, 4)) + " " + draw(st.sampled_from(NAMES)))
        elif kind == "paragraph":
            blocks.append(draw(st.sampled_from(["text", "more text", "- item"])))
        elif kind == "fence":
            blocks.append("```" + newline + "# " + draw(st.sampled_from(NAMES)) + newline + "```")
        else:
            blocks.append("")
    text = newline.join(blocks)
    return text + newline if draw(st.booleans()) else text


def reference_headings(text: str) -> list[tuple[int, int, str]]:
    """(line, level, text) of the headings of a generated page: '#' lines outside fences."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            marks = len(line) - len(line.lstrip("#"))
            found.append((number, marks, line[marks:].strip()))
    return found


@settings(max_examples=200, deadline=None)
@given(pages())
def test_outline_matches_reference_and_addresses_are_unique(text: str) -> None:
    """Each heading outside code is a section ending at the next heading of the same or higher level,
    and each section's address finds exactly it."""
    heads = reference_headings(text)
    sections = outline(text)
    assert [(s.start, s.level, s.text) for s in sections] == heads
    total = len(text.splitlines())
    for number, (line, level, _) in enumerate(heads):
        end = next((later for later, lvl, _ in heads[number + 1 :] if lvl <= level), total)
        assert (sections[number].start, sections[number].end) == (line, end)
    for section in sections:
        assert find_section(text, section.address) == section


@settings(max_examples=200, deadline=None)
@given(pages(), st.data())
def test_ops_change_only_the_addressed_section(text: str, data: st.DataObject) -> None:
    """remove, replace and append leave every line outside the addressed section as it was."""
    sections = outline(text)
    if not sections:
        return
    section = data.draw(st.sampled_from(sections))
    lines = text.splitlines(keepends=True)
    before, after = "".join(lines[: section.start]), "".join(lines[section.end :])
    assert remove_section(locate(text, section.address)) == before + after
    replaced = replace_section(locate(text, section.address), "NEW\n")
    assert replaced.startswith(before) and replaced.endswith(after)
    assert replaced.count("NEW\n") == 1
    appended = append_section(locate(text, section.address), "ADDED\n")
    assert appended.startswith(before + "".join(lines[section.start : section.body_start]))
    assert appended.endswith(after) and appended.replace("ADDED\n", "", 1).replace("\r\n", "\n") in (
        text.replace("\r\n", "\n"),
        text.replace("\r\n", "\n") + "\n",
    )
