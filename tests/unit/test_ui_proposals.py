"""The review page's decisions that a browser cannot cheaply reach (``api.server.ui.proposals``): which
files are folded as changed only by link rewriting when no check says so, how a proposal's diff lines are
classed (the buttons offered are the service's own answer: ``Proposals.permissions``)."""

from __future__ import annotations

import pytest

from api.server.ui.proposals import diff_lines, link_only, links_only_diff
from worker.schema.answers import Checks, FileCheck, FileDiff


def _diff(*body: str, path: str = "wiki/p.md") -> str:
    return "\n".join([f"--- a/{path}", f"+++ b/{path}", *body]) + "\n"


RELINKED = _diff(
    "@@ -1,5 +1,5 @@",
    " # P",
    "-See [[alpha]] and [[alpha#Intro|the intro]].",
    "+See [[beta]] and [[beta#Intro|the intro]].",
    " ",
    '-Also [the page](../alpha.md#top "Alpha") here.',
    '+Also [the page](../beta.md#top "Alpha") here.',
    "@@ -9,2 +9,2 @@",
    "-[ref]: alpha.md",
    "+[ref]: sub/beta.md",
    " end",
)


@pytest.mark.parametrize(
    ("diff", "expected"),
    [
        (RELINKED, True),
        (_diff("@@ -1 +1 @@", "-See [[alpha]].", "+See [[alpha]] now."), False),  # text beside the link
        (_diff("@@ -1 +1 @@", "-See [[alpha]].", "+Read [[beta]]."), False),
        (_diff("@@ -1 +1 @@", "-[the page](alpha.md)", "+[a page](beta.md)"), False),  # the label changed
        (_diff("@@ -1,2 +1 @@", "-See [[alpha]].", "-more", "+See [[beta]]."), False),  # a line removed
        (_diff("@@ -1 +1,2 @@", "-See [[alpha]].", "+See [[beta]].", "+more"), False),  # a line added
        (_diff("@@ -1 +1 @@", "-plain", "+plain "), False),
        ("--- /dev/null\n+++ b/wiki/p.md\n@@ -0,0 +1 @@\n+[[beta]]\n", False),  # created
        ("rename from wiki/a.md\nrename to wiki/b.md\n", False),  # a move, no line changed
        ("", False),
        (_diff("@@ -1 +1 @@", "-See [[alpha]].", "\\ No newline at end of file", "+See [[beta]]."), True),
    ],
)
def test_a_diff_is_links_only_when_every_changed_line_differs_only_in_link_destinations(
    diff: str, expected: bool
) -> None:
    assert links_only_diff(diff) is expected


def _check(path: str, named: bool) -> FileCheck:
    return FileCheck(path=path, change="modified", added=1, removed=1, links=1, named=named)


def test_the_checks_decide_before_the_diff() -> None:
    relinked = FileDiff(path="wiki/p.md", diff=RELINKED)
    reworded = FileDiff(path="wiki/q.md", diff=_diff("@@ -1 +1 @@", "-a", "+b", path="wiki/q.md"))
    checks = Checks(links=None, code_changed=None, unnamed=1, files=[_check("wiki/q.md", False)])
    named = Checks(links=None, code_changed=None, unnamed=0, files=[_check("wiki/p.md", True)])
    assert link_only(reworded, checks)  # no edit named it: the dry run says only its links changed
    assert not link_only(relinked, named)  # an edit named it: shown, however its diff looks
    assert link_only(relinked, None)  # no checks: its diff decides
    assert link_only(relinked, checks)  # checks that do not list it: its diff decides
    assert not link_only(relinked.model_copy(update={"truncated": True}), None)


def test_a_removed_rule_line_is_a_deletion_not_a_header() -> None:
    shown = diff_lines(_diff("@@ -1,2 +1 @@", " # P", "----", "\\ No newline at end of file"))
    assert [cls for cls, _ in shown.lines] == ["meta-line", "meta-line", "hunk", "ctx", "del", "meta-line"]
    assert not shown.truncated
