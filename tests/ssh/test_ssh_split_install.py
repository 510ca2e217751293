"""The split install on the real sshd hosts (issue 62): the CLI from an environment without torch
(``tests/cli_without_torch.py``), built in the folder of the submitting machine that the hosts
cannot see (as a pipx folder in a laptop's home); the hosts share the run folder
(``shared_filesystem: true``) and run the ranks on the profile's ``python:`` (``.venv``).

Before: the hosts' scripts put the bootstrap from the CLI's package on ``PYTHONPATH`` and ran their
reports with the CLI's package root first on it: paths the hosts do not have."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from cli_harness import copy_demo, demo_args, why
from cli_without_torch import RANKS_PYTHON, TorchlessCli, build_torchless_env

pytestmark = [pytest.mark.slow, pytest.mark.root]

TWO_HOSTS = ["--set", "nodes=2", "--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
             "--set", "watch.startup_timeout=120s"]


def test_a_job_submitted_from_a_cli_without_torch_succeeds(ssh_hosts, tmp_path: Path) -> None:
    # left there: the suite's check after the test (status_is_fold) runs this CLI again; the
    # folder goes with the hosts (hosts.sh down)
    apart = ssh_hosts.submit_host_dir / uuid.uuid4().hex[:8]
    python = build_torchless_env(apart / "pipx-venv")
    assert ssh_hosts.ssh(0, "test", "-e", str(python), check=False).returncode == 1
    work = tmp_path / "work"
    work.mkdir()
    cli = TorchlessCli(home=tmp_path / "home", cwd=work, python=str(python))
    lines = ["kind: ssh", "device: cpu", "hosts:"]
    for address in ssh_hosts.addresses[:2]:
        lines.append(f"  - {{address: {address}, port: 22, user: root, "
                     f"identity_file: {ssh_hosts.key}}}")
    lines += [f"python: {RANKS_PYTHON}", f"known_hosts: {ssh_hosts.known_hosts}",
              "host_key_policy: strict", "shared_filesystem: true", "connect_timeout: 3",
              'env: {GLOO_SOCKET_IFNAME: eth0, OMP_NUM_THREADS: "1"}']
    (work / "clusters").mkdir()
    (work / "clusters" / "split.yaml").write_text("\n".join(lines) + "\n")
    demo = copy_demo(tmp_path)
    proc = cli.run("submit", "--cluster", "split", "--wait", "--json", str(demo), *TWO_HOSTS,
                   "--set", demo_args(10), timeout=400)
    assert proc.stdout.strip(), proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED" and status["progress"]["step"] == 10, why(status)
    attempt = Path(status["run_dir"]) / "attempt-0"
    for script in sorted(attempt.glob("node-*.sh")):
        assert str(apart) not in script.read_text(), f"{script.name} names the CLI's env"
    ssh_hosts.assert_nothing_left(cli.home)
