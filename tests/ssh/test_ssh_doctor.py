"""``fsdp-orch doctor --cluster`` against the real sshd hosts (tests/ssh/hosts.sh): each host's
port, key, torch and how it gets the bootstrap, for the shared-filesystem profile and the own-disks
one (issue 44)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root]


def doctor(profile, tmp_path) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "doctor", "--cluster", str(profile),
                           "--json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FSDP_ORCH_HOME": str(tmp_path / "home")})
    assert proc.stdout.strip(), proc.stderr
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_doctor_checks_each_host_and_how_it_gets_the_bootstrap(ssh_hosts, tmp_path):
    shared = doctor(ssh_hosts.profile, tmp_path)
    for address in ssh_hosts.addresses:
        where = next(name.split()[0] for name in shared if name.startswith(address))
        for check in ("reachable", "host key", "torch", "bootstrap"):
            assert shared[f"{where} {check}"]["ok"], shared[f"{where} {check}"]
        assert "shared filesystem" in shared[f"{where} bootstrap"]["detail"]
    own = doctor(ssh_hosts.own_disks_profile, tmp_path)
    bootstraps = [c for name, c in own.items() if name.endswith(" bootstrap")]
    assert len(bootstraps) == len(ssh_hosts.addresses)
    assert all(c["ok"] and "copied with each job" in c["detail"] for c in bootstraps), bootstraps
