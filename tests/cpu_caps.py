"""Slowing one rank to half the speed of another with cpu cgroups (v1): what the straggler tests
(local, SLURM, SSH hosts) do to a running job's processes, all of which run on this machine."""

from __future__ import annotations

import time
from pathlib import Path

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


def half_speed(peer: int, slowed: int, name: str) -> Path:
    """Rank ``slowed`` at half the speed of rank ``peer``, loaded or not: each (every thread) in a
    cpu cgroup of its own, the peer with a core and the default share, the slowed one with half of
    each (a share alone does nothing on idle cores; a quota alone, nothing on contended ones)."""
    group = CPU_CGROUP / name
    for pid, sub, quota, shares in ((peer, "peer", 100000, 1024), (slowed, "slowed", 50000, 512)):
        (group / sub).mkdir(parents=True)
        (group / sub / "cpu.cfs_period_us").write_text("100000")
        (group / sub / "cpu.cfs_quota_us").write_text(str(quota))
        (group / sub / "cpu.shares").write_text(str(shares))
        (group / sub / "cgroup.procs").write_text(str(pid))
    return group


def remove(group: Path) -> None:
    deadline = time.monotonic() + 30
    while group.exists() and time.monotonic() < deadline:
        try:  # once the ranks have exited
            for sub in ("peer", "slowed"):
                if (group / sub).exists():
                    (group / sub).rmdir()
            group.rmdir()
        except OSError:
            time.sleep(0.5)
