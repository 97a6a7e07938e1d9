"""The cycle finder of the ``acyclic`` import contract (``tools/acyclic.py``), against brute force."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from tools.acyclic import cycles, strongly_connected

NODES = [f"m{i}" for i in range(7)]

graphs = st.dictionaries(
    st.sampled_from(NODES), st.lists(st.sampled_from(NODES), unique=True, max_size=4), max_size=len(NODES)
).map(lambda g: {n: sorted(g.get(n, [])) for n in NODES})


def _reaches(graph: dict[str, list[str]], start: str) -> set[str]:
    """Every module reached from ``start`` by one import or more."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    return seen


@given(graphs)
def test_each_module_on_a_cycle_is_named_on_a_real_one(graph: dict[str, list[str]]) -> None:
    """Every chain is a cycle of real imports with no module twice, and the modules on the chains are
    exactly those that reach themselves again."""
    found = cycles(graph)
    for chain in found:
        assert chain[0] == chain[-1]
        assert len(set(chain[:-1])) == len(chain) - 1
        assert all(b in graph[a] for a, b in pairwise(chain))
    on_cycles = {n for n in NODES if n in _reaches(graph, n)}
    assert {m for chain in found for m in chain} == on_cycles


@given(graphs)
def test_strongly_connected_sets_are_mutual_reach(graph: dict[str, list[str]]) -> None:
    """Two modules share a set exactly when each reaches the other."""
    reach = {n: _reaches(graph, n) for n in NODES}
    for members in strongly_connected(graph):
        assert all(b in reach[a] for a in members for b in members)
        outside = [n for n in NODES if n not in members]
        assert not any(members[0] in reach[n] and n in reach[members[0]] for n in outside)


def test_a_self_import_and_a_dag() -> None:
    """A module importing itself is a cycle of one; a graph without a way back has none."""
    assert cycles({"a": ["a"], "b": []}) == [["a", "a"]]
    assert cycles({"a": ["b", "c"], "b": ["c"], "c": []}) == []
