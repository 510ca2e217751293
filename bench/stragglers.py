"""Stragglers (issue 45): how fast a rank slowed to half speed is named, and whether a healthy run
ever names one, in one run. The demo (default model, 2 CPU ranks) twice, each for ``--seconds``:

- healthy (the baseline): the stragglers named (false positives), and the largest share of the
  time the others waited for one rank over any ROUNDS rounds, read from the ranks' own heartbeats
  with the supervisor's rule (how far below WAIT_FRACTION a healthy run stays);
- slowed: once it trains, rank 1 runs at half rank 0's speed, loaded or not (each in a cpu cgroup
  of its own, v1: rank 0 with a core and the default share, rank 1 with half of each); the seconds
  from then to the ``straggler`` event, and the share it names.

Run as root (cgroups). ``--stress N`` runs ``stress-ng --cpu N`` beside both.

    .venv/bin/python bench/stragglers.py [--seconds 120] [--stress 0]
"""

from __future__ import annotations

import argparse
import glob
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

from status_sampling import beat_glob  # noqa: E402

from fsdp_orch.decide.stragglers import ROUNDS, WAIT_FRACTION, median_step_ms  # noqa: E402
from fsdp_orch.observe.arrivals import round_of  # noqa: E402
from fsdp_orch.observe.heartbeats import parse_heartbeat  # noqa: E402

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


def half_speed(peer: int, slowed: int, name: str) -> Path:
    """Rank ``slowed`` at half the speed of rank ``peer``, loaded or not: each in a cpu cgroup of
    its own, the peer with a core and the default share, the slowed one with half of each."""
    group = CPU_CGROUP / name
    for pid, sub, quota, shares in ((peer, "peer", 100000, 1024), (slowed, "slowed", 50000, 512)):
        (group / sub).mkdir(parents=True)
        (group / sub / "cpu.cfs_quota_us").write_text(str(quota))
        (group / sub / "cpu.shares").write_text(str(shares))
        (group / sub / "cgroup.procs").write_text(str(pid))
    return group


def remove(group: Path) -> None:
    """The cgroups, once their processes have exited."""
    for _ in range(60):
        try:
            for sub in ("peer", "slowed"):
                if (group / sub).exists():
                    (group / sub).rmdir()
            group.rmdir()
            return
        except OSError:
            time.sleep(0.5)


def cli(env: dict, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "fsdp_orch", *args], env=env,
                          capture_output=True, text=True, check=True).stdout


def beats(job_id: str) -> dict:
    out = {}
    for rank in (0, 1):
        for path in glob.glob(beat_glob(job_id, rank=rank)):
            try:
                out[rank] = parse_heartbeat(Path(path).read_text())
            except (OSError, ValueError):
                pass
    return out


def one_run(seconds: float, slow: bool, stress: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="stragglers-") as tmp:
        demo = Path(tmp) / "demo"
        shutil.copytree(REPO / "examples" / "demo", demo,
                        ignore=shutil.ignore_patterns("checkpoints", "result.json"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
        env["FSDP_ORCH_HOME"] = str(Path(tmp) / "home")
        load = (subprocess.Popen(["stress-ng", "--cpu", str(stress), "--quiet"])
                if stress else None)
        group, slowed_at, named_after, rounds, shares, steps = None, None, None, [], [], []
        named: list[dict] = []
        asked = 0.0
        job_id = cli(env, "submit", "--cluster", "local", str(demo / "job.yaml"),
                     "--set", 'args=["--steps", "100000"]').split()[-1]
        try:
            started = time.monotonic()
            judged = None
            while time.monotonic() - started < seconds:
                time.sleep(0.5)
                seen = beats(job_id)
                if len(seen) < 2:
                    continue
                steps.append((time.monotonic(), seen[0].step))
                if slow and group is None and seen[0].step >= 5:
                    group = half_speed(seen[0].pid, seen[1].pid, f"bench-stragglers-{job_id}")
                    slowed_at, steps = time.monotonic(), []
                samples = {r: b.arrivals for r, b in seen.items() if b.arrivals}
                at = {s["at"] for s in samples.values()}
                if len(samples) == 2 and len(at) == 1 and at != {judged}:
                    judged = at.pop()
                    one = round_of(samples, median_step_ms(seen))
                    if one is not None:
                        rounds.append(one)
                    if len(rounds) >= ROUNDS:
                        last = rounds[-ROUNDS:]
                        span = sum(r.span_ms for r in last)
                        shares.append(max(sum(r.leads[k] for r in last) / span for k in (0, 1)))
                if time.monotonic() - asked < 2.0:
                    continue
                asked = time.monotonic()
                status = json.loads(cli(env, "status", job_id, "--json"))
                named = [e for e in status["events"] if e["kind"] == "straggler"]
                if slow and named and named_after is None:
                    named_after = time.monotonic() - (slowed_at or started)
                    break
        finally:
            subprocess.run([sys.executable, "-m", "fsdp_orch", "cancel", job_id], env=env,
                           capture_output=True)
            if load is not None:
                load.terminate()
                load.wait()
            if group is not None:
                remove(group)
    rate = ((steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0])
            if len(steps) >= 2 and steps[-1][0] > steps[0][0] else None)
    return {"slow": slow, "stress": stress, "rounds": len(rounds),
            "named": [e["message"] for e in named],
            "named_after_s": None if named_after is None else round(named_after, 1),
            "max_share_over_rounds": round(max(shares), 3) if shares else None,
            "steps_per_s": None if rate is None else round(rate, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--stress", type=int, default=0)
    args = p.parse_args()
    healthy = one_run(args.seconds, slow=False, stress=args.stress)
    print(json.dumps(healthy))
    slowed = one_run(args.seconds, slow=True, stress=args.stress)
    print(json.dumps(slowed))
    print(json.dumps({
        "false_positives": len(healthy["named"]),
        "healthy_max_share_over_threshold": (
            None if healthy["max_share_over_rounds"] is None
            else round(healthy["max_share_over_rounds"] / WAIT_FRACTION, 2)),
        "detected_after_s": slowed["named_after_s"], "target_s": 60,
        "slowed_step_rate_over_healthy": (
            None if not (healthy["steps_per_s"] and slowed["steps_per_s"])
            else round(slowed["steps_per_s"] / healthy["steps_per_s"], 2)),
        "met": not healthy["named"] and slowed["named_after_s"] is not None
        and slowed["named_after_s"] <= 60}))


if __name__ == "__main__":
    main()
