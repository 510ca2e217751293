"""Golden files: every artifact rendered for every cluster kind x launcher, and each entry point.

After an intended change to a template or to planning, regenerate the files with

    FSDP_ORCH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_render_golden.py

and read ``git diff tests/golden`` before committing it: the diff is the change users will see.

Inputs are fixed (``tests/fixtures/``: profiles with a fixed ``python:``, fixed home, job dir and
job id; only the built-in templates), so nothing here depends on the machine. Every ``.sh``
artifact must pass ``bash -n``, and ``shellcheck`` (all severities, no excludes) when installed.
"""

from __future__ import annotations

import difflib
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from planning import SUPERVISOR, plan_on, render

from fsdp_orch.backends.registry import parse_profile, profile_models
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.launch.render import Artifact
from fsdp_orch.places.builtin import builtin_dir

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
UPDATE = os.environ.get("FSDP_ORCH_UPDATE_GOLDEN") == "1"
REGENERATE = "FSDP_ORCH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_render_golden.py"

# Multi-node kinds render two nodes so per-node artifacts (ssh node-N.sh) and node counts show.
NODES = {"local": 1, "slurm": 2, "ssh": 2, "tpu-vm": 1, "kubernetes": 2}
ENTRY_POINTS = ("script", "module", "command")
# (kind, launcher, entry point): every supported pair with a script, then the module and command
# forms of every launcher (they change the launch line).
CASES = [
    *[(kind, launcher, "script") for kind, model in profile_models().items()
      for launcher in model.launchers],
    *[("local", launcher, entry) for launcher in ("torchrun", "accelerate", "python")
      for entry in ("module", "command")],
    *[("tpu-vm", "xla", entry) for entry in ("module", "command")],
]
# Profiles that change what a kind renders, named <kind>-<variant> (tests/fixtures/clusters/).
VARIANTS = [("ssh-own-disks", "torchrun", "script"), ("slurm-standby", "torchrun", "script"),
            ("kubernetes-jobset", "torchrun", "script"),
            ("kubernetes-in-cluster", "torchrun", "script")]
ALL_CASES = CASES + VARIANTS


def case_name(kind: str, launcher: str, entry: str) -> str:
    return f"{kind}-{launcher}" + ("" if entry == "script" else f"-{entry}")


@functools.cache
def render_case(kind: str, launcher: str, entry: str) -> tuple[Artifact, ...]:
    profile = parse_profile(FIXTURES / "clusters" / f"{kind}.yaml")
    # launch.umask as submit records it (the user's umask): the ranks get it, fsdp-orch keeps 077
    job, _ = load_job(FIXTURES / "jobs" / f"{entry}.yaml",
                      [f"launcher={launcher}", f"nodes={NODES[profile.kind]}",
                       'launch.umask="0022"'])
    ctx = PlanContext(job_id="j0123456789a", attempt=1, run_root="/srv/fsdp-orch",
                      job_dir="/srv/jobs/demo", local_has_gpu=False,
                      bootstrap_dir="/opt/fsdp-orch/fsdp_orch/bootstrap/site",
                      supervisor_command=SUPERVISOR)
    plan = plan_on(job, profile, profile.kind, ctx)
    return tuple(render(plan, search=[builtin_dir("templates")]))


IDS = [case_name(*c) for c in ALL_CASES]


def test_cases_cover_every_supported_pair() -> None:
    pairs = {(kind, launcher) for kind, launcher, _ in CASES}
    assert pairs == {(kind, launcher) for kind, model in profile_models().items()
                     for launcher in model.launchers}
    # local, slurm, ssh, kubernetes x {torchrun, accelerate, python}; tpu-vm x {xla, python}
    assert len(pairs) == 14
    assert {entry for _, _, entry in CASES} == set(ENTRY_POINTS)


@pytest.mark.parametrize(("kind", "launcher", "entry"), ALL_CASES, ids=IDS)
def test_golden(kind: str, launcher: str, entry: str) -> None:
    artifacts = {a.name: a.text for a in render_case(kind, launcher, entry)}
    assert len(artifacts) == len(render_case(kind, launcher, entry)), "two artifacts share a name"
    folder = GOLDEN / case_name(kind, launcher, entry)
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, text in artifacts.items():
            (folder / name).write_text(text)
        return
    assert folder.is_dir(), f"no golden files for {folder.name}; run: {REGENERATE}"
    on_disk = sorted(p.name for p in folder.iterdir())
    assert on_disk == sorted(artifacts), f"artifact set changed; if intended run: {REGENERATE}"
    for name, text in artifacts.items():
        expected = (folder / name).read_text()
        if text != expected:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                f"golden/{folder.name}/{name}", "rendered"))
            pytest.fail(f"{folder.name}/{name} differs from its golden file; if intended run: "
                        f"{REGENERATE}\n{diff}")


def test_no_stale_golden_folders() -> None:
    if UPDATE:
        wanted = set(IDS)
        for folder in GOLDEN.iterdir():
            if folder.is_dir() and folder.name not in wanted:
                shutil.rmtree(folder)
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(IDS)


def test_rendering_is_deterministic() -> None:
    for case in CASES[:3]:
        assert render_case.__wrapped__(*case) == render_case.__wrapped__(*case)


def _write_scripts(tmp_path: Path) -> list[Path]:
    scripts = []
    for case in ALL_CASES:
        folder = tmp_path / case_name(*case)
        folder.mkdir()
        for art in render_case(*case):
            if art.name.endswith(".sh"):
                path = folder / art.name
                path.write_text(art.text)
                scripts.append(path)
    return scripts


def test_every_script_passes_bash_n(tmp_path: Path) -> None:
    scripts = _write_scripts(tmp_path)
    assert len(scripts) >= len(ALL_CASES)
    for path in scripts:
        proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{path.relative_to(tmp_path)}: {proc.stderr}"


def test_every_script_passes_shellcheck(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (apt-get install -y shellcheck)")
    scripts = _write_scripts(tmp_path)
    proc = subprocess.run(["shellcheck", "--format=gcc", *map(str, scripts)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_executable_flags() -> None:
    for case in ALL_CASES:
        for art in render_case(*case):
            assert art.executable == art.name.endswith(".sh"), (case, art.name)
