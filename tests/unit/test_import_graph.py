"""No import cycles in fsdp_orch, between modules or between its packages, lazy imports included;
and the checker, on small packages written for the purpose, finds the cycles it should."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from import_graph import find_cycles, module_imports, package_graph, unit_of

REPO = Path(__file__).resolve().parents[2]


def described(cycles: list[list[str]]) -> str:
    return "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def write_package(root: Path, files: dict[str, str]) -> Path:
    """Write ``{"pkg/a.py": source, ...}`` under ``root``; return ``root``."""
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def test_no_module_imports_itself_in_a_circle() -> None:
    cycles = find_cycles(module_imports(REPO))
    assert cycles == [], described(cycles)


def test_no_two_packages_import_each_other() -> None:
    cycles = find_cycles(package_graph(module_imports(REPO)))
    assert cycles == [], described(cycles)


def test_a_lazy_import_inside_a_function_closes_a_circle(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg.b\n",
        "pkg/b.py": """
            def later() -> None:
                from pkg.a import thing
            """,
    })
    assert find_cycles(module_imports(root, "pkg")) == [["pkg.a", "pkg.b", "pkg.a"]]


@pytest.mark.parametrize("guard", [
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:",
    "import typing\nif typing.TYPE_CHECKING:",
    "TYPE_CHECKING = False\nif TYPE_CHECKING:",
])
def test_an_import_only_for_type_checking_is_no_dependency(tmp_path: Path, guard: str) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import Thing\n",
        "pkg/b.py": f"{guard}\n    from pkg.a import Other\nelse:\n    import pkg.c\n",
        "pkg/c.py": "",
    })
    modules = module_imports(root, "pkg")
    assert modules["pkg.b"] == {"pkg.c"}
    assert find_cycles(modules) == []


def test_relative_imports_resolve(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "from . import top\n",
        "pkg/top.py": "import pkg\nfrom pkg import sub\n",
        "pkg/sub/__init__.py": "from .x import name\n",
        "pkg/sub/x.py": "from . import y\nfrom .y import name\n",
        "pkg/sub/y.py": "",
        "pkg/other/__init__.py": "",
        "pkg/other/z.py": "from ..sub import y\nfrom .. import top\nfrom ..sub.x import name\n",
    })
    assert module_imports(root, "pkg") == {
        "pkg": {"pkg.top"},
        "pkg.top": {"pkg.sub"},
        "pkg.sub": {"pkg.sub.x"},
        "pkg.sub.x": {"pkg.sub.y"},  # pkg.sub encloses it: loaded first anyway, no dependency
        "pkg.sub.y": set(),
        "pkg.other": set(),
        "pkg.other.z": {"pkg.sub", "pkg.sub.x", "pkg.sub.y", "pkg.top"},
    }


def test_two_packages_in_a_circle_without_a_module_circle(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/plan.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/one.py": "from pkg.b.two import thing\nimport pkg.plan\n",
        "pkg/a/four.py": "",
        "pkg/b/__init__.py": "",
        "pkg/b/two.py": "",
        "pkg/b/three.py": "from pkg.a import four\n",
    })
    modules = module_imports(root, "pkg")
    assert find_cycles(modules) == []
    assert package_graph(modules, "pkg") == {
        "pkg": set(), "pkg.plan": set(), "pkg.a": {"pkg.b", "pkg.plan"}, "pkg.b": {"pkg.a"},
    }
    assert find_cycles(package_graph(modules, "pkg")) == [["pkg.a", "pkg.b", "pkg.a"]]


@pytest.mark.parametrize(("module", "unit"), [
    ("fsdp_orch.launch.plan", "fsdp_orch.launch"),
    ("fsdp_orch.__main__", "fsdp_orch.__main__"),
    ("fsdp_orch.backends", "fsdp_orch.backends"),
    ("fsdp_orch.backends.slurm.kind", "fsdp_orch.backends"),
    ("fsdp_orch.bootstrap.site.sitecustomize", "fsdp_orch.bootstrap"),
])
def test_unit_of(module: str, unit: str) -> None:
    assert unit_of(module) == unit


def test_a_cycle_is_a_path_back_to_where_it_started() -> None:
    graph = {"c": {"a"}, "a": {"b"}, "b": {"c", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["d", "e", "d"]]
