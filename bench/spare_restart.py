"""Decision to the next attempt's first step (issue 45): a node lost on SLURM with
``spare_nodes: 1`` (the next attempt a new job step on the spare, its ranks started from the keeper
that the spare's keeper host kept ready: ``fsdp_orch/standby/host.py``), against the same figure on
local, where the next attempt starts from the warm standby, in one run; and SLURM with
``launch.standby: off`` (cold), for what the standby saves there.

- local (the baseline): the demo on 2 CPU ranks, rank 1 hung at step ``--fault-step``; from the
  hang verdict to the resumed attempt's first step;
- SLURM: the demo on 2 of the test cluster's 3 nodes (1 rank each, one spare); once a checkpoint
  is complete, node 1's agent is killed; from the lost-node verdict to the first step on the spare.

Both read from the job's events (``failure_detected``'s time, ``first_step``'s ``first_step_at``).
The SLURM test cluster must be running (``eval "$(tests/slurm/cluster.sh start)"``); run as root.
Prints each run's figure and the ratio (target: SLURM <= 1.5 x local).

    .venv/bin/python bench/spare_restart.py [--runs 1] [--fault-step 30]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [str(REPO / ".venv" / "bin" / "fsdp-orch")]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def run(cwd: Path, home: Path, *argv: str) -> str:
    env = {**os.environ, "FSDP_ORCH_HOME": str(home)}
    return subprocess.run([*CLI, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True, timeout=600).stdout


def status(cwd: Path, home: Path, job_id: str) -> dict:  # type: ignore[type-arg]
    return json.loads(run(cwd, home, "status", job_id, "--json"))


def wait(cwd: Path, home: Path, job_id: str, done,  # type: ignore[no-untyped-def]
         timeout: float = 600) -> dict:  # type: ignore[type-arg]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = status(cwd, home, job_id)
        if done(found):
            return found
        time.sleep(0.5)
    raise SystemExit(f"job {job_id}: timed out: {found}")


def decision_to_first_step(run_dir: Path) -> float:
    events = [json.loads(line) for path in sorted((run_dir / "events").glob("*.jsonl"))
              for line in path.read_text().splitlines() if line.strip()]
    verdict = min(e["at"] for e in events if e["kind"] == "failure_detected")
    first = min(e["first_step_at"] for e in events
                if e["kind"] == "first_step" and e.get("attempt") == 1)
    return first - verdict


def job_setup(base: Path) -> tuple[Path, Path, Path]:
    cwd, home, shared = base / "work", base / "home", base / "shared"
    for folder in (cwd / "clusters", home, shared):
        folder.mkdir(parents=True)
    profile = (REPO / "clusters" / "slurm.yaml").read_text() + f"shared_dir: {shared}\n"
    (cwd / "clusters" / "slurm.yaml").write_text(profile)
    demo = shared / "demo"
    shutil.copytree(REPO / "examples" / "demo", demo, ignore=shutil.ignore_patterns("checkpoints"))
    return cwd, home, demo / "job.yaml"


COMMON = ["--set", "checkpoint.interval=10", "--set", "restart.backoff.initial=1s",
          "--set", "restart.backoff.jitter=0"]


def local_run(base: Path, fault_step: int) -> float:
    cwd, home, job = job_setup(base)
    job_id = run(cwd, home, "submit", "--cluster", "local", str(job), *COMMON,
                 "--set", 'args=["--steps", "60"]',
                 "--set", f"env.FSDP_ORCH_FAULT=hang:step={fault_step}:rank=1").split()[-1]
    final = wait(cwd, home, job_id, lambda s: s["state"] in TERMINAL)
    assert final["state"] == "SUCCEEDED" and final["attempts"] == 2, final
    return decision_to_first_step(Path(final["run_dir"]))


def node_agent(job_id: str, node: int) -> int:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if (f"FSDP_ORCH_JOB_ID={job_id}".encode() in environ
                and f"FSDP_ORCH_NODE_RANK={node}".encode() in environ
                and b"fsdp_orch.nodeagent" in cmdline):
            return int(entry)
    raise SystemExit(f"job {job_id}: no agent for node {node}")


def how_started(run_dir: Path, attempt: int) -> str:
    """How the attempt's ranks started, as its launchers said (the standby's line), else cold."""
    for log in sorted((run_dir / f"attempt-{attempt}").rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "started from the standby (" in line:
                return line.split("started from the standby (", 1)[1].split(")", 1)[0]
    return "cold"


def slurm_run(base: Path, standby: str) -> float:
    cwd, home, job = job_setup(base)
    job_id = run(cwd, home, "submit", "--cluster", "slurm", str(job), *COMMON,
                 "--set", f"launch.standby={standby}",
                 "--set", "nodes=2", "--set", "spare_nodes=1", "--set", "procs_per_node=1",
                 "--set", "watch.node_timeout=10s",
                 "--set", 'args=["--steps", "300", "--sleep-per-step", "0.1"]').split()[-1]
    wait(cwd, home, job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= 10)
    os.kill(node_agent(job_id, 1), signal.SIGKILL)
    final = wait(cwd, home, job_id, lambda s: s["state"] in TERMINAL)
    assert final["state"] == "SUCCEEDED" and final["attempts"] == 2, final
    assert final["left_out"], final
    print(f"  the spare's ranks: {how_started(Path(final['run_dir']), 1)}", file=sys.stderr)
    return decision_to_first_step(Path(final["run_dir"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fault-step", type=int, default=30)
    args = parser.parse_args()
    if not glob.glob("/tmp/fsdp-orch-slurm/etc/slurm.conf") and "SLURM_CONF" not in os.environ:
        raise SystemExit("start the SLURM test cluster first: tests/slurm/cluster.sh start")
    os.environ.setdefault("SLURM_CONF", "/tmp/fsdp-orch-slurm/etc/slurm.conf")
    os.environ["PATH"] += ":/usr/sbin"
    local, slurm, cold = [], [], []
    with tempfile.TemporaryDirectory(prefix="fsdp-orch-bench-spare-") as tmp:
        for i in range(args.runs):
            local.append(local_run(Path(tmp) / f"local-{i}", args.fault_step))
            print(f"local (warm standby): {local[-1]:.2f} s", file=sys.stderr)
            slurm.append(slurm_run(Path(tmp) / f"slurm-{i}", "auto"))
            print(f"SLURM on the spare (warm standby): {slurm[-1]:.2f} s", file=sys.stderr)
            cold.append(slurm_run(Path(tmp) / f"slurm-cold-{i}", "off"))
            print(f"SLURM on the spare (launch.standby: off): {cold[-1]:.2f} s", file=sys.stderr)
    ratio = statistics.median(slurm) / statistics.median(local)
    print("| figure | local, warm standby | SLURM, spare, warm standby | ratio (target <= 1.5) "
          "| SLURM, spare, standby off |")
    print("|---|---|---|---|---|")
    print(f"| decision to the next attempt's first step, median of {args.runs} | "
          f"{statistics.median(local):.2f} s | {statistics.median(slurm):.2f} s | {ratio:.2f} "
          f"| {statistics.median(cold):.2f} s |")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
