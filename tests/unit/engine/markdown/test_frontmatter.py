"""Front matter: read it, merge keys into it line-exactly, create it, refuse what is not a mapping."""

from __future__ import annotations

import pytest

from worker.engine.markdown.frontmatter import read_frontmatter, set_frontmatter
from worker.errors import BatchRejected

PAGE = """---
# Page metadata
title: Redis   # shown in the index
tags:
- db
- cache  # the main use
# when it was written
date: 2024-01-05
owner: ~
---
# Redis

Body text.
"""


def test_set_changes_only_the_named_key_and_keeps_its_comment() -> None:
    """A scalar key changes on its own line, keeping its end-of-line comment; the rest is identical."""
    result = set_frontmatter(PAGE, {"title": "Redis 7"})
    assert result == PAGE.replace("title: Redis   #", "title: Redis 7   #")


def test_new_keys_go_at_the_end_of_the_block() -> None:
    """New keys follow the existing ones, before the closing line; lists are indented under the key."""
    result = set_frontmatter(PAGE, {"status": "draft", "aliases": ["kv", "cache"]})
    assert result == PAGE.replace(
        "owner: ~\n---", "owner: ~\nstatus: draft\naliases:\n  - kv\n  - cache\n---"
    )


def test_unset_removes_the_key_with_its_comment_and_ignores_missing_keys() -> None:
    """An unset key goes with the comment line above it; unsetting a missing key is no change."""
    result = set_frontmatter(PAGE, unset=["date", "nope"])
    assert result == PAGE.replace("# when it was written\ndate: 2024-01-05\n", "")
    assert set_frontmatter(PAGE, unset=["nope"]) == PAGE


def test_replacing_a_block_value() -> None:
    """A list value is replaced as a whole, by lines; the keys around it are untouched."""
    result = set_frontmatter(PAGE, {"tags": {"a": 1}})
    assert result == PAGE.replace("tags:\n- db\n- cache  # the main use\n", "tags:\n  a: 1\n")
    assert read_frontmatter(result) == {
        "title": "Redis",
        "tags": {"a": 1},
        "date": "2024-01-05",
        "owner": None,
    }


def test_setting_the_current_value_changes_nothing() -> None:
    """Same value, same type: the page is returned byte for byte (no reformatting of ``~``)."""
    assert set_frontmatter(PAGE, {"owner": None, "title": "Redis", "tags": ["db", "cache"]}) == PAGE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# Title\n", "---\nstatus: new\n---\n# Title\n"),
        ("", "---\nstatus: new\n---\n"),
        ("line\r\nnext", "---\r\nstatus: new\r\n---\r\nline\r\nnext"),
        ("---\nnot closed\n", "---\nstatus: new\n---\n---\nnot closed\n"),
    ],
)
def test_created_when_absent(text: str, expected: str) -> None:
    """A page without front matter gets a block before its content, in its line ending."""
    assert set_frontmatter(text, {"status": "new"}) == expected
    assert set_frontmatter(text, unset=["status"]) == text


def test_crlf_block_and_dots_closing_line() -> None:
    """A CRLF block gets CRLF lines; a ``...`` closing line is kept."""
    text = "---\r\na: 1\r\n...\r\nbody\r\n"
    assert set_frontmatter(text, {"b": 2}) == "---\r\na: 1\r\nb: 2\r\n...\r\nbody\r\n"


def test_empty_block_takes_keys() -> None:
    """An empty block is an empty mapping."""
    assert read_frontmatter("---\n---\nx") == {}
    assert set_frontmatter("---\n---\nx", {"a": "b"}) == "---\na: b\n---\nx"


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("yes", "v: 'yes'"),
        ("2024-01-01", "v: '2024-01-01'"),
        ("a: b", "v: 'a: b'"),
        ("two\nlines", 'v: "two\\nlines"'),
        (None, "v:"),
        (True, "v: true"),
        (1.5, "v: 1.5"),
        ("é ü", "v: é ü"),
    ],
)
def test_values_round_trip_as_json(value: object, line: str) -> None:
    """Each value is written so that reading it back gives the same JSON value and type."""
    result = set_frontmatter("x\n", {"v": value})
    assert result == f"---\n{line}\n---\nx\n"
    assert read_frontmatter(result) == {"v": value}


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("---\n- a\n- b\n---\nbody", "a list"),
        ("---\njust words\n---\nbody", "single str"),
        ("---\n42\n---\nbody", "single int"),
        ("---\na: [unclosed\n---\nbody", "does not parse"),
        ("---\na: 1\na: 2\n---\nbody", "does not parse"),
        ("---\n\ta: 1\n---\nbody", "does not parse"),
    ],
)
def test_invalid_front_matter(text: str, found: str) -> None:
    """Front matter that is not a YAML mapping is FRONTMATTER_INVALID, saying what was found."""
    with pytest.raises(BatchRejected) as caught:
        set_frontmatter(text, {"a": 3}, index=5)
    assert (caught.value.code, caught.value.index) == ("FRONTMATTER_INVALID", 5)
    assert found in caught.value.message
    with pytest.raises(BatchRejected):
        read_frontmatter(text)


def test_refused_requests() -> None:
    """A key both set and unset, or a value that is not JSON, is INVALID_BATCH."""
    with pytest.raises(BatchRejected) as caught:
        set_frontmatter(PAGE, {"a": 1}, ["a"], index=1)
    assert caught.value.code == "INVALID_BATCH"
    with pytest.raises(BatchRejected):
        set_frontmatter(PAGE, {"a": float("nan")})
    with pytest.raises(BatchRejected):
        set_frontmatter(PAGE, {"a": {1: 2}})


def test_anchor_removed_falls_back_to_a_whole_rewrite() -> None:
    """Unsetting an anchored key its alias needs cannot be done by lines: the block is rewritten and
    still holds the expected data."""
    text = "---\nbase: &b\n  x: 1\nother: *b\n---\nbody\n"
    result = set_frontmatter(text, unset=["base"])
    assert read_frontmatter(result) == {"other": {"x": 1}}
    assert result.endswith("---\nbody\n")


def test_flow_mapping_is_merged() -> None:
    """A one-line flow mapping is merged through ruamel's round trip."""
    result = set_frontmatter("---\n{a: 1, b: 2}\n---\nx", {"c": 3}, ["a"])
    assert read_frontmatter(result) == {"b": 2, "c": 3}
    assert result.endswith("---\nx")


def test_read_frontmatter() -> None:
    """None without a block; JSON-like values, dates as ISO strings."""
    assert read_frontmatter("# no block\n") is None
    assert read_frontmatter(PAGE) == {
        "title": "Redis",
        "tags": ["db", "cache"],
        "date": "2024-01-05",
        "owner": None,
    }
