"""`fsdp-orch doctor`'s shared checks and its report (the SLURM checks run on the real cluster:
tests/slurm/test_slurm_doctor.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fsdp_orch.cli.doctor import home_checks, report, torch_for_ranks, torch_here
from fsdp_orch.observe.command import CommandResult
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.version import __version__

MOUNTS = "/dev/sda1 / ext4 rw 0 0\nfiler:/home /shared nfs4 rw 0 0\n"


REPO = Path(__file__).resolve().parents[2]


def test_a_cli_without_torch_passes_and_says_what_the_ranks_need() -> None:
    """A login node's CLI needs no torch; the ranks' python does: torch>=2.9 and fsdp-orch."""
    def no_torch(argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(1, "", "Traceback ...\nModuleNotFoundError: No module named 'torch'\n")

    def old_torch(argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(0, "2.8.1+cu126\n", "")

    check, version = torch_here("/usr/bin/python3", run=no_torch)
    assert check.ok and version is None
    assert "the CLI needs none" in check.detail and "torch>=2.9" in check.detail
    assert "fsdp-orch[runtime]" in check.detail and "setup.sh" not in check.detail + check.fix
    ranks = torch_for_ranks("/opt/train/bin/python", run=no_torch)
    assert not ranks.ok and "No module named 'torch'" in ranks.detail
    assert "fsdp-orch[runtime]" in ranks.fix and "python:" in ranks.fix
    ranks = torch_for_ranks("/opt/train/bin/python", run=old_torch)
    assert not ranks.ok and "2.8.1+cu126, older than torch>=2.9" in ranks.detail
    check, version = torch_here(sys.executable)  # this environment's, for real
    assert check.ok and version and version.startswith("2.13.0")
    assert torch_for_ranks(sys.executable).ok


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
    assert parsed["ok"] is False and parsed["checks"][1] == {
        "name": "b", "ok": False, "detail": "broken", "fix": "do this"}


def test_doctor_exits_0_when_every_check_holds(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "FSDP_ORCH_HOME": str(tmp_path), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "doctor", "--json"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr


# --- SSH and TPU VM clusters ----------------------------------------------------------------------

def ssh_profile(tmp_path, ports: list[int], known_hosts: str,  # type: ignore[no-untyped-def]
                policy: str = "strict"):
    from fsdp_orch.backends.over_ssh.hosts import SshProfile

    return SshProfile.model_validate({
        "kind": "ssh",
        "hosts": [{"address": "127.0.0.1", "port": p, "user": "root"} for p in ports],
        "known_hosts": known_hosts, "host_key_policy": policy, "python": "/opt/venv/bin/python",
        "connect_timeout": 2})


def test_ssh_hosts_are_checked_for_a_port_that_answers_a_known_key_and_the_same_torch(
        tmp_path) -> None:
    import socket

    from fsdp_orch.backends.remote_doctor import ssh_checks
    from fsdp_orch.observe import command

    listening = socket.create_server(("127.0.0.1", 0))  # a real port that answers
    closed = socket.create_server(("127.0.0.1", 0))
    open_port, closed_port = listening.getsockname()[1], closed.getsockname()[1]
    closed.close()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "host_key")], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{open_port} {(tmp_path / 'host_key.pub').read_text()}")
    remote: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> CommandResult:
        if argv[0] == "ssh":  # stand-in for the host's python over ssh: no sshd in a unit test
            remote.append(argv)
            if "fsdp_orch.bootstrap.agent" in argv[-1]:  # the bootstrap, from this install's path
                return CommandResult(0, f"{__version__}\n", "")
            return CommandResult(0, "2.13.0+cpu\n", "")
        return command.run(argv, timeout)  # ssh-keygen -F, for real

    try:
        checks = ssh_checks(ssh_profile(tmp_path, [open_port, closed_port], str(known)),
                            "2.13.0+cpu", runner)
    finally:
        listening.close()
    by_name = {c.name: c for c in checks}
    assert by_name[f"127.0.0.1:{open_port} reachable"].ok
    assert by_name[f"127.0.0.1:{open_port} host key"].ok
    assert by_name[f"127.0.0.1:{open_port} torch"].ok
    unreachable = by_name[f"127.0.0.1:{closed_port} reachable"]
    assert not unreachable.ok and "sshd" in unreachable.fix
    assert f"127.0.0.1:{closed_port} host key" not in by_name  # nothing more to ask of it
    [ssh, bootstrap] = remote
    assert (["-o", "StrictHostKeyChecking=yes"]
            == ssh[ssh.index("StrictHostKeyChecking=yes") - 1:][:2])
    assert ssh[-3:] == ["/opt/venv/bin/python", "-c", "'import torch; print(torch.__version__)'"]
    # a shared filesystem: the host imports its own fsdp-orch, never from where this CLI is
    # installed (issue 62)
    assert by_name[f"127.0.0.1:{open_port} bootstrap"].ok
    assert str(REPO) not in bootstrap[-1] and "shared filesystem" in by_name[
        f"127.0.0.1:{open_port} bootstrap"].detail


def test_an_unknown_host_key_is_red_when_strict_with_how_to_verify_it(tmp_path) -> None:
    from fsdp_orch.backends.remote_doctor import ssh_checks
    from fsdp_orch.observe import command

    (tmp_path / "known_hosts").write_text("")
    profile = ssh_profile(tmp_path, [2222], str(tmp_path / "known_hosts"))
    checks = ssh_checks(profile, None, command.run, connect=lambda address, timeout: None)
    [key] = [c for c in checks if c.name.endswith("host key")]
    assert not key.ok and "[127.0.0.1]:2222" in key.detail and "ssh-keyscan -p 2222" in key.fix
    relaxed = ssh_profile(tmp_path, [2222], str(tmp_path / "known_hosts"), policy="accept-new")

    def version_mismatch(argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(0, "2.5.0\n", "") if argv[0] == "ssh" else command.run(argv, timeout)

    checks = ssh_checks(relaxed, "2.13.0+cpu", version_mismatch,
                        connect=lambda address, timeout: None)
    by_end = {c.name.split()[-1]: c for c in checks}
    assert by_end["key"].ok and "accept-new" in by_end["key"].detail
    assert not by_end["torch"].ok and "2.5.0 there, older than 2.9" in by_end["torch"].detail
    assert "fsdp-orch[runtime]" in by_end["torch"].fix
    # the bootstrap's probe printed a torch version, not fsdp-orch's: another fsdp-orch there
    assert not by_end["bootstrap"].ok and "shared_filesystem: false" in by_end["bootstrap"].fix


def test_doctor_for_a_tpu_vm_needs_gcloud(tmp_path) -> None:
    import os
    import shutil

    def doctor(path: str) -> tuple[int, dict]:
        proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "doctor", "--cluster", "tpu-vm",
                               "--json"],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "FSDP_ORCH_HOME": str(tmp_path), "PATH": path})
        return proc.returncode, json.loads(proc.stdout)

    if shutil.which("gcloud") is not None:  # the Google Cloud CLI, installed on these machines
        code, report_ = doctor(os.environ["PATH"])
        [gcloud] = [c for c in report_["checks"] if c["name"] == "gcloud"]
        assert gcloud["ok"] and "Google Cloud SDK" in gcloud["detail"], gcloud
    code, report_ = doctor(str(tmp_path / "empty"))
    [gcloud] = [c for c in report_["checks"] if c["name"] == "gcloud"]
    assert (code == 1 and not gcloud["ok"] and "not on PATH" in gcloud["detail"]
            and "google-cloud-cli" in gcloud["fix"])


def test_every_host_is_probed_at_once_and_the_checks_read_in_host_order(tmp_path) -> None:
    """Six hosts whose torch probes each wait for all six to be asked: one host after another, the
    first would wait alone and fail. The third host's other torch is told against the first's."""
    import threading

    from fsdp_orch.backends.remote_doctor import ssh_checks

    ports = list(range(2201, 2207))
    all_asked = threading.Barrier(len(ports), timeout=30)

    def runner(argv: list[str], timeout: float) -> CommandResult:
        if argv[0] != "ssh":  # ssh-keygen -F: no key known, taken on first use
            return CommandResult(1, "", "")
        if "fsdp_orch.bootstrap.agent" in argv[-1]:
            return CommandResult(0, f"{__version__}\n", "")
        try:
            all_asked.wait()
        except threading.BrokenBarrierError:
            return CommandResult(255, "", "asked alone")
        port = int(argv[argv.index("-p") + 1])
        return CommandResult(0, "2.10.0\n" if port == 2203 else "2.13.0+cpu\n", "")

    profile = ssh_profile(tmp_path, ports, str(tmp_path / "known_hosts"), policy="accept-new")
    checks = ssh_checks(profile, "2.13.0+cpu", runner, connect=lambda address, timeout: None)
    torch = [c for c in checks if c.name.endswith(" torch")]
    assert [c.name for c in torch] == [f"127.0.0.1:{p} torch" for p in ports]
    assert [c.ok for c in torch] == [True, True, False, True, True, True], torch
    assert "torch 2.10.0 there, 2.13.0+cpu on the first host" in torch[2].detail
    hosts_in_order = [int(c.name.split()[0].rsplit(":", 1)[1]) for c in checks]
    assert hosts_in_order == sorted(hosts_in_order)
