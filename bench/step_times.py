"""Real step-time distributions, from which the default hang window's numbers are chosen.

Runs, one after another, each unchanged under ``fsdp-orch submit`` on 2 CPU ranks with no ``watch:``
settings: the demo (runtime, FSDP, checkpoints every 50 steps), the HF Trainer script (checkpoints
every 50 steps, logging every 10), the Lightning script (checkpoints every 20 steps) and the
nanoGPT-shaped single-file loop (an evaluation and a checkpoint every 50 iterations). A wrapper
records the time of every optimizer step on every rank; for each job the bench prints the gaps
between steps (p50, p95, p99, max, max / p95), and replays them through the rank summary
(``observe.step_times``) and the estimator (``decide.hang_window``) with the default settings:
the smallest window the job ever had, and every gap longer than the window in force when it began.
Those gaps are what the hang rule's vetoes (Python running, bytes written, a garbage collection,
busy worker processes) must cover, or the default would kill a healthy job. Each job's final state
is printed too: a verdict during a clean run is a false one.

    PYTHONPATH=. .venv/bin/python bench/step_times.py [--json FILE]
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fsdp_orch.decide.hang_window import hang_window  # noqa: E402
from fsdp_orch.jobspec.schema import Watch  # noqa: E402
from fsdp_orch.observe.heartbeats import Heartbeat  # noqa: E402
from fsdp_orch.observe.step_times import StepTimes, percentile  # noqa: E402

RECORDER = '''"""Records the time of every optimizer step of this rank, then runs the script \
given as argv[1]."""
import atexit, json, os, runpy, sys, time
import torch.optim.optimizer as optimizer
times = []
optimizer.register_optimizer_step_post_hook(lambda *_: times.append(time.time()))
def dump():
    with open(os.path.join(os.environ["STEP_TIMES_DIR"], \
f"rank-{os.environ.get('RANK', '0')}.json"), "w") as f:
        json.dump(times, f)
atexit.register(dump)
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
'''

JOBS = {  # name: (example folder, job.yaml overrides: the script's own args where they differ)
    "demo": ("examples/demo", None),
    "hf_trainer": ("examples/unchanged/hf_trainer", None),
    "lightning": ("examples/unchanged/lightning", ["--max-steps", "200", "--every-n-steps", "50"]),
    "nanogpt": ("examples/unchanged/single_file", ["--max_iters=300", "--eval_interval=50"]),
}


def run_job(root: Path, name: str, folder: str, args: list[str] | None) -> dict:
    import yaml

    work = root / name
    shutil.copytree(REPO / folder, work,
                    ignore=shutil.ignore_patterns("checkpoints", "out", "__pycache__",
                                                  "lightning_logs"))
    spec = yaml.safe_load((work / "job.yaml").read_text())
    spec.pop("watch", None)  # the defaults: what a new user gets
    times_dir = work / "step-times"
    times_dir.mkdir()
    (work / "_record_steps.py").write_text(RECORDER)
    spec["args"] = [spec["script"],
                    *[str(a) for a in (args if args is not None else spec.get("args", []))]]
    spec["script"] = "_record_steps.py"
    spec.setdefault("env", {})["STEP_TIMES_DIR"] = str(times_dir)
    spec.setdefault("restart", {})["max_restarts"] = 0  # a verdict in a clean run shows as FAILED
    (work / "job.yaml").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env["FSDP_ORCH_HOME"] = str(root / "home")
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "submit", "--cluster", "local",
                           "--wait", "--json", str(work / "job.yaml")], env=env,
                          capture_output=True, text=True, check=False)
    status = json.loads(proc.stdout) if proc.stdout.strip() else {"state": "?",
                                                                  "stderr": proc.stderr[-2000:]}
    ranks = {int(p.stem.split("-")[1]): json.loads(p.read_text())
             for p in times_dir.glob("rank-*.json")}
    return {"state": status.get("state"),
            "failures": [f.get("category") for f in status.get("failures", [])], **analyse(ranks)}


def analyse(ranks: dict[int, list[float]]) -> dict:
    """The gaps between steps, over all ranks, and the default window replayed step by step."""
    watch = Watch()
    gaps = sorted(b - a for times in ranks.values() for a, b in zip(times, times[1:], strict=False))
    if not gaps:
        return {"steps": 0}
    summaries = {rank: StepTimes() for rank in ranks}
    events = sorted((at, rank) for rank, times in ranks.items() for at in times)
    smallest, over, previous = None, [], {}
    for at, rank in events:
        beats = {r: Heartbeat(rank=r, attempt=0, step=0, loss=None, time=at, state="training",
                              pid=0, step_s=s.summary()) for r, s in summaries.items()}
        window = hang_window(watch, beats)
        if rank in previous and at - previous[rank] > window.seconds:
            over.append(round(at - previous[rank], 2))
        if window.mode == "adaptive":
            smallest = window.seconds if smallest is None else min(smallest, window.seconds)
        summaries[rank].step_at(at)
        previous[rank] = at
    p95 = percentile(gaps, 0.95)
    return {"steps": max(len(t) for t in ranks.values()), "p50": percentile(gaps, 0.5), "p95": p95,
            "p99": percentile(gaps, 0.99), "max": gaps[-1],
            "max_over_p95": gaps[-1] / p95 if p95 else None,
            "smallest_window": smallest, "gaps_over_window": over}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--only", nargs="*", choices=list(JOBS), help="these jobs only")
    opts = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="step-times-") as tmp:
        for name, (folder, args) in JOBS.items():
            if opts.only and name not in opts.only:
                continue
            results[name] = run_job(Path(tmp), name, folder, args)
            print(name, json.dumps(results[name]), file=sys.stderr, flush=True)
    print(f"{'job':<11} {'state':<10} {'steps':>5} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7} "
          f"{'max/p95':>7} {'window':>7}  gaps over the window")
    for name, r in results.items():
        if not r.get("steps"):
            print(f"{name:<11} {r['state']:<10} no steps recorded")
            continue
        print(f"{name:<11} {r['state']:<10} {r['steps']:>5} {r['p50']:>7.3f} {r['p95']:>7.3f} "
              f"{r['p99']:>7.3f} {r['max']:>7.2f} {r['max_over_p95']:>7.1f} "
              f"{r['smallest_window'] or 0:>7.2f}  {r['gaps_over_window']}")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["state"] == "SUCCEEDED" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
