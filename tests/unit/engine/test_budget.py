"""Every op family and every parser stays inside one budget, whatever the page (generated adversarial input).

A small budget (a tenth of a second of CPU, a few MB scanned) makes each case quick; the assertions say
that a batch either passes or is refused with a contract code (``BATCH_TOO_COSTLY`` when the budget ran
out), never another exception, and that the CPU it took and the memory it held stay within a few times
that budget — generous bounds that only a blow-up crosses.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from worker.engine import DictHead, preflight, review
from worker.engine.budget import Budget, OverBudget, active
from worker.engine.markdown import outline, read_frontmatter
from worker.engine.paths import DEFAULT_POLICY
from worker.errors import CODES, BatchRejected
from worker.schema.edits import Costs, Edit, Limits

EDIT: TypeAdapter[Edit] = TypeAdapter(Edit)
# each cap that bounds one call that cannot be stopped halfway is small too (a YAML load, a parse, a search)
COSTS = Costs(
    cpu_seconds=0.1, scan_bytes=4 * 1024 * 1024, regex_work=2_000_000, parse_lines=5_000, yaml_bytes=8 * 1024
)
LIMITS = Limits(costs=COSTS)
CPU_BOUND = (
    3.0  # seconds one case may take (under tracemalloc): thirty times the budget, a tenth of a blow-up
)
MEMORY_BOUND = 96 * 1024 * 1024


def alias_bomb(levels: int) -> str:
    lines = ["---", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]" for n in range(1, levels + 1)]
    return "\n".join([*lines, "---", "# Page", ""])


SHAPES: dict[str, Any] = {
    "alias bomb": lambda n: alias_bomb(3 + n % 6),
    "many headings": lambda n: "# h\n## s\n" * (500 * n),
    "deep headings": lambda n: "".join("#" * (1 + i % 6) + f" h{i}\n" for i in range(800 * n)),
    "many links": lambda n: "[[a]] [b](b.md) " * (2000 * n) + "\n",
    "a and b": lambda n: "ab" * (20_000 * n) + "\n",
    "only a": lambda n: "a" * (40_000 * n) + "\n",
    "short lines": lambda n: "x\n" * (3000 * n),
    "nested quotes": lambda n: ("> " * 40 + "x\n") * (100 * n),
    "big front matter": lambda n: (
        "---\n" + "".join(f"k{i}: [a, {{b: c}}]\n" for i in range(900 * n)) + "---\n"
    ),
}


def edits_for(op: str, version: str) -> list[dict[str, Any]]:
    """One batch of ``op`` on ``wiki/p.md`` (whose version is ``version``)."""
    page = {"path": "wiki/p.md", "expected_version": version}
    return {
        "replace": [{"op": "replace", **page, "old": "a", "new": "aa", "replace_all": True}],
        "across literal": [{"op": "replace_across", "prefix": "wiki/", "old": "a", "new": "b"}],
        "across pattern": [
            {"op": "replace_across", "prefix": "wiki/", "pattern": "a[ab]{300}c|a.*b|a", "new": "c"}
        ],
        "frontmatter": [{"op": "frontmatter", **page, "set": {"k": "v"}}],
        "section": [{"op": "append_section", **page, "heading": "h [2]", "content": "more\n"}],
        "rename": [{"op": "rename", **page, "new_path": "wiki/q.md", "rewrite_links": True}],
        "append": [{"op": "append", **page, "content": "[[p]]\n"}],
    }[op]


OPS = ["replace", "across literal", "across pattern", "frontmatter", "section", "rename", "append"]


def bounded(work: Any) -> Any:
    """Run ``work``; assert its CPU time and peak traced memory stay under the bounds; its result."""
    tracemalloc.start()
    started = time.thread_time()
    try:
        return work()
    finally:
        spent = time.thread_time() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert spent < CPU_BOUND, f"took {spent:.2f} s of CPU"
        assert peak < MEMORY_BOUND, f"held {peak / 2**20:.0f} MB"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(sorted(SHAPES)), size=st.integers(1, 8), op=st.sampled_from(OPS))
def test_every_op_on_any_page_stays_in_its_budget(shape: str, size: int, op: str) -> None:
    """Any op family on any adversarial page: a plan or a contract refusal, within bounded CPU and memory;
    a dry run's review of an accepted plan is bounded the same way."""
    text = SHAPES[shape](size).encode()
    files = {"index.md": b"# Index\n[[p]]\n", "wiki/p.md": text, "wiki/other.md": text[:50_000]}
    head = DictHead(files)
    edits = [EDIT.validate_python(e) for e in edits_for(op, head.version("wiki/p.md") or "")]

    def check() -> Any:
        try:
            plan = preflight(head, edits, limits=LIMITS)
        except BatchRejected as refusal:
            assert refusal.code in CODES
            return refusal
        return review(head, plan, DEFAULT_POLICY)

    bounded(check)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reading_any_page_stays_in_its_budget(shape: str) -> None:
    """The read-side parsers (outline, front matter) on the largest adversarial pages: an answer or
    ``OverBudget``, within bounded CPU and memory."""
    text = SHAPES[shape](8)

    def read() -> None:
        with active(Budget(COSTS)):
            for parse in (outline, read_frontmatter):
                try:
                    parse(text)
                except OverBudget:
                    pass
                except BatchRejected as refusal:  # front matter that is not a mapping
                    assert refusal.code == "FRONTMATTER_INVALID"

    bounded(read)


def test_an_alias_bomb_is_refused_by_its_node_cap_not_its_cpu() -> None:
    """Seven levels of aliases: refused as soon as the expansion passes the node cap."""
    with active(Budget(Costs())), pytest.raises(OverBudget) as info:
        read_frontmatter(alias_bomb(7))
    assert "alias" in info.value.message
