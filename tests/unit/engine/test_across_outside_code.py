"""replace_across with outside_code, against an independent reference: the code of every page (fenced and
indented blocks, inline spans, as the regex scanner of the link-rewrite properties finds it) and the
destinations of its links (target and #fragment) are left byte for byte, and the rest is exactly a plain
replace of the text with those masked out."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from tests.unit.engine.markdown.test_rewrite_properties import MDLINK, WIKILINK, WORDS, code_and_links, wikis
from worker.engine import DictHead, preflight
from worker.engine.markdown.prose import prose_spans, replace_in_prose
from worker.errors import BatchRejected
from worker.schema.edits import Batch, Edit

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)


def masked(text: str) -> str:
    """``text`` with every code piece the reference scanner finds, then every link's target and #fragment
    in what is left, replaced by NULs of its length."""
    out = text
    position = 0
    for piece in code_and_links(text)[0]:
        start = out.index(piece, position)
        out = out[:start] + "\0" * len(piece) + out[start + len(piece) :]
        position = start + len(piece)
    destinations = [(m.start(2), m.end(3) if m[3] else m.end(2)) for m in WIKILINK.finditer(out)]
    for m in MDLINK.finditer(out):
        first = 3 if m[3] is not None else 5
        destinations.append((m.start(first), m.end(first + 1) if m[first + 1] else m.end(first)))
    for start, end in destinations:
        out = out[:start] + "\0" * (end - start) + out[end:]
    return out


def replaced_outside(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new`` in each run of characters ``masked`` leaves as they are."""
    hidden = masked(text)
    out = []
    for run in re.finditer(r"\0+|[^\0]+", hidden):
        piece = text[run.start() : run.end()]
        out.append(piece if run[0][0] == "\0" else piece.replace(old, new))
    return "".join(out)


@settings(max_examples=150, deadline=None)
@given(wikis(), st.sampled_from(["[[", "label", "#Head", *WORDS[:4]]), st.sampled_from(["", "Z", "[[x]]"]))
def test_outside_code_changes_prose_only(wiki: tuple[set[str], dict[str, str]], old: str, new: str) -> None:
    """Code pieces keep their bytes; under the prefix the prose becomes the masked text's plain replace,
    with the counts applied says; nothing else changes."""
    _, texts = wiki
    head = DictHead({path: text.encode() for path, text in texts.items()})
    expected = {path: masked(text).count(old) for path, text in texts.items() if path.startswith("wiki/")}
    edit = EDIT.validate_python(
        {"op": "replace_across", "prefix": "wiki/", "old": old, "new": new, "outside_code": True}
    )
    if sum(expected.values()) == 0:
        with pytest.raises(BatchRejected) as info:
            preflight(head, [edit])
        assert info.value.code == "OLD_NOT_FOUND"
        return
    plan = preflight(head, [edit])
    counts = {a.path: a.count for a in plan.applied}
    assert counts == {path: n for path, n in expected.items() if n}
    for path, text in texts.items():
        file = plan.changes.get(path)
        after = text if file is None or file.data is None else file.data.decode()
        assert code_and_links(after)[0] == code_and_links(text)[0], path
        if path.startswith("wiki/"):
            assert after == replaced_outside(text, old, new), path
        else:
            assert after == text, path  # outside the prefix


def test_prose_leaves_out_code_html_and_front_matter() -> None:
    """Prose is paragraphs and headings minus code spans; code blocks, HTML blocks and front matter are
    not prose, and replacing there changes nothing."""
    text = "---\nt: [[a]]\n---\n# [[a|a]]\n\n```\n[[a]]\n```\n\n<div>\n[[a]]\n</div>\n\nx `[[a]]` [[b|a]]\n"
    prose = "".join(text[s:e] for s, e in prose_spans(text))
    assert prose.count("a") == 2  # the two labels
    new, count = replace_in_prose(text, "a", "z")
    assert count == 2
    assert new == text.replace("# [[a|a]]", "# [[a|z]]").replace("[[b|a]]", "[[b|z]]")


def test_link_targets_are_not_prose_and_labels_and_titles_are() -> None:
    """A typo fixed in prose leaves every link working: targets and fragments keep their bytes, the
    visible label and the title change."""
    text = '[the recieve flow](recieve.md#recieve "recieve") [[recieve#Recieve|recieve]] [[recieve]]\n'
    new, count = replace_in_prose(text, "recieve", "receive")
    assert count == 3
    assert new == '[the receive flow](recieve.md#recieve "receive") [[recieve#Recieve|receive]] [[recieve]]\n'


def test_outside_code_takes_old_only() -> None:
    """outside_code with a pattern is refused when the batch is read (INVALID_BATCH at the edge)."""
    body: dict[str, Any] = {"op": "replace_across", "prefix": "", "pattern": "a", "new": "b"}
    with pytest.raises(ValidationError, match="outside_code takes 'old'"):
        Batch.model_validate({"message": "m", "edits": [body | {"outside_code": True}]})
