"""``places.imports``: a module is imported as you only from folders no one else can add to, and
only from files no one else can change (the rule ``fit`` applies to its model factory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_orch.places.imports import import_problem


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "train.py").write_text("def model_for_fit(): ...\n")
    (folder / "train.py").chmod(0o644)
    return folder


def test_a_module_in_a_folder_of_yours_may_be_imported(job_dir: Path) -> None:
    assert import_problem("train", str(job_dir)) is None


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775 | 0o002])
def test_a_folder_others_can_add_to_is_refused_sticky_or_not(job_dir: Path, mode: int) -> None:
    job_dir.chmod(mode)
    why = import_problem("train", str(job_dir))
    assert why is not None and f"{job_dir} can be written by others" in why
    assert f"mode {mode:04o}" in why and "imported in place of yours" in why


def test_a_module_file_others_can_write_is_refused(job_dir: Path) -> None:
    (job_dir / "train.py").chmod(0o666)
    why = import_problem("train", str(job_dir))
    assert why is not None and f"{job_dir}/train.py can be written by others" in why


def test_a_package_folder_others_can_add_to_is_refused(job_dir: Path) -> None:
    package = job_dir / "models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "small.py").write_text("def make(): ...\n")
    assert import_problem("models.small", str(job_dir)) is None
    package.chmod(0o777)
    why = import_problem("models.small", str(job_dir))
    assert why is not None and f"{package} can be written by others" in why


def test_a_module_found_nowhere_is_left_to_the_import_to_name(job_dir: Path) -> None:
    assert import_problem("no_such_module_here", str(job_dir)) is None
