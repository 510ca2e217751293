"""What ``fsdp-orch doctor --cluster`` checks on an SSH cluster (each host answers on its port, its
host key is known, its python imports torch and, on a shared filesystem, its own fsdp-orch) and on
a TPU VM (gcloud is there). Commands go through the one runner; the TCP probe is injectable. The
hosts are probed at once; the checks read in host order."""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Callable
from dataclasses import dataclass

from fsdp_orch.observe.command import Runner
from fsdp_orch.vocab.checks import MIN_TORCH_TEXT, RANKS_NEED, TORCH_VERSION, Check, torch_too_old

Connect = Callable[[tuple[str, int], float], object]


def _connect(address: tuple[str, int], timeout: float) -> object:
    with socket.create_connection(address, timeout=timeout):
        return None


def host_pattern(address: str, port: int) -> str:
    """How known_hosts names a host: ``address``, or ``[address]:port`` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def ssh_argv(host, profile, *command: str) -> list[str]:
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


# hosts probed at once: each probe is an ssh and a python that imports torch (seconds), so a
# 1,000-host cluster one host after another took most of an hour
PROBES_AT_ONCE = 32


@dataclass(frozen=True)
class HostProbe:
    """What one host answered: its checks as far as it went, and where its python has torch, the
    version found and how the host gets the bootstrap (which the torch check goes before)."""

    checks: list[Check]
    torch: tuple[str, Check] | None = None


def ssh_checks(profile, torch_version: str | None, run: Runner,
               connect: Connect = _connect) -> list[Check]:
    """Every host probed at once (at most ``PROBES_AT_ONCE``), the checks in host order."""
    from fsdp_orch.backends.over_ssh.connect import on_every_host

    hosts = list(profile.hosts)
    probes = on_every_host(hosts, lambda i, host: _probe(host, profile, run, connect),
                           at_most=PROBES_AT_ONCE)
    checks: list[Check] = []
    versions: list[str] = []  # each host's torch, as found
    for host, probe in zip(hosts, probes, strict=True):
        checks += probe.checks
        if probe.torch is None:
            continue
        where = f"{host.address}:{host.port}"
        version, bootstrap = probe.torch
        if torch_too_old(version):
            checks.append(Check(f"{where} torch", False, f"torch {version} there, older than "
                                + MIN_TORCH_TEXT, RANKS_NEED))
        elif versions and version not in versions:
            checks.append(Check(f"{where} torch", False,
                                f"torch {version} there, {versions[0]} on the first host",
                                "use the same torch on every host"))
        else:
            checks.append(Check(f"{where} torch", True, f"{profile.python}: torch {version}"))
        versions.append(version)
        checks.append(bootstrap)
    return checks


def _probe(host, profile, run: Runner, connect: Connect) -> HostProbe:
    """One host: its port, its key in known_hosts, its python's torch and its bootstrap."""
    where = f"{host.address}:{host.port}"
    known_hosts = os.path.expanduser(profile.known_hosts)
    try:
        connect((host.address, host.port), float(profile.connect_timeout))
    except OSError as exc:
        return HostProbe([Check(f"{where} reachable", False,
                                f"no TCP connection: {exc.strerror or exc}",
                                "check the address and port in the profile, "
                                "and that sshd runs there")])
    checks = [Check(f"{where} reachable", True, "sshd's port answers")]
    pattern = host_pattern(host.address, host.port)
    found = run(["ssh-keygen", "-F", pattern, "-f", known_hosts], 30.0)
    if found.returncode != 0 or not found.stdout.strip():
        fix = (f"verify the host's key and add it: ssh-keyscan -p {host.port} {host.address} "
               f">> {known_hosts} (compare its fingerprint with the host's own first)")
        if profile.host_key_policy == "strict":
            checks.append(Check(f"{where} host key", False,
                                f"{pattern} is not in {known_hosts}", fix))
            return HostProbe(checks)
        checks.append(Check(f"{where} host key", True, f"{pattern} is not in {known_hosts}; "
                            f"host_key_policy {profile.host_key_policy} takes it on first use",
                            fix))
    else:
        checks.append(Check(f"{where} host key", True, f"{pattern} is in {known_hosts}"))
    # ssh hands the remote shell one string: quote each word for it
    remote = run(ssh_argv(host, profile, shlex.quote(profile.python), "-c",
                          shlex.quote(TORCH_VERSION)), 120.0)
    if remote.returncode != 0 or not remote.stdout.strip():
        detail = (remote.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return HostProbe([*checks, Check(f"{where} torch", False,
                                         f"{profile.python} there: {detail}",
                                         "set python: or venv: in the profile to an "
                                         "interpreter with torch on that host")])
    version = remote.stdout.strip().splitlines()[-1]
    return HostProbe(checks, (version, _bootstrap_check(host, profile, where, run)))


def _bootstrap_check(host, profile, where: str, run: Runner) -> Check:
    """How the host gets fsdp-orch's bootstrap: copied with each job onto a host with its own
    disk; on a shared filesystem, from the profile's python's own environment (never from where
    this CLI is installed: places.python_env), so that environment has fsdp-orch, the same
    version as this CLI's."""
    if not profile.shared_filesystem:
        return Check(f"{where} bootstrap", True, "copied with each job (shared_filesystem: false)")
    from fsdp_orch.vocab.version import __version__

    probe = ("import fsdp_orch.bootstrap.agent; "
             "from fsdp_orch.vocab.version import __version__; print(__version__)")
    found = run(ssh_argv(host, profile, shlex.quote(profile.python), "-c", shlex.quote(probe)),
                120.0)
    said = found.stdout.strip().splitlines() if found.returncode == 0 else []
    there = said[-1] if said else None
    fix = (f"{profile.python} -m pip install 'fsdp-orch[runtime]=={__version__}' on the host (in "
           "the environment of the profile's python), or set shared_filesystem: false in the "
           "profile to copy this fsdp-orch with each job")
    if there is None:
        detail = (found.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return Check(f"{where} bootstrap", False, f"{profile.python} there cannot import "
                     f"fsdp_orch ({detail}): the ranks' bootstrap and the host's reports run "
                     "from it", fix)
    if there != __version__:
        return Check(f"{where} bootstrap", False, f"fsdp-orch {there} there ({profile.python}), "
                     f"{__version__} here", fix)
    return Check(f"{where} bootstrap", True, f"{profile.python}: fsdp-orch {there}, as here "
                 "(shared filesystem)")


def tpu_checks(profile, run: Runner) -> list[Check]:
    result = run(["gcloud", "--version"], 60.0)
    if result.returncode != 0:
        detail = "gcloud is not on PATH" if result.returncode == 127 else \
            (result.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return [Check("gcloud", False, detail,
                      "install the Google Cloud CLI (google-cloud-cli) and run gcloud auth login")]
    first = (result.stdout.strip().splitlines() or ["gcloud"])[0]
    return [Check("gcloud", True, f"{first}; TPU {profile.tpu_name} in {profile.zone}")]
