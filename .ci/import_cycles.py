"""Fail when modules inside one of the project's packages import each other in a cycle.

Uses grimp, the graph library under import-linter. Every import counts: module-level,
function-level and ``if TYPE_CHECKING:`` ones alike (a function-level import that only
hides a cycle is still the cycle). Each cycle is printed once, as a chain of
``module:line`` steps; the exit status is 1 if there is any, else 0.

    python .ci/import_cycles.py [PACKAGE ...]   # default: routing catalog simengine
"""

from __future__ import annotations

import sys
from collections import deque
from pathlib import Path

import grimp

PACKAGES = ("routing", "catalog", "simengine")


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Tarjan's algorithm over the direct imports among `modules` (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []

    def edges(module: str) -> list[str]:
        return sorted(graph.find_modules_directly_imported_by(module) & modules)

    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(edges(root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges(nxt))))
                    break
                if nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def shortest_path(graph: grimp.ImportGraph, start: str, goal: str, within: set[str]) -> list[str]:
    """Breadth-first path of direct imports from `start` to `goal` inside `within`."""
    previous = {start: start}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for nxt in sorted(graph.find_modules_directly_imported_by(module) & within):
            if nxt not in previous:
                previous[nxt] = module
                if nxt == goal:
                    path = [goal]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                queue.append(nxt)
    raise AssertionError(f"no path {start} -> {goal} inside its own cycle")


def import_lines(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    return ",".join(str(d["line_number"]) for d in details)


def describe(graph: grimp.ImportGraph, group: list[str]) -> str:
    """One cycle through the group's first module, then every import inside the group
    (any of them may be the one to break), each with its line numbers."""
    members = set(group)
    first = group[0]
    back = min(graph.find_modules_that_directly_import(first) & members)
    cycle = shortest_path(graph, first, back, members) + [first]
    text = "cycle: " + " -> ".join(cycle)
    if len(group) > len(cycle) - 1:
        text += f"\n  all {len(group)} modules of this cycle group: {', '.join(group)}"
    text += "\n  imports inside the group (module:line -> module):"
    for importer in group:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            text += f"\n    {importer}:{import_lines(graph, importer, imported)} -> {imported}"
    return text


def main(argv: list[str]) -> int:
    packages = argv or list(PACKAGES)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    graph = grimp.build_graph(*packages, cache_dir=None)
    found = 0
    for package in packages:
        modules = {package} | graph.find_descendants(package)
        for group in strongly_connected(graph, modules):
            found += 1
            print(f"{package}: {describe(graph, group)}")
    if found:
        print(f"{found} import cycle(s) found")
        return 1
    print(f"no import cycle inside {', '.join(packages)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
