"""No import cycles in fsdp_orch, between modules or between its packages, lazy imports included,
the package face (``fsdp_orch/__init__.py``) among them; no module imports a folder on a higher
floor than its own (the floors: tests/layer_map.py); no cluster kind imports another; and the
checker, on small packages written for the purpose, finds the cycles and imports it should."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from import_graph import (
    find_cycles,
    floor_numbers,
    floor_unit,
    imports_into_kinds,
    kind_units,
    module_imports,
    off_the_map,
    package_graph,
    unit_among,
    unit_of,
    upward_imports,
)
from layer_map import ALLOWED_UPWARD, FLOORS

from fsdp_orch.backends.registry import KIND_MODULES

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


def test_the_face_is_a_node_and_nothing_imports_it_back() -> None:
    modules = module_imports(REPO)
    assert "fsdp_orch.control.api" in modules["fsdp_orch"]  # lazily, for fsdp_orch.submit
    assert sorted(module for module, targets in modules.items() if "fsdp_orch" in targets) == []


def test_a_circle_through_the_package_face(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": """
            __version__ = "1.0"

            def __getattr__(name):
                from pkg import api
                return getattr(api, name)
            """,
        "pkg/api.py": "from pkg.render import render\n",
        "pkg/render.py": "from pkg import __version__\n",
    })
    modules = module_imports(root, "pkg")
    assert modules == {"pkg": {"pkg.api"}, "pkg.api": {"pkg.render"}, "pkg.render": {"pkg"}}
    assert find_cycles(modules) == [["pkg", "pkg.api", "pkg.render", "pkg"]]


def test_a_module_that_imports_the_face_plainly_depends_on_it(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg\n",
        "pkg/b.py": "import pkg.c\n",  # pkg encloses b: loaded first anyway, no dependency on it
        "pkg/c.py": "",
    })
    assert module_imports(root, "pkg") == {
        "pkg": set(), "pkg.a": {"pkg"}, "pkg.b": {"pkg.c"}, "pkg.c": set()}


FLOOR_UNITS = [floor.units for floor in FLOORS]


def where(module: str, package: str = "fsdp_orch") -> str:
    """``fsdp_orch.record.store`` -> ``fsdp_orch.record.store (record/, floor 9)``."""
    unit = floor_unit(module, package)
    shown = f"{unit}/" if unit not in ("__init__", "__main__") else f"{unit}.py"
    return f"{module} ({shown}, floor {floor_numbers(FLOOR_UNITS).get(unit, '?')})"


def test_every_folder_is_on_one_floor_and_every_floor_is_a_folder() -> None:
    units = [unit for floor in FLOOR_UNITS for unit in floor]
    assert len(units) == len(set(units)), "a unit on two floors"
    unplaced, gone = off_the_map(module_imports(REPO), FLOOR_UNITS)
    assert unplaced == [], f"on no floor (add them to FLOORS in tests/layer_map.py): {unplaced}"
    assert gone == [], f"on a floor but not in fsdp_orch (drop them from FLOORS): {gone}"


def test_no_folder_shares_a_floor_but_the_faces_two_modules() -> None:
    shared = [floor.units for floor in FLOORS if len(floor.units) > 1]
    assert shared == [("__init__", "__main__")]
    assert FLOORS[-1].units == ("__init__", "__main__")


def test_no_module_imports_a_higher_floor() -> None:
    found = upward_imports(module_imports(REPO), FLOOR_UNITS, allowed=ALLOWED_UPWARD)
    assert found == [], (
        "imports up a floor (a module imports its own floor and lower ones; tests/layer_map.py):\n"
        + "\n".join(f"{where(a)} imports {where(b)}" for a, b in found))


def test_the_allowed_upward_imports_are_few_and_all_still_there() -> None:
    assert len(ALLOWED_UPWARD) <= 3, "fix a wrong-way import before allowing another"
    upward = set(upward_imports(module_imports(REPO), FLOOR_UNITS))
    stale = sorted(pair for pair in ALLOWED_UPWARD if pair not in upward)
    assert stale == [], f"no longer an upward import: drop it from ALLOWED_UPWARD: {stale}"


FLOORED_PACKAGE = {
    "pkg/__init__.py": "def __getattr__(name):\n    from pkg.top import api\n    return api\n",
    "pkg/__main__.py": "from pkg.top import api\n",
    "pkg/low/__init__.py": "",
    "pkg/low/words.py": "WORD = 'w'\n",
    "pkg/mid/__init__.py": "",
    "pkg/mid/plan.py": "from pkg.low.words import WORD\nfrom pkg.mid import rules\n",
    "pkg/mid/rules.py": "",
    "pkg/top/__init__.py": "",
    "pkg/top/api.py": "import pkg.mid.plan\n",
}
FLOORED = [("low",), ("mid",), ("top",), ("__init__", "__main__")]


def test_an_upward_import_is_found_lazy_or_not(tmp_path: Path) -> None:
    clean = module_imports(write_package(tmp_path / "clean", FLOORED_PACKAGE), "pkg")
    assert off_the_map(clean, FLOORED, "pkg") == ([], [])
    assert upward_imports(clean, FLOORED, "pkg") == []
    upward = module_imports(write_package(tmp_path / "upward", {
        **FLOORED_PACKAGE,
        "pkg/low/words.py": "def later():\n    from pkg.top.api import x\n",  # lazily
        "pkg/mid/rules.py": "import pkg\n",  # the face, from below it
    }), "pkg")
    assert upward_imports(upward, FLOORED, "pkg") == [
        ("pkg.low.words", "pkg.top"), ("pkg.low.words", "pkg.top.api"), ("pkg.mid.rules", "pkg")]
    # An allowed import excuses the packages around the module it names, nothing else.
    allowed = [("pkg.low.words", "pkg.top.api")]
    assert upward_imports(upward, FLOORED, "pkg", allowed) == [("pkg.mid.rules", "pkg")]


def test_a_folder_on_no_floor_and_a_floor_with_no_folder_are_named(tmp_path: Path) -> None:
    modules = module_imports(write_package(tmp_path, {
        **FLOORED_PACKAGE, "pkg/new/__init__.py": "", "pkg/new/thing.py": "import pkg.top.api\n",
        "pkg/tool.py": ""}), "pkg")
    floors = [*FLOORED, ("gone",)]
    assert off_the_map(modules, floors, "pkg") == (["new", "tool"], ["gone"])
    assert upward_imports(modules, floors, "pkg") == []  # what is on no floor is named above


def between_kinds(modules: dict[str, set[str]], units: list[str]) -> list[tuple[str, str]]:
    """The imports of a kind's module from another kind (``imports_into_kinds`` from a kind)."""
    return [(a, b) for a, b in imports_into_kinds(modules, units)
            if unit_among(a, units) is not None]


