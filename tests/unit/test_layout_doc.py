"""docs/contributing-layout.md says what the layer map says: its floors are written from
tests/layer_map.py and the modules' docstrings by scripts/gen_layout.py, so a module or folder
added, removed or moved without regenerating fails here, and so does a floor in the doc that is not
the table's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from import_graph import floor_unit, module_name
from layer_map import FLOORS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "contributing-layout.md"
SCRIPT = REPO / "scripts" / "gen_layout.py"


def test_the_layout_is_what_the_layer_map_and_the_modules_say() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def sections(text: str) -> dict[str, tuple[int, set[str]]]:
    """Each folder section of the page (``### name/ (floor N)``; the face as ``__init__``) ->
    its floor and the modules its table names."""
    found: dict[str, tuple[int, set[str]]] = {}
    parts = re.split(r"^### (.+?) \(floor (\d+)\)$", text, flags=re.MULTILINE)
    for title, number, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        name = "__init__" if title == "The face" else title.removesuffix("/")
        rows = set(re.findall(r"^\| `([^`]+)` \|", body.split("<!-- END", 1)[0], re.MULTILINE))
        found[name] = (int(number), rows)
    return found


def in_the_doc(module: str) -> tuple[str, str]:
    """Where the page names ``module``: its section, and its row there (its path inside the
    folder, a package as ``sub/``; the face's two modules by their own names)."""
    unit = floor_unit(module)
    if unit in ("__init__", "__main__"):
        return "__init__", unit
    inside = module.split(".")[2:]
    if not inside:
        return unit, ""  # the folder's own __init__: its section's opening line
    path = "/".join(inside)
    return unit, (f"{path}/" if (REPO / "fsdp_orch" / unit / path).is_dir() else path)


def test_every_folder_and_module_is_on_the_page_at_its_floor() -> None:
    """Checked without the generator: the page's sections against the files and the table."""
    found = sections(PAGE.read_text())
    floors = {floor.units[0]: number for number, floor in enumerate(FLOORS, 1)}
    assert {name: number for name, (number, _) in found.items()} == floors
    expected: dict[str, set[str]] = {name: set() for name in found}
    for path in sorted((REPO / "fsdp_orch").rglob("*.py")):
        module = module_name(path, REPO)
        section, row = in_the_doc(module)
        if row:
            expected.setdefault(section, set()).add(row)
    for name, (_, rows) in found.items():
        assert rows == expected[name], (f"{name}: missing {sorted(expected[name] - rows)}, "
                                        f"gone {sorted(rows - expected[name])}")
    assert len(expected) == len(found), sorted(set(expected) - set(found))


def test_the_check_reads_the_sections_and_rows_as_written() -> None:
    found = sections("### vocab/ (floor 1)\n\n| `states` | x |\n| `times` | y |\n\n"
                     "### The face (floor 2)\n\n| `__init__` | z |\n<!-- END generated -->\n"
                     "| `not_a_row` | after the end |\n")
    assert found == {"vocab": (1, {"states", "times"}), "__init__": (2, {"__init__"})}
    assert in_the_doc("fsdp_orch.backends.over_ssh") == ("backends", "over_ssh/")
    assert in_the_doc("fsdp_orch.backends.over_ssh.connect") == ("backends", "over_ssh/connect")
    assert in_the_doc("fsdp_orch.__main__") == ("__init__", "__main__")
    assert in_the_doc("fsdp_orch.vocab") == ("vocab", "")
