"""Installing fsdp-orch never touches the user's torch (issue 44). The wheel is built from this
checkout and installed into fresh environments:

- one that already has torch 2.9.0 (the oldest the ``runtime`` extra allows), pinned by the user's
  constraint: the install succeeds, torch stays 2.9.0, and the demo trains on it through the local
  kind (the CLI's python is the ranks');
- one with no torch at all, on Python 3.10 and 3.12: ``--version``, ``-V``, ``render``,
  ``status`` and ``doctor`` work, and ``doctor`` says what a machine that runs ranks needs.

The torch 2.9.0 is ``.venv-xla``'s (scripts/setup-xla.sh): its site-packages are hard-linked into
the fresh environment (symlinked where the filesystem differs), less fsdp-orch's own editable
install, so nothing is downloaded. The other dependencies come from pip's configured sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import REPO, copy_demo, demo_args
from sweep import cases
from xla_env import XLA_VENV, xla_python  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.xla]

BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
NOT_LINKED = ("fsdp_orch", "_editable_impl_fsdp_orch", "pip", "setuptools", "_distutils_hack",
              "distutils-precedence.pth", "pkg_resources")


def run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FSDP_ORCH_", "PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run([str(a) for a in argv], cwd=cwd, env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--quiet", "-w", out, REPO], cwd=out)
    assert proc.returncode == 0, proc.stderr
    [built] = out.glob("fsdp_orch-*.whl")
    return built


def fresh_env(where: Path, base: Path | str = BASE_PYTHON) -> Path:
    proc = run([base, "-m", "venv", where], cwd=where.parent)
    assert proc.returncode == 0, proc.stderr
    return where / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
              cwd=python.parent)
    return Path(out.stdout.strip())


def torch_of(python: Path, cwd: Path) -> str:
    proc = run([python, "-c", "import torch; print(torch.__version__)"], cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_wheel_installs_beside_a_pinned_older_torch_and_a_job_runs_on_it(
        tmp_path: Path, wheel: Path, xla_python: Path) -> None:  # noqa: F811
    python = fresh_env(tmp_path / "env")
    theirs = site_packages(XLA_VENV / "bin" / "python")
    mine = site_packages(python)
    for entry in theirs.iterdir():
        if entry.name.startswith(NOT_LINKED):
            continue
        linked = run(["cp", "-al", entry, mine], cwd=tmp_path)
        if linked.returncode != 0:  # another filesystem
            assert run(["cp", "-as", entry, mine], cwd=tmp_path).returncode == 0
    before = torch_of(python, tmp_path)
    assert before.startswith("2.9.0"), before
    pin = tmp_path / "constraints.txt"
    pin.write_text("torch==2.9.0\n")
    report = tmp_path / "report.json"
    proc = run([python, "-m", "pip", "install", "--quiet", "--report", report,
                f"{wheel}[runtime]", "-c", pin], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = [item["metadata"]["name"].lower()
                 for item in json.loads(report.read_text())["install"]]
    assert "fsdp-orch" in installed, installed
    assert not [name for name in installed if name == "torch" or name.startswith("nvidia-")], (
        f"pip planned to replace the user's torch: {installed}")
    assert torch_of(python, tmp_path) == before
    where = run([python, "-c", "import fsdp_orch; print(fsdp_orch.__file__)"], cwd=tmp_path)
    assert where.stdout.startswith(str(mine)), where  # the wheel's, not this checkout

    demo = copy_demo(tmp_path)
    cli = python.parent / "fsdp-orch"
    home = {"FSDP_ORCH_HOME": str(tmp_path / "home")}
    proc = run([cli, "submit", "--cluster", "local", "--wait", "--json", demo,
                "--set", demo_args(20)], cwd=tmp_path, env=home)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED" and status["progress"]["step"] == 20, status
    launch = (Path(status["run_dir"]) / "attempt-0" / "launch.sh").read_text()
    assert f"exec {python} -u -m torch.distributed.run" in launch  # the ranks ran on torch 2.9.0


def interpreter(version: str) -> Path:
    """A real ``python<version>``: pyenv's (this machine has 3.10 and 3.12 there; its shims answer
    only for the versions it is set to), else one on PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"))
    on_path = shutil.which(f"python{version}")
    if not found and on_path and "/shims/" not in on_path:
        found = [Path(on_path)]
    assert found, f"no python{version} here (pyenv versions or PATH)"
    return found[-1]


# the suite: 3.12 (mypy and ruff read the package as 3.10 code: its syntax and the standard
# library it may use); both under bench/sweeps.py
@pytest.mark.parametrize("version", cases(["3.10", "3.12"], ["3.12"]))
def test_the_cli_works_with_no_torch_and_doctor_says_what_the_ranks_need(
        tmp_path: Path, wheel: Path, version: str) -> None:
    """On the oldest and the newest Python the package claims besides this one (3.11 above)."""
    python = fresh_env(tmp_path / "env", interpreter(version))
    proc = run([python, "-m", "pip", "install", "--quiet", wheel], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run([python, "-c", "import torch"], cwd=tmp_path).returncode != 0  # no torch here
    cli = python.parent / "fsdp-orch"
    home = {"FSDP_ORCH_HOME": str(tmp_path / "home")}
    for flag in ("--version", "-V"):
        version = run([cli, flag], cwd=tmp_path, env=home)
        assert version.returncode == 0 and version.stdout.startswith("fsdp-orch "), version
    demo = copy_demo(tmp_path)
    rendered = run([cli, "render", "--cluster", "local", demo], cwd=tmp_path, env=home)
    assert rendered.returncode == 0 and "torch.distributed.run" in rendered.stdout, rendered
    status = run([cli, "status"], cwd=tmp_path, env=home)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status
    doctor = run([cli, "doctor"], cwd=tmp_path, env=home)
    assert "Traceback" not in doctor.stderr, doctor.stderr
    assert "[ok] torch on this host" in doctor.stdout and "the CLI needs none" in doctor.stdout
    assert "torch>=2.9" in doctor.stdout and "fsdp-orch[runtime]" in doctor.stdout, doctor.stdout
    local = run([cli, "doctor", "--cluster", "local"], cwd=tmp_path, env=home)
    assert local.returncode != 0 and "[FAIL] torch for the ranks" in local.stdout, local.stdout
