"""Fail when modules inside one of the project's packages import each other in a cycle,
or packages do: the top-level packages among themselves (routing -> deploy -> routing),
and the sub-packages and modules right below each top-level package among themselves
(routing.api -> routing.compat -> routing.api), a package counting every import of the
modules inside it.

Uses grimp, the graph library under import-linter. Every import counts: module-level,
function-level and ``if TYPE_CHECKING:`` ones alike (a function-level import that only
hides a cycle is still the cycle). Each cycle is printed once, as a chain of
``module:line`` steps (for packages, one import that makes each step); the exit status
is 1 if there is any, else 0.

    python .ci/import_cycles.py [PACKAGE ...]   # default: every top-level package
"""

from __future__ import annotations

import sys
from collections import deque
from pathlib import Path

import grimp

PACKAGES = ("deploy", "routing", "catalog", "httpedge", "simengine")


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Tarjan's algorithm over the direct imports among `modules` (iterative)."""
    return strongly_connected_edges(
        modules, lambda module: sorted(graph.find_modules_directly_imported_by(module) & modules)
    )


def strongly_connected_edges(modules: set[str], edges) -> list[list[str]]:
    """Tarjan's algorithm over the nodes `modules` and `edges(node)` (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []

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


def package_imports(
    graph: grimp.ImportGraph, units: list[str]
) -> dict[str, dict[str, tuple[str, str]]]:
    """Imports between `units` (packages, each with every module inside it, or single
    modules): {importer unit: {imported unit: (one importing module, one imported)}}."""
    unit_of: dict[str, str] = {}
    for unit in units:
        for module in {unit} | graph.find_descendants(unit):
            unit_of[module] = unit
    found: dict[str, dict[str, tuple[str, str]]] = {unit: {} for unit in units}
    for module, unit in sorted(unit_of.items()):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            other = unit_of.get(imported)
            if other is not None and other != unit:
                found[unit].setdefault(other, (module, imported))
    return found


def describe_packages(graph: grimp.ImportGraph, group: list[str], imports) -> str:
    members = set(group)
    text = f"package cycle among {', '.join(group)}"
    text += "\n  imports between them (one each, module:line -> module):"
    for importer in group:
        for other, (module, imported) in sorted(imports[importer].items()):
            if other in members:
                lines = import_lines(graph, module, imported)
                text += f"\n    {importer} -> {other}: {module}:{lines} -> {imported}"
    return text


def package_cycles(graph: grimp.ImportGraph, units: list[str]) -> list[str]:
    imports = package_imports(graph, units)
    groups = strongly_connected_edges(set(units), lambda unit: sorted(imports[unit]))
    return [describe_packages(graph, group, imports) for group in groups]


def main(argv: list[str]) -> int:
    packages = argv or list(PACKAGES)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    graph = grimp.build_graph(*packages, cache_dir=None)
    found = 0
    levels = [("top level", packages)] + [
        (package, sorted(graph.find_children(package))) for package in packages
    ]
    for where, units in levels:
        for text in package_cycles(graph, list(units)):
            found += 1
            print(f"{where}: {text}")
    for package in packages:
        modules = {package} | graph.find_descendants(package)
        for group in strongly_connected(graph, modules):
            found += 1
            print(f"{package}: {describe(graph, group)}")
    if found:
        print(f"{found} import cycle(s) found")
        return 1
    print(f"no import cycle among or inside {', '.join(packages)} (packages and modules)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
