"""Does ``status`` tell the truth about a healthy job's progress? The demo (2 CPU ranks, 0.1 s of
sleep a step), polled with ``fsdp-orch status JOB --json`` every 0.5 s beside rank 0's own
heartbeat file: the samples marked stalled, and how long before each sample the rank had already
passed the step it showed. Once idle, once beside ``stress-ng --cpu N`` (each in the same run).

Targets (issue 43): 0 samples stalled; step lag at most 1 s plus one step.

    .venv/bin/python bench/status_truth.py [--steps 300] [--stress 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from status_sampling import RankSteps, beat_glob, cli_status, lags, sample_status  # noqa: E402


def one_run(steps: int, stress: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="status-truth-") as tmp:
        demo = Path(tmp) / "demo"
        shutil.copytree(REPO / "examples" / "demo", demo)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
        env["FSDP_ORCH_HOME"] = str(Path(tmp) / "home")
        args = json.dumps(["--steps", str(steps), "--seq-len", "64", "--sleep-per-step", "0.1"])
        load = (subprocess.Popen(["stress-ng", "--cpu", str(stress), "--quiet"])
                if stress else None)
        try:
            job_id = subprocess.run(
                [sys.executable, "-m", "fsdp_orch", "submit", "--cluster", "local",
                 str(demo / "job.yaml"), "--set", f"args={args}"],
                env=env, capture_output=True, text=True, check=True).stdout.strip()
            rank = RankSteps(beat_glob(job_id)).start()
            samples = sample_status(cli_status(env, job_id),
                                    lambda s: s["state"] not in ("PENDING", "RUNNING"),
                                    timeout=1800)
            rank.stop()
        finally:
            if load is not None:
                load.terminate()
                load.wait()
    lagged = sorted(lags(samples, rank))
    step_s = rank.step_time()
    return {"stress": stress, "samples": len(samples), "running_samples": len(lagged),
            "stalled_samples": sum(s.stalled_for_s is not None for s in samples),
            "final_state": samples[-1].state, "step_s": round(step_s, 3),
            "lag_median_s": round(lagged[len(lagged) // 2], 2) if lagged else None,
            "lag_max_s": round(lagged[-1], 2) if lagged else None,
            "target_s": round(1.0 + step_s, 2),
            "met": bool(lagged) and lagged[-1] <= 1.0 + step_s
            and not any(s.stalled_for_s is not None for s in samples)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--stress", type=int, default=2, help="stress-ng --cpu N for the second run")
    args = p.parse_args()
    for stress in (0, args.stress):
        print(json.dumps(one_run(args.steps, stress)), flush=True)


if __name__ == "__main__":
    main()
