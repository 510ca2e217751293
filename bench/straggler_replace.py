"""After a straggler is replaced (issue 45): does the job step as fast as before it slowed? One run
on the SLURM test cluster: the demo (batches of 32) on 2 of its 3 nodes, 1 rank each, one spare,
``watch.stragglers: replace``.

- healthy (the baseline, the same run): the step rate over ``--window`` seconds once it trains;
- then the rank on node 1 runs at half the speed of node 0's (cpu cgroups, tests/cpu_caps.py): the
  step rate while it is slowed, until the straggler is named and its node swapped for the spare at
  the next checkpoint;
- after: the step rate over ``--window`` seconds of the next attempt (on the spare), from its
  fifth step on.

Steps and times are read from ``fsdp-orch status --json`` every 0.5 s. Prints the three rates and
the ratio after / healthy (target: >= 0.9, within 10%). The SLURM test cluster must be running
(``eval "$(tests/slurm/cluster.sh start)"``); run as root (cgroups).

    .venv/bin/python bench/straggler_replace.py [--window 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from cpu_caps import COMPUTE_BOUND, half_speed, ranks_by_node, remove  # noqa: E402

CLI = [str(REPO / ".venv" / "bin" / "fsdp-orch")]


def status(cwd: Path, env: dict, job_id: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([*CLI, "status", job_id, "--json"], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def rate(samples: list[tuple[float, int, int]], attempt: int, start: float,
         end: float) -> float:
    """Steps a second of ``attempt`` between the times ``start`` and ``end``."""
    inside = [(t, step) for t, a, step in samples if a == attempt and start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        raise SystemExit(f"too few samples of attempt {attempt} in [{start:.0f}, {end:.0f}]")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    os.environ.setdefault("SLURM_CONF", "/tmp/fsdp-orch-slurm/etc/slurm.conf")
    os.environ["PATH"] += ":/usr/sbin"
    with tempfile.TemporaryDirectory(prefix="fsdp-orch-bench-replace-") as tmp:
        base = Path(tmp)
        cwd, home, shared = base / "work", base / "home", base / "shared"
        for folder in (cwd / "clusters", home, shared):
            folder.mkdir(parents=True)
        profile = (REPO / "clusters" / "slurm.yaml").read_text() + f"shared_dir: {shared}\n"
        (cwd / "clusters" / "slurm.yaml").write_text(profile)
        shutil.copytree(REPO / "examples" / "demo", shared / "demo",
                        ignore=shutil.ignore_patterns("checkpoints"))
        env = {**os.environ, "FSDP_ORCH_HOME": str(home)}
        job_id = subprocess.run(
            [*CLI, "submit", "--cluster", "slurm", str(shared / "demo" / "job.yaml"),
             "--set", "nodes=2", "--set", "spare_nodes=1", "--set", "procs_per_node=1",
             "--set", "checkpoint.interval=25", "--set", "restart.backoff.initial=1s",
             "--set", "restart.backoff.jitter=0", "--set", "watch.stragglers=replace",
             "--set", COMPUTE_BOUND], cwd=cwd, env=env, check=True, capture_output=True,
            text=True).stdout.strip()
        samples: list[tuple[float, int, int]] = []
        marks: dict[str, float] = {}
        group = None
        try:
            deadline = time.time() + 900
            while time.time() < deadline:
                now, s = time.time(), status(cwd, env, job_id)
                step = (s.get("progress") or {}).get("step")
                attempt = s["attempts"] - 1
                if step is not None:
                    samples.append((now, attempt, step))
                    if attempt == 0 and step >= 5 and "trains" not in marks:
                        marks["trains"] = now
                if "trains" in marks and "slowed" not in marks \
                        and now >= marks["trains"] + args.window:
                    nodes = ranks_by_node(job_id)
                    group = half_speed(nodes[0][1], nodes[1][1], f"fsdp-orch-bench-{job_id}")
                    marks["slowed"] = now
                if attempt == 1 and step is not None and "after" not in marks:
                    first = min(st for _, a, st in samples if a == 1)
                    if step >= first + 5:
                        marks["after"] = now
                if "after" in marks and now >= marks["after"] + args.window:
                    break
                time.sleep(0.5)
            else:
                raise SystemExit(f"job {job_id}: no replacement within 900 s: {s}")
        finally:
            subprocess.run([*CLI, "cancel", job_id], cwd=cwd, env=env, capture_output=True)
            if group is not None:
                remove(group)
        replaced_at = min(t for t, a, _ in samples if a == 1)
        healthy = rate(samples, 0, marks["trains"], marks["slowed"])
        slowed = rate(samples, 0, marks["slowed"], replaced_at)
        after = rate(samples, 1, marks["after"], marks["after"] + args.window)
        print(f"slowed to replaced: {replaced_at - marks['slowed']:.1f} s", file=sys.stderr)
        print("| step rate | healthy (attempt 0) | slowed | after the replacement (attempt 1) "
              "| after / healthy (target >= 0.9) |")
        print("|---|---|---|---|---|")
        print(f"| steps/s | {healthy:.2f} | {slowed:.2f} | {after:.2f} | {after / healthy:.2f} |")
        return 0 if after / healthy >= 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
