"""Every relative link of the README, CONTRIBUTING, CHANGELOG and docs/ names a file of the repository and,
with a ``#fragment``, a heading of that file (GitHub's anchor rule): a clone reads without dead ends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "HISTORY.md"]
PAGES += sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)
CODE = re.compile(r"`[^`\n]*`")  # examples of links inside inline code are not links


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page``: lower case, punctuation dropped, spaces to -."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s) and mailto links leave the repository on purpose
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_anchor = bool(fragment) and linked.suffix == ".md" and fragment not in anchors(linked)
        if not linked.exists() or missing_anchor:
            broken.append(target)
    assert broken == []


def test_the_anchor_rule_reads_headings() -> None:
    """The slugs follow GitHub's rule on this repository's own headings."""
    assert "tokens-rights-and-identities" in anchors(ROOT / "docs" / "contract.md")
    assert "how-links-resolve" in anchors(ROOT / "docs" / "agents.md")
