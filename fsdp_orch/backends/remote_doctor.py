"""What ``fsdp-orch doctor --cluster`` checks on an SSH cluster (each host answers on its port, its
host key is known, its python imports the submit host's torch) and on a TPU VM (gcloud is there).
Commands go through the one runner; the TCP probe is injectable."""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Callable

from fsdp_orch.observe.command import Runner
from fsdp_orch.vocab.checks import TORCH_VERSION, Check

Connect = Callable[[tuple[str, int], float], object]


def _connect(address: tuple[str, int], timeout: float) -> object:
    with socket.create_connection(address, timeout=timeout):
        return None


def host_pattern(address: str, port: int) -> str:
    """How known_hosts names a host: ``address``, or ``[address]:port`` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def ssh_argv(host, profile, *command: str) -> list[str]:  # type: ignore[no-untyped-def]
    """OpenSSH with the profile's host-key policy, never a password prompt."""
    strict = {"strict": "yes", "accept-new": "accept-new", "warn": "no"}[profile.host_key_policy]
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={profile.connect_timeout}",
            "-o", f"StrictHostKeyChecking={strict}",
            "-o", f"UserKnownHostsFile={os.path.expanduser(profile.known_hosts)}",
            "-p", str(host.port)]
    if host.identity_file:
        argv += ["-i", os.path.expanduser(host.identity_file)]
    target = f"{host.user}@{host.address}" if host.user else host.address
    return [*argv, target, *command]


def ssh_checks(profile, torch_version: str | None, run: Runner,  # type: ignore[no-untyped-def]
               connect: Connect = _connect) -> list[Check]:
    checks: list[Check] = []
    known_hosts = os.path.expanduser(profile.known_hosts)
    for host in profile.hosts:
        where = f"{host.address}:{host.port}"
        try:
            connect((host.address, host.port), float(profile.connect_timeout))
        except OSError as exc:
            checks.append(Check(f"{where} reachable", False,
                                f"no TCP connection: {exc.strerror or exc}",
                                "check the address and port in the profile, "
                                "and that sshd runs there"))
            continue
        checks.append(Check(f"{where} reachable", True, "sshd's port answers"))
        pattern = host_pattern(host.address, host.port)
        found = run(["ssh-keygen", "-F", pattern, "-f", known_hosts], 30.0)
        if found.returncode != 0 or not found.stdout.strip():
            fix = (f"verify the host's key and add it: ssh-keyscan -p {host.port} {host.address} "
                   f">> {known_hosts} (compare its fingerprint with the host's own first)")
            if profile.host_key_policy == "strict":
                checks.append(Check(f"{where} host key", False,
                                    f"{pattern} is not in {known_hosts}", fix))
                continue
            checks.append(Check(f"{where} host key", True, f"{pattern} is not in {known_hosts}; "
                                f"host_key_policy {profile.host_key_policy} takes it on first use",
                                fix))
        else:
            checks.append(Check(f"{where} host key", True, f"{pattern} is in {known_hosts}"))
        # ssh hands the remote shell one string: quote each word for it
        remote = run(ssh_argv(host, profile, shlex.quote(profile.python), "-c",
                              shlex.quote(TORCH_VERSION)), 120.0)
        version = (remote.stdout.strip().splitlines()[-1]
                   if remote.returncode == 0 and remote.stdout.strip() else None)
        if version is None:
            detail = (remote.stderr.strip().splitlines() or ["no output"])[-1][:300]
            checks.append(Check(f"{where} torch", False, f"{profile.python} there: {detail}",
                                "set python: or venv: in the profile to an "
                                "interpreter with torch on that host"))
        elif torch_version is not None and version != torch_version:
            checks.append(Check(f"{where} torch", False,
                                f"torch {version} there, {torch_version} here",
                                "use the same torch on every host"))
        else:
            checks.append(Check(f"{where} torch", True, f"{profile.python}: torch {version}"))
    return checks


def tpu_checks(profile, run: Runner) -> list[Check]:  # type: ignore[no-untyped-def]
    result = run(["gcloud", "--version"], 60.0)
    if result.returncode != 0:
        detail = "gcloud is not on PATH" if result.returncode == 127 else \
            (result.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return [Check("gcloud", False, detail,
                      "install the Google Cloud CLI (google-cloud-cli) and run gcloud auth login")]
    first = (result.stdout.strip().splitlines() or ["gcloud"])[0]
    return [Check("gcloud", True, f"{first}; TPU {profile.tpu_name} in {profile.zone}")]
