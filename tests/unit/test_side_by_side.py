"""How pytest-xdist workers are handed the suite (tests/side_by_side.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from side_by_side import LONGEST_FILES, pytest_collection_modifyitems, unit_of

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_longest_file_exists_so_a_rename_does_not_drop_it_to_the_end() -> None:
    assert [f for f in LONGEST_FILES if not (ROOT / f).is_file()] == []


def test_services_first_then_the_longest_files_longest_first_then_the_rest_as_collected() -> None:
    collected = ["tests/unit/test_a.py::t1", "tests/xla/test_xla_fsdp.py::x",
                 "tests/ssh/test_h.py::s",
                 "tests/integration/test_unchanged_scripts.py::u", "tests/unit/test_b.py::t2",
                 "tests/slurm/test_c.py::c", "tests/integration/test_supervisor_faults.py::f"]
    items = [SimpleNamespace(nodeid=n) for n in collected]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/slurm/test_c.py::c", "tests/ssh/test_h.py::s",
        "tests/integration/test_unchanged_scripts.py::u",
        "tests/integration/test_supervisor_faults.py::f", "tests/xla/test_xla_fsdp.py::x",
        "tests/unit/test_a.py::t1", "tests/unit/test_b.py::t2"]


def test_a_shared_service_is_one_unit_and_any_other_test_its_file() -> None:
    assert unit_of("tests/slurm/test_c.py::c[1]") == unit_of("tests/slurm/test_d.py::d") == "slurm"
    assert unit_of("tests/unit/test_a.py::t1") == "tests/unit/test_a.py"
