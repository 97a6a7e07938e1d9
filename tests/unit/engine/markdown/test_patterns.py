"""Literal and RE2 replacements: counts, group references, invalid patterns, hostile input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.engine.markdown.patterns import compile_pattern, count_and_replace
from worker.errors import BatchRejected


def test_literal_replace_counts_every_occurrence() -> None:
    """A literal ``old`` is matched exactly, regex characters included; ``new`` is literal too."""
    assert count_and_replace("a.b a.b axb", old="a.b", new=r"\1") == (r"\1 \1 axb", 2)
    assert count_and_replace("nothing", old="x", new="y") == ("nothing", 0)


def test_group_references() -> None:
    """\\1, \\g<name>, \\g<0> and \\0 refer to groups; \\\\ is a backslash, \\n a line feed."""
    text = "alice@example bob@host"
    assert count_and_replace(text, pattern=r"(\w+)@(\w+)", new=r"\2:\1") == ("example:alice host:bob", 2)
    assert count_and_replace(text, pattern=r"(?P<user>\w+)@\w+", new=r"<\g<user>>") == ("<alice> <bob>", 2)
    assert count_and_replace("ab", pattern="b", new=r"[\g<0>\0]\\\n") == ("a[bb]\\\n", 1)
    assert count_and_replace("ab", pattern="(a)(x)?", new=r"\2\1\1") == ("aab", 1)


def test_two_digit_group_and_explicit_form() -> None:
    """\\10 is group 10; \\g<1>0 is group 1 then 0."""
    pattern = "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)"
    assert count_and_replace("abcdefghij", pattern=pattern, new=r"\10\g<1>0") == ("ja0", 1)


def test_unicode_text_and_counts() -> None:
    """Offsets are characters: matches around multi-byte characters replace exactly."""
    assert count_and_replace("café — naïve ☕", pattern=r"\p{L}+", new="w") == ("w — w ☕", 2)
    assert count_and_replace("a€b€", pattern="€", new="EUR") == ("aEURbEUR", 2)


def test_empty_matches_follow_the_global_replace_rule() -> None:
    """An empty match where the previous match ended is skipped; other empty matches count."""
    assert count_and_replace("abc", pattern="x*", new="-") == ("-a-b-c-", 4)
    assert count_and_replace("baac", pattern="a*", new="-") == ("-b-c-", 3)
    assert count_and_replace("a\nb\n", pattern="(?m)^", new="> ") == ("> a\n> b\n> ", 3)
    assert count_and_replace("é€", pattern="x*", new="-") == ("-é-€-", 3)


@pytest.mark.parametrize(
    ("pattern", "new", "reason"),
    [
        ("(unclosed", "x", "missing )"),
        ("a{2,1}", "x", "invalid repetition size: {2,1}"),
        (r"(a)\1", "x", "invalid escape sequence"),
        ("(?=look)", "x", "invalid perl operator"),
        (r"\pL{1000}\pL{1000}\pL{1000}", "x", "pattern too large"),
        ("", "x", "empty"),
        ("(a)", r"\2", "has 1 groups"),
        ("(a)", r"\g<nope>", "lacks"),
        ("(a)", r"\q", "unknown escape"),
        ("(a)", "trailing\\", "unknown escape"),
    ],
)
def test_invalid_pattern_or_template(pattern: str, new: str, reason: str) -> None:
    """RE2's reason (or the template's) is in the PATTERN_INVALID message, with the edit's index."""
    with pytest.raises(BatchRejected) as caught:
        count_and_replace("aaa", pattern=pattern, new=new, index=7)
    assert (caught.value.code, caught.value.index) == ("PATTERN_INVALID", 7)
    assert reason in caught.value.message


def test_old_xor_pattern() -> None:
    """Exactly one of old and pattern, and old non-empty: else INVALID_BATCH."""
    for kwargs in ({}, {"old": "a", "pattern": "a"}, {"old": ""}):
        with pytest.raises(BatchRejected) as caught:
            count_and_replace("a", new="b", **kwargs)  # type: ignore[arg-type]
        assert caught.value.code == "INVALID_BATCH"


def test_catastrophic_backtracking_pattern_is_linear() -> None:
    """``(a+)+$`` against 100 000 ``a`` (and with a final ``b``) completes with the right answer."""
    hostile = "a" * 100_000
    assert count_and_replace(hostile, pattern="(a+)+$", new="X") == ("X", 1)
    assert count_and_replace(hostile + "b", pattern="(a+)+$", new="X") == (hostile + "b", 0)
    assert count_and_replace(hostile, pattern="(a|aa)*c", new="X") == (hostile, 0)
    replaced, count = count_and_replace(hostile, pattern="a", new="b")
    assert (replaced, count) == ("b" * 100_000, 100_000)


def test_compile_pattern_returns_a_reusable_regex() -> None:
    """A compiled pattern searches like RE2."""
    regex = compile_pattern(r"\d+")
    assert regex.search("abc 123").group() == "123"


@given(st.text(max_size=40), st.text(alphabet="ab.", min_size=1, max_size=3))
def test_escaped_literal_pattern_agrees_with_literal_old(text: str, old: str) -> None:
    """A pattern that is an escaped literal finds the same occurrences as ``old``."""
    escaped = "".join("\\" + c if c == "." else c for c in old)
    new = "<>"
    assert count_and_replace(text, pattern=escaped, new=new) == count_and_replace(text, old=old, new=new)
