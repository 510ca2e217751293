"""`fsdp-orch doctor`'s shared checks and its report (the SLURM checks run on the real cluster:
tests/slurm/test_slurm_doctor.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from fsdp_orch.checks import Check
from fsdp_orch.command import CommandResult
from fsdp_orch.doctor import home_checks, report, torch_here

MOUNTS = "/dev/sda1 / ext4 rw 0 0\nfiler:/home /shared nfs4 rw 0 0\n"


def test_a_python_without_torch_fails_with_a_fix() -> None:
    def no_torch(argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(1, "", "Traceback ...\nModuleNotFoundError: No module named 'torch'\n")

    check, version = torch_here("/usr/bin/python3", run=no_torch)
    assert not check.ok and version is None
    assert "No module named 'torch'" in check.detail and "setup.sh" in check.fix
    check, version = torch_here(sys.executable)  # this environment's, for real
    assert check.ok and version and version.startswith("2.13.0")


def test_a_home_on_nfs_keeps_the_database_local(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("FSDP_ORCH_DB", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    [nfs] = home_checks("/shared/alice/.fsdp-orch", MOUNTS)
    assert nfs.ok and "nfs4" in nfs.detail and str(tmp_path) in nfs.detail
    [local] = home_checks("/var/tmp/home", MOUNTS)
    assert "ext4" in local.detail and "/var/tmp/home/jobs.db" in local.detail


def test_the_report_says_each_check_and_the_fix_of_each_failure() -> None:
    checks = [Check("a", True, "fine", "never shown"), Check("b", False, "broken", "do this")]
    assert report(checks, as_json=False).splitlines() == ["[ok] a: fine", "[FAIL] b: broken",
                                                          "       fix: do this"]
    parsed = json.loads(report(checks, as_json=True))
    assert parsed["ok"] is False and parsed["checks"][1] == {"name": "b", "ok": False, "detail": "broken",
                                                             "fix": "do this"}


def test_doctor_exits_0_when_every_check_holds(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "FSDP_ORCH_HOME": str(tmp_path), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "doctor", "--json"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr
