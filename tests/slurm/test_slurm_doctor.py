"""`fsdp-orch doctor --cluster slurm` on the real test cluster: green with every check, and red
with a fix when `sacct` is not on the PATH."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def doctor(cli, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """On the login node (tests/slurm/conftest.py), whose profile names the shared run root."""
    return cli.run("doctor", "--cluster", "slurm", "--json", env=env)


def test_doctor_is_green_on_the_test_cluster(slurm_cluster, cli):
    proc = doctor(cli)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"], proc.stdout + proc.stderr
    names = {c["name"] for c in report["checks"]}
    assert {"SLURM commands", "sacct answers", "torch on the nodes", "run folder shared",
            "torch on this host", "FSDP_ORCH_HOME"} <= names
    [shared] = [c for c in report["checks"] if c["name"] == "run folder shared"]
    assert "shared_dir" in shared["detail"], shared


def test_doctor_is_red_with_a_fix_when_sacct_is_missing(slurm_cluster, cli, tmp_path: Path):
    shims = tmp_path / "no-sacct"
    shims.mkdir()
    for directory in os.environ["PATH"].split(":"):
        for tool in ("sbatch", "srun", "squeue", "scontrol", "scancel"):
            found = Path(directory) / tool
            if found.exists() and not (shims / tool).exists():
                (shims / tool).symlink_to(found)
    path = ":".join([str(shims)] + [d for d in ["/usr/local/sbin", "/usr/sbin", "/sbin"]
                                    if not (Path(d) / "sacct").exists()])
    assert shutil.which("sacct", path=path) is None
    proc = doctor(cli, {**cli.env, "PATH": path})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"]
    [slurm] = [c for c in report["checks"] if c["name"] == "SLURM commands"]
    assert not slurm["ok"] and "sacct" in slurm["detail"] and "PATH" in slurm["fix"]
