"""Smoke tests of the real test SSH hosts: what the ssh backend's tests rely on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import fabric
import paramiko
import pytest

from fsdp_orch.backends.over_ssh.hosts import SshProfile
from fsdp_orch.backends.registry import parse_profile

if TYPE_CHECKING:  # tests/ is no package: the fixture's class is for readers and type checkers
    from conftest import SshHosts

pytestmark = [pytest.mark.slow, pytest.mark.root]


def connect(hosts: SshHosts, i: int, known_hosts: Path | None = None) -> fabric.Connection:
    """An open fabric connection to host ``i`` that accepts only the host key in ``known_hosts``
    (default: the generated one). fabric itself would auto-add any key it is shown."""
    conn = fabric.Connection(
        hosts.addresses[i], user="root", connect_timeout=5,
        # an explicit, empty SSH config: ~/.ssh/config and /etc/ssh/ssh_config play no part
        config=fabric.Config(ssh_config=paramiko.SSHConfig()),
        connect_kwargs={"key_filename": str(hosts.key), "look_for_keys": False,
                        "allow_agent": False})
    conn.client.load_host_keys(str(known_hosts or hosts.known_hosts))
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    conn.open()
    return conn


def inet_addresses(ip_output: str) -> set[str]:
    """The IPv4 addresses in ``ip -o -4 addr`` output."""
    return {line.split()[3].split("/")[0] for line in ip_output.splitlines() if " inet " in line}


def test_each_host_answers_fabric_from_its_own_namespace(ssh_hosts: SshHosts) -> None:
    for i, address in enumerate(ssh_hosts.addresses):
        with connect(ssh_hosts, i) as conn:
            eth0 = conn.run("ip -o -4 addr show eth0", hide=True, in_stream=False).stdout
            every = conn.run("ip -o -4 addr show", hide=True, in_stream=False).stdout
        assert inet_addresses(eth0) == {address}, eth0
        assert inet_addresses(every) == {"127.0.0.1", address}, every


def test_openssh_client_runs_an_argv_on_each_host(ssh_hosts: SshHosts) -> None:
    for i, address in enumerate(ssh_hosts.addresses):
        assert (inet_addresses(ssh_hosts.ssh(i, "ip", "-o", "-4", "addr", "show", "eth0").stdout)
                == {address})
    # quoted once, for the remote shell: the words arrive as given
    assert ssh_hosts.ssh(0, "echo", "a  b; echo c").stdout == "a  b; echo c\n"


def test_a_changed_host_key_is_refused(ssh_hosts: SshHosts, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
                   check=True)
    other_key = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    lines = ssh_hosts.known_hosts.read_text().splitlines()
    assert lines[0].startswith(f"{ssh_hosts.addresses[0]} ssh-ed25519 "), lines
    changed = tmp_path / "known_hosts"
    changed.write_text("\n".join([f"{ssh_hosts.addresses[0]} {other_key}", *lines[1:]]) + "\n")

    with pytest.raises(paramiko.BadHostKeyException):
        connect(ssh_hosts, 0, known_hosts=changed)
    with connect(ssh_hosts, 1, known_hosts=changed) as conn:  # the other lines still hold
        assert conn.run("true", hide=True, in_stream=False).ok

    refused = ssh_hosts.ssh(0, "true", check=False, known_hosts=changed)
    assert refused.returncode == 255, refused
    assert ("REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr
            or "Host key verification failed" in refused.stderr), refused.stderr


def test_a_host_missing_from_known_hosts_is_refused(ssh_hosts: SshHosts, tmp_path: Path) -> None:
    without_first = tmp_path / "known_hosts"
    without_first.write_text("\n".join(ssh_hosts.known_hosts.read_text().splitlines()[1:]) + "\n")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        connect(ssh_hosts, 0, known_hosts=without_first)


def test_hosts_reach_each_other_over_the_bridge(ssh_hosts: SshHosts) -> None:
    probe = ("import socket, sys; s = socket.create_connection((sys.argv[1], 22), 3); "
             "print(s.recv(4).decode())")
    answer = ssh_hosts.inside(0, "python3", "-c", probe, ssh_hosts.addresses[1])
    assert answer.stdout == "SSH-\n"


def test_processes_started_over_ssh_are_found_in_their_hosts_namespace(ssh_hosts: SshHosts) -> None:
    job_id = f"hosts-smoke-{os.getpid()}"
    ssh_hosts.ssh(1, "sh", "-c",
                  f"FSDP_ORCH_JOB_ID={job_id} nohup sleep 60 </dev/null >/dev/null 2>&1 &")
    deadline = time.monotonic() + 10
    while not (found := ssh_hosts.job_processes(1, job_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert len(found) == 1, found
        assert found[0] in ssh_hosts.pids(1)
        assert Path(f"/proc/{found[0]}/comm").read_text().strip() == "sleep"
        assert ssh_hosts.job_processes(0, job_id) == []
    finally:
        for pid in found:
            os.kill(pid, signal.SIGKILL)


def test_the_profile_is_a_valid_ssh_profile(ssh_hosts: SshHosts) -> None:
    profile = parse_profile(ssh_hosts.profile)
    assert isinstance(profile, SshProfile)
    assert tuple(h.address for h in profile.hosts) == ssh_hosts.addresses
    assert {h.identity_file for h in profile.hosts} == {str(ssh_hosts.key)}
    assert profile.known_hosts == str(ssh_hosts.known_hosts)
    assert profile.host_key_policy == "strict"
    assert Path(profile.python).is_absolute()
    assert profile.env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_no_sshd_listens_in_the_root_namespace(ssh_hosts: SshHosts) -> None:
    """Installing openssh-server must not have started the system sshd on port 22."""
    if shutil.which("ss") is None:
        pytest.skip("no ss command to list listening sockets")
    listening = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    on_port_22 = [line for line in listening if line.split()[3].rsplit(":", 1)[1] == "22"]
    assert on_port_22 == []
    assert [line for line in listening if '"sshd"' in line] == []
