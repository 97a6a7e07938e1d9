"""An import-linter contract type: no import cycle between the modules of the given packages.

``lint-imports`` (``make lint``) checks it beside the layer contracts of ``pyproject.toml``, on the same
import graph (grimp's), which holds every import statement of a module: at the top, inside functions (a
lazy import is still a way back), and under ``if TYPE_CHECKING:`` (the graph counts those unless
``exclude_type_checking_imports`` is set, and wikiq leaves it unset: an import for a type is a dependency
too). What it does not hold is the implicit import of a module's parent packages (``import a.b.c`` runs
``a/__init__.py`` first): a package that re-exports its modules would otherwise be a cycle with each.

A broken contract names each cycle as a chain of modules back to where it started, with the line of each
import on the way; one chain per module of a strongly connected set (the shortest through it), so every
module that must give up an import shows up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

import grimp
from importlinter import Contract, ContractCheck, fields, output
from rich.markup import escape

Graph = Mapping[str, Sequence[str]]


def internal_graph(graph: grimp.ImportGraph, packages: Iterable[str]) -> dict[str, list[str]]:
    """The direct imports among the modules of ``packages`` (each package and everything below it), sorted."""
    roots = tuple(packages)

    def inside(module: str) -> bool:
        return any(module == root or module.startswith(root + ".") for root in roots)

    modules = sorted(m for m in graph.modules if inside(m))
    return {m: sorted(i for i in graph.find_modules_directly_imported_by(m) if inside(i)) for m in modules}


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The sets of modules each of which reaches every other by imports (Tarjan's algorithm, iterative),
    those of more than one module or of one importing itself; each sorted, in order of their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = graph[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if work:  # back in the caller: carry the low-link up
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1 or node in graph[node]:
                    found.append(sorted(members))
    return sorted(found)


def shortest_cycle(graph: Graph, start: str, within: set[str]) -> list[str]:
    """The shortest chain of imports from ``start`` back to itself through ``within`` (breadth first),
    ``start`` at both ends; ``start`` must be on a cycle in ``within``."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in graph[node]:
            if target not in within:
                continue
            if target == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                return [start, *reversed(chain[:-1]), start] if node != start else [start, start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise ValueError(f"{start} is on no cycle")


def cycles(graph: Graph) -> list[list[str]]:
    """A cycle through each module that is on one: per strongly connected set, the shortest chain through
    each of its modules, a chain found twice (from another of its modules) given once."""
    chains: list[list[str]] = []
    for members in strongly_connected(graph):
        within = set(members)
        seen: set[frozenset[tuple[str, str]]] = set()
        for module in members:
            chain = shortest_cycle(graph, module, within)
            steps = frozenset(pairwise(chain))
            if steps not in seen:
                seen.add(steps)
                chains.append(chain)
    return chains


class AcyclicContract(Contract):
    """No module of ``packages`` reaches itself again by following imports (see the module)."""

    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        """Kept when the imports among the modules of ``packages`` have no cycle."""
        packages: list[str] = self.packages  # type: ignore[assignment]
        found = cycles(internal_graph(graph, packages))
        lines = {
            (importer, imported): [
                (detail["line_number"], detail["line_contents"])
                for detail in graph.get_import_details(importer=importer, imported=imported)
            ]
            for chain in found
            for importer, imported in pairwise(chain)
        }
        return ContractCheck(kept=not found, metadata={"cycles": found, "lines": lines})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """Each cycle as ``a -> b -> a``, then each import on it with its line."""
        found: list[list[str]] = check.metadata["cycles"]
        lines: dict[tuple[str, str], list[tuple[int, str]]] = check.metadata["lines"]
        output.print_error(f"{len(found)} import cycle{'s' if len(found) != 1 else ''}:")
        output.new_line()
        for chain in found:
            output.print_error(" -> ".join(chain))
            for importer, imported in pairwise(chain):
                for number, text in lines[(importer, imported)] or [(0, f"import {imported}")]:
                    output.print(escape(f"    {importer}:{number}: {text}"))
            output.new_line()
