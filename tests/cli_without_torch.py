"""The split install of the README (issue 62) on this machine: the CLI in an environment of its own
without torch, as ``pipx install fsdp-orch`` makes it, beside the ranks' environment (``.venv``,
with torch and fsdp-orch[runtime]).

``torchless_python`` (a session fixture: import it into a test module) builds it in a few seconds,
offline: a new venv of the same interpreter, fsdp-orch copied into its site-packages as the wheel
lays it out (``fsdp_orch/_data/templates`` and ``clusters`` inside), so that the CLI's package root
is a path of that venv and of nothing else, and the CLI's dependencies (fsdp-orch's requirements
without extras, and theirs) linked from ``.venv``'s site-packages through one ``.pth`` file. Torch
is not among them: ``import torch`` fails there, which the fixture checks."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_harness import REPO, Cli

BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"  # .venv's own interpreter
RANKS_PYTHON = Path(sys.prefix) / "bin" / "python"  # .venv's python: torch and fsdp-orch


def cli_requirements(name: str = "fsdp-orch") -> list[str]:
    """The distributions the CLI needs: ``name``'s requirements without extras, and theirs, as
    installed in this environment (markers evaluated here)."""
    from packaging.requirements import Requirement

    seen: dict[str, None] = {}
    todo = [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = req.name.lower().replace("_", "-")
            if key not in seen:
                seen[key] = None
                todo.append(req.name)
    return list(seen)


def top_level_entries(name: str) -> set[str]:
    """What ``name`` put at the top of site-packages (packages, modules, its dist-info), from its
    RECORD; scripts and data outside site-packages are left out."""
    files = metadata.distribution(name).files or []
    return {f.parts[0] for f in files if f.parts and f.parts[0] != ".."}


def linked_env(where: Path, names: list[str]) -> Path:
    """A new venv of .venv's interpreter at ``where`` with the distributions ``names`` (and only
    they: no pip) linked from .venv's site-packages through one ``.pth`` file; its python and its
    site-packages."""
    proc = subprocess.run([str(BASE_PYTHON), "-m", "venv", "--without-pip", str(where)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    python = where / "bin" / "python"
    theirs = Path(subprocess.run(
        [str(RANKS_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    deps = where / "linked"
    deps.mkdir()
    for name in names:
        for entry in top_level_entries(name):
            if (theirs / entry).exists() and not (deps / entry).exists():
                (deps / entry).symlink_to(theirs / entry)
    (site_packages(python) / "linked.pth").write_text(f"{deps}\n")
    return python


def site_packages(python: Path) -> Path:
    return Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())


def build_torchless_env(where: Path) -> Path:
    """The CLI's environment at ``where`` (see the module docstring); its python."""
    names = cli_requirements()
    assert "torch" not in names and "numpy" not in names, names
    python = linked_env(where, names)
    site = site_packages(python)
    # fsdp-orch itself, as its wheel installs it (pyproject's force-include)
    shutil.copytree(REPO / "fsdp_orch", site / "fsdp_orch",
                    ignore=shutil.ignore_patterns("__pycache__", "_data"))
    for data in ("templates", "clusters"):
        shutil.copytree(REPO / data, site / "fsdp_orch" / "_data" / data)
    # compiled as pip compiles what it installs: a first command does not pay for it
    subprocess.run([str(python), "-m", "compileall", "-q", str(site / "fsdp_orch")], check=True,
                   capture_output=True, timeout=300)
    for tool in ("py-spy",):  # fsdp-orch's binary dependency, beside the CLI's python
        found = RANKS_PYTHON.parent / tool
        if found.exists():
            (where / "bin" / tool).symlink_to(found)
    return python


def build_torch_only_env(where: Path) -> Path:
    """An environment with torch (and what it requires) but no fsdp-orch: a training environment
    that `pip install 'fsdp-orch[runtime]'` never reached. Its python."""
    return linked_env(where, ["torch", *cli_requirements("torch")])


@pytest.fixture(scope="session")
def torchless_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI's python without torch (``build_torchless_env``), checked: it imports the CLI and
    fsdp_orch from its own site-packages, and not torch."""
    python = build_torchless_env(tmp_path_factory.mktemp("cli-venv") / "venv")
    env = clean_env()
    no_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True,
                              text=True, env=env, cwd="/")
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr, no_torch
    where = subprocess.run([str(python), "-c", "import fsdp_orch.cli.main, fsdp_orch; "
                            "print(fsdp_orch.__file__)"], capture_output=True, text=True,
                           env=env, cwd="/")
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(python.parent.parent)), where.stdout
    return python


def clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without what would lead a python to another environment's packages."""
    return {k: v for k, v in (base if base is not None else os.environ).items()
            if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


@dataclass
class TorchlessCli(Cli):
    """The CLI run on the torch-less environment's python (``python -m fsdp_orch``)."""

    python: str = ""

    @property
    def env(self) -> dict[str, str]:
        env = clean_env(super().env)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @property
    def venv(self) -> str:
        """The CLI's environment: what must never be named by what runs on a node."""
        return str(Path(self.python).parent.parent)

    def run(self, *args: str, timeout: float = 600, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.prefix, self.python, "-m", "fsdp_orch", *args],
                              cwd=self.cwd, env=env or self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"fsdp-orch {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc


__all__ = ["RANKS_PYTHON", "TorchlessCli", "build_torch_only_env", "build_torchless_env",
           "clean_env", "torchless_python"]
