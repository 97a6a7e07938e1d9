"""Property test: merging keys into front matter built from a commented template keeps every untouched
line byte for byte and reads back as exactly the expected merge."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.engine.markdown.frontmatter import read_frontmatter, set_frontmatter

KEYS = ["title", "tags", "date", "owner", "status", "weight", "meta", "aliases"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

# Existing entries: (lines as written, value they hold).
TEMPLATES: list[tuple[str, Any]] = [
    ("{key}: plain words", "plain words"),
    ("{key}: 'quoted: yes'   # a comment", "quoted: yes"),
    ("{key}: 42", 42),
    ("{key}: ~", None),
    ("{key}: 2024-02-29", "2024-02-29"),
    ("{key}:\n- one\n- two  # second", ["one", "two"]),
    ("{key}:\n  - x\n  - y", ["x", "y"]),
    ("{key}:\n  inner: 1\n  # inner comment\n  other: [a, b]", {"inner": 1, "other": ["a", "b"]}),
    ("{key}: |\n  literal\n  text", "literal\ntext\n"),
    ("{key}: {{a: 1}}", {"a": 1}),
]


@st.composite
def existing_blocks(draw: st.DrawFn) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """Entries (key, lines with an optional comment line above) and the mapping they hold."""
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=6))
    entries, data = [], {}
    for number, key in enumerate(keys):
        template, value = draw(st.sampled_from(TEMPLATES))
        lines = template.format(key=key)
        if number and draw(st.booleans()):
            lines = f"# about {key}\n" + lines
        if draw(st.booleans()):
            lines += "\n"  # a blank line after the entry
        entries.append((key, lines))
        data[key] = value
    return entries, data


@settings(max_examples=300, deadline=None)
@given(
    existing_blocks(),
    st.dictionaries(st.sampled_from([*KEYS, "new", "more"]), json_values, max_size=4),
    st.lists(st.sampled_from([*KEYS, "absent"]), max_size=3),
    st.sampled_from(["\n", "\r\n"]),
)
def test_merge_keeps_untouched_lines_and_reads_back(
    block: tuple[list[tuple[str, str]], dict[str, Any]],
    updates: dict[str, Any],
    unset: list[str],
    newline: str,
) -> None:
    """Untouched entries keep their exact lines, in order; the result holds the expected merge."""
    entries, data = block
    unset = [key for key in unset if key not in updates]
    yaml = "# header\n" + "".join(lines + "\n" for _, lines in entries)
    body = "# Page\n\nSome text.\n"
    text = ("---\n" + yaml + "---\n" + body).replace("\n", newline)

    result = set_frontmatter(text, updates, unset)

    expected = {key: value for key, value in data.items() if key not in unset}
    expected.update(updates)
    found = read_frontmatter(result)
    assert json.dumps(found) == json.dumps(expected)
    assert list(found or {}) == list(expected)
    assert result.startswith(("---\n# header\n").replace("\n", newline))
    assert result.endswith(("---\n" + body).replace("\n", newline))
    position = 0
    for key, lines in entries:
        if key in unset or (key in updates and json.dumps(updates[key]) != json.dumps(data[key])):
            continue
        written = (lines + "\n").replace("\n", newline)
        found_at = result.find(written, position)
        assert found_at >= 0, (key, written, result)
        position = found_at + len(written)
    if not updates and not [key for key in unset if key in data]:
        assert result == text
