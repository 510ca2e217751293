"""Slowing one rank to half the speed of another with cpu cgroups (v1): what the straggler tests
(local, SLURM, SSH hosts) do to a running job's processes, all of which run on this machine; and
the steps those tests share (the job training, its ranks' nodes, the straggler named)."""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

from status_sampling import beat_glob

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
# The demo with batches of 32 (its default: 8), so that a step mostly computes, as on a GPU node. At
# 8, gloo's exchange took most of a step: a rank at half speed made the other wait only 15-16% of
# it, at the rule's threshold (named after 97 s on the sshd hosts; at 60.5 s on local, in the CI of
# 1787c8d).
COMPUTE_BOUND = 'args=["--steps", "100000", "--batch-size", "32"]'


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


def until_training(cli, job_id: str) -> None:  # type: ignore[no-untyped-def]
    """Until the job has stepped 5 times (or ended)."""
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 5
                   or s["state"] not in ("PENDING", "RUNNING"), timeout=300,
                   what="the demo training")


def ranks_by_node(job_id: str) -> dict[int, tuple[int, int]]:
    """{node rank: (its rank, the rank's pid)} of attempt 0, from the heartbeats in the nodes'
    node-local folders (the nodes run here). Which rank a node gets is the rendezvous' choice."""
    found = {}
    for beat in glob.glob(beat_glob(job_id, rank="*", attempt=0)):  # type: ignore[arg-type]
        data = json.loads(Path(beat).read_text())
        found[int(Path(beat).parent.name.split("-")[1])] = (data["rank"], data["pid"])
    return found


def until_straggler_named(cli, job_id: str) -> tuple[dict, float]:  # type: ignore[no-untyped-def,type-arg]
    """Until a straggler is named (or the job stops running): the event, and the seconds the wait
    took."""
    since = time.monotonic()
    status = cli.wait_until(job_id, lambda s: any(e["kind"] == "straggler" for e in s["events"])
                            or s["state"] != "RUNNING", timeout=180, what="a straggler named")
    took = time.monotonic() - since
    [event] = [e for e in status["events"] if e["kind"] == "straggler"]
    return event, took
