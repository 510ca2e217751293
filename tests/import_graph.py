"""The import graph of a package, read from its source with ``ast``, the circles in it, and the
imports that go up its floors."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """``root/fsdp_orch/a/b.py`` -> ``fsdp_orch.a.b``; an ``__init__.py`` names its package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _ImportCollector(ast.NodeVisitor):
    """Every imported name in a file (as written, relative ones resolved), at any depth, except
    under ``if TYPE_CHECKING:``; ``from x import y`` is kept as (``x``, [``y``])."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.here = module.split(".") if is_package else module.split(".")[:-1]
        self.names: set[str] = set()
        self.from_imports: list[tuple[str, list[str]]] = []

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base_parts = self.here[: len(self.here) - (node.level - 1)]
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        self.from_imports.append((base, [alias.name for alias in node.names if alias.name != "*"]))


def module_imports(root: Path, package: str = "fsdp_orch") -> dict[str, set[str]]:
    """Each module of ``root/package`` -> the modules of the package it imports, lazily or not.

    ``from p.x import y`` counts as importing ``p.x.y`` when that is a module, else ``p.x``;
    importing ``p.a.b`` also imports the package ``p.a``, except where ``p.a`` encloses the
    importing module (Python loads a package before its modules anyway). The root package (its face,
    ``p/__init__.py``) is a module like any other: ``import p`` or ``from p import __version__``
    depends on it, so a face that imports a module importing it back is a circle. A module's import
    of itself and names that are not modules of the package are left out."""
    paths = {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    shortest = package.count(".") + 1
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        collector = _ImportCollector(module, is_package=path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        names = set(collector.names)
        for base, imported in collector.from_imports:
            submodules = {f"{base}.{name}" for name in imported} & paths.keys()
            names |= submodules
            if len(submodules) < len(imported) or not imported:
                names.add(base)
        targets: set[str] = set()
        for name in names:
            parts = name.split(".")
            if len(parts) >= shortest:
                targets.add(name)
            targets.update(parent for n in range(shortest, len(parts))
                           if not module.startswith(f"{(parent := '.'.join(parts[:n]))}."))
        graph[module] = {target for target in targets if target in paths and target != module}
    return graph


def unit_of(module: str, package: str = "fsdp_orch") -> str:
    """``fsdp_orch.sub.mod...`` -> ``fsdp_orch.sub``; a top-level module such as
    ``fsdp_orch.launch.plan`` is its own unit."""
    if module == package:
        return package
    return f"{package}.{module.removeprefix(f'{package}.').split('.')[0]}"


def floor_unit(module: str, package: str = "fsdp_orch") -> str:
    """What a floor holds ``module`` by: its folder (``p.a.b.c`` -> ``a``), or a top-level module's
    own name (``p.__main__`` -> ``__main__``; the face, ``p`` itself, -> ``__init__``)."""
    if module == package:
        return "__init__"
    return module.removeprefix(f"{package}.").split(".")[0]


def floor_numbers(floors: Sequence[Iterable[str]]) -> dict[str, int]:
    """Each unit of ``floors`` (lowest first) -> its floor, counted from 1."""
    return {unit: number for number, units in enumerate(floors, 1) for unit in units}


def off_the_map(modules: Iterable[str], floors: Sequence[Iterable[str]],
                package: str = "fsdp_orch") -> tuple[list[str], list[str]]:
    """The units that hold ``modules`` but are on no floor, and the units on a floor that hold
    none of them (a folder gone or renamed)."""
    present = {floor_unit(module, package) for module in modules}
    placed = set(floor_numbers(floors))
    return sorted(present - placed), sorted(placed - present)


def upward_imports(modules: dict[str, set[str]], floors: Sequence[Iterable[str]],
                   package: str = "fsdp_orch",
                   allowed: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """Every import of a module on a higher floor than the importer's, as (importer, imported),
    except those ``allowed``: an allowed (importer, imported) also excuses the importer's import of
    the packages around ``imported`` (Python loads them first). Units on no floor are left out
    (``off_the_map`` names them)."""
    number = floor_numbers(floors)
    excused = {(importer, imported.rsplit(".", n)[0]) for importer, imported in allowed
               for n in range(imported.count(".") - package.count("."))}
    return sorted((module, target) for module, targets in modules.items() for target in targets
                  if (module, target) not in excused
                  and number.get(floor_unit(target, package), 0)
                  > number.get(floor_unit(module, package), len(number) + 1))


def package_graph(modules: dict[str, set[str]], package: str = "fsdp_orch") -> dict[str, set[str]]:
    """The module graph seen unit by unit, with the edges inside a unit left out."""
    graph: dict[str, set[str]] = {}
    for module, targets in modules.items():
        unit = unit_of(module, package)
        edges = graph.setdefault(unit, set())
        edges.update(unit_of(target, package) for target in targets)
        edges.discard(unit)
    return graph


def kind_units(kind_modules: Iterable[str], backends: str) -> list[str]:
    """The cluster kinds as units, from the modules that hold their ``KIND`` (the registry's): a
    module directly under ``backends`` is its own unit; one inside a package there stands for the
    whole package (``p.backends.slurm.kind`` -> ``p.backends.slurm``)."""
    return sorted({f"{backends}.{module.removeprefix(f'{backends}.').split('.')[0]}"
                   for module in kind_modules})


def unit_among(module: str, units: Iterable[str]) -> str | None:
    """The unit of ``units`` that ``module`` is or is inside; None when none."""
    return next((unit for unit in units if module == unit or module.startswith(f"{unit}.")), None)


def imports_into_kinds(modules: dict[str, set[str]], units: list[str]) -> list[tuple[str, str]]:
    """Every import of a kind's module from a module outside that kind, as (importer, imported)."""
    return sorted((module, target) for module, targets in modules.items() for target in targets
                  if (unit := unit_among(target, units)) is not None
                  and unit != unit_among(module, units))


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, without recursion; nodes and edges are taken in sorted order."""
    nodes = sorted(set(graph).union(*graph.values()))
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = lowlink[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """The shortest path from the component's first node back to it, staying inside."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in sorted(graph.get(node, set()) & members):
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    raise AssertionError(f"{component} is not strongly connected")


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle ``[a, b, ..., a]`` for every strongly connected component of two or more nodes."""
    return sorted(_shortest_cycle(graph, component)
                  for component in strongly_connected_components(graph) if len(component) > 1)