def from_outside_kinds(modules: dict[str, set[str]], units: list[str]) -> list[tuple[str, str]]:
    """The imports of a kind's module from a shared helper or the core."""
    return [(a, b) for a, b in imports_into_kinds(modules, units) if unit_among(a, units) is None]


def listed(imports: list[tuple[str, str]]) -> str:
    return "\n".join(f"{a} -> {b}" for a, b in imports)


# The registry's modules; a kind that is a package (slurm/, tpu_vm/, kubernetes/) counts as the
# whole package.
KIND_UNITS = kind_units(KIND_MODULES.values(), "fsdp_orch.backends")


def test_the_kinds_are_the_registry_modules_and_their_packages() -> None:
    assert KIND_UNITS == [
        "fsdp_orch.backends.kubernetes", "fsdp_orch.backends.local", "fsdp_orch.backends.slurm",
        "fsdp_orch.backends.ssh", "fsdp_orch.backends.tpu_vm"]


def test_no_cluster_kind_imports_another() -> None:
    crossing = between_kinds(module_imports(REPO), KIND_UNITS)
    assert crossing == [], ("a kind imports another (move what they share to a helper):\n"
                            + listed(crossing))


def test_nothing_but_the_registry_reaches_a_kind() -> None:
    """The shared helpers and the core import no kind (the registry imports them by module name):
    a kind reached through a helper would be one kind importing another."""
    found = from_outside_kinds(module_imports(REPO), KIND_UNITS)
    assert found == [], listed(found)


KINDS_PACKAGE = {
    "pkg/__init__.py": "",
    "pkg/core.py": "from pkg.backends.base import Kind\n",
    "pkg/backends/__init__.py": "",
    "pkg/backends/base.py": "class Kind: ...\n",
    "pkg/backends/shared.py": "from pkg.backends.base import Kind\n",
    "pkg/backends/one.py": "from pkg.backends.shared import Kind\nKIND = Kind()\n",
    "pkg/backends/two/__init__.py": "",
    "pkg/backends/two/kind.py": "from pkg.backends.two import helper\n"
                                "from pkg.backends import shared\n",
    "pkg/backends/two/helper.py": "import pkg.backends.base\n",
    "pkg/backends/three.py": "",  # not registered: a helper, whatever its name
}


def test_a_kind_that_imports_another_kind_is_found(tmp_path: Path) -> None:
    units = kind_units(["pkg.backends.one", "pkg.backends.two.kind"], "pkg.backends")
    assert units == ["pkg.backends.one", "pkg.backends.two"]
    clean = module_imports(write_package(tmp_path / "clean", KINDS_PACKAGE), "pkg")
    assert imports_into_kinds(clean, units) == []
    crossing = module_imports(write_package(tmp_path / "crossing", {
        **KINDS_PACKAGE,
        # a module of the package kind, lazily: still the kind importing another
        "pkg/backends/two/helper.py": "def later():\n    from pkg.backends.one import KIND\n",
        "pkg/backends/three.py": "import pkg.backends.two.kind\n",
        "pkg/core.py": "from pkg.backends import one\n",
    }), "pkg")
    assert between_kinds(crossing, units) == [("pkg.backends.two.helper", "pkg.backends.one")]
    assert from_outside_kinds(crossing, units) == [
        ("pkg.backends.three", "pkg.backends.two"),
        ("pkg.backends.three", "pkg.backends.two.kind"),
        ("pkg.core", "pkg.backends.one"),
    ]


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
        "pkg.top": {"pkg", "pkg.sub"},  # import pkg: the face, a module like any other
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
