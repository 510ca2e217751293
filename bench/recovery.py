"""Recovery benchmark on the local cluster with the example job (2 CPU ranks, gloo), in one run:

1. hang detection latency: from the hung rank's last heartbeat to the supervisor's decision
   (target: within heartbeat_timeout + 2 s, with a 10 s heartbeat timeout);
2. time to recover: from the decision to the first completed step of the next attempt (target < 15 s;
   the first step is seen at the supervisor's poll, so this errs long by up to one poll interval);
3. goodput under a fault every ~30 s of training: time on steps that were kept / wall time (target >= 70%);
4. the baseline: the same hang under plain `torchrun --max-restarts 3` with the job's collective timeout:
   the time until torchrun reacts at all.

    .venv/bin/python bench/recovery.py [--collective-timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fsdp_orch.heartbeats import read_heartbeats
from fsdp_orch.proctree import job_processes_with, signal_pids
from fsdp_orch.store import Store

REPO = Path(__file__).resolve().parents[1]
HEARTBEAT_TIMEOUT = 10.0


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env["FSDP_ORCH_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "fsdp_orch", *args], env=env, capture_output=True,
                          text=True, check=False)


def copy_demo(root: Path) -> Path:
    shutil.copytree(REPO / "examples" / "demo", root / "demo",
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    return root / "demo" / "job.yaml"


def submit_wait(home: Path, job: Path, *sets: str) -> tuple[dict, float]:
    args = ["submit", "--cluster", "local", "--wait", "--json", str(job)]
    for s in sets:
        args += ["--set", s]
    t0 = time.time()
    proc = cli(home, *args)
    wall = time.time() - t0
    if not proc.stdout.strip():
        raise SystemExit(f"submit failed: {proc.stderr}")
    return json.loads(proc.stdout), wall


def hang_and_recovery(root: Path, collective_timeout: float) -> dict:
    home = root / "hang-home"
    job = copy_demo(root / "hang")
    status, _ = submit_wait(home, job, "args=[--steps, 60]", "checkpoint.interval=10",
                            f"watch.heartbeat_timeout={HEARTBEAT_TIMEOUT}s", "restart.backoff.initial=1s",
                            "restart.backoff.jitter=0", f"watch.collective_timeout={collective_timeout}s",
                            "env.FSDP_ORCH_FAULT=hang:step=30:rank=1")
    store = Store(home / "jobs.db")
    failure = store.conn.execute("SELECT detected_at, category FROM failures WHERE job_id = ?",
                                 (status["id"],)).fetchone()
    hung_last_beat = read_heartbeats(home / "runs" / status["id"], 0)[1].time
    attempts = store.attempts(status["id"])
    return {"state": status["state"], "category": failure[1],
            "detection_s": failure[0] - hung_last_beat,
            "recovery_s": attempts[1]["first_step_at"] - failure[0]}


def goodput(root: Path) -> dict:
    """Faults every ~30 s of training; kept-step time from a clean run's step time."""
    home = root / "goodput-home"
    job = copy_demo(root / "goodput")
    clean, clean_wall = submit_wait(home, job, "name=clean", "args=[--steps, 40]")
    clean_attempt = Store(home / "jobs.db").attempts(clean["id"])[0]
    step_time = (clean_attempt["ended_at"] - clean_attempt["first_step_at"]) / 39
    steps_per_fault = max(20, int(30.0 / step_time))
    faults = ";".join(f"{kind}:step={steps_per_fault * (i + 1)}:rank={i % 2}:attempt={i}"
                      for i, kind in enumerate(["crash", "kill", "hang"]))
    total = steps_per_fault * 4
    status, wall = submit_wait(home, job, "name=faulty", f"args=[--steps, {total}]",
                               f"checkpoint.interval={max(5, steps_per_fault // 6)}",
                               f"watch.heartbeat_timeout={HEARTBEAT_TIMEOUT}s", "restart.backoff.initial=1s",
                               "restart.backoff.jitter=0", "restart.max_restarts=5",
                               f"env.FSDP_ORCH_FAULT={faults}")
    kept = total * step_time
    return {"state": status["state"], "faults": len(status["failures"]),
            "categories": [f["category"] for f in status["failures"]], "steps": total,
            "step_time_s": step_time, "wall_s": wall, "kept_s": kept, "goodput": kept / wall}


def torchrun_baseline(root: Path, collective_timeout: float) -> dict:
    """Plain torchrun --max-restarts 3: how long until it reacts to the hang at all."""
    work = root / "baseline"
    job = copy_demo(work)
    run_dir = work / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    spec = {"watch": {"collective_timeout": collective_timeout}}
    (work / "spec.json").write_text(json.dumps(spec))
    env.update(FSDP_ORCH_FAULT="hang:step=30:rank=1", FSDP_ORCH_RUN_DIR=str(run_dir),
               FSDP_ORCH_SPEC=str(work / "spec.json"), FSDP_ORCH_CHECKPOINT_DIR=str(work / "ckpt"),
               OMP_NUM_THREADS="1")
    cap = collective_timeout + 60
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node", "2", "--max-restarts", "3", str(job.parent / "train.py"),
                             "--steps", "60"], cwd=job.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    reacted = None
    t_end = time.time() + cap
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    buffer = ""
    while time.time() < t_end and reacted is None and proc.poll() is None:
        try:
            buffer += os.read(proc.stdout.fileno(), 1 << 16).decode(errors="replace")
        except BlockingIOError:
            pass
        if re.search(r"Timed out|Connection closed|Restarting worker|restart_count|FAILED", buffer):
            reacted = time.time()
        time.sleep(0.2)
    os.killpg(proc.pid, 9)
    proc.wait()
    # torchrun starts its workers in sessions of their own: the hung rank outlives the group kill.
    signal_pids(job_processes_with(f"FSDP_ORCH_RUN_DIR={run_dir}"), 9)
    beats = read_heartbeats(run_dir, 0)
    last = beats[1].time if 1 in beats else None
    return {"reacted_after_s": (reacted - last) if (reacted and last) else None,
            "still_hung_after_s": None if reacted else (t_end - last if last else cap)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collective-timeout", type=float, default=60.0,
                        help="the job's collective timeout, also given to the plain-torchrun baseline")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hang = hang_and_recovery(root, args.collective_timeout)
        print("hang run:", json.dumps(hang), flush=True)
        good = goodput(root)
        print("goodput run:", json.dumps(good), flush=True)
        base = torchrun_baseline(root, args.collective_timeout)
        print("baseline run:", json.dumps(base), flush=True)
    print(f"hang detection: {hang['detection_s']:.1f} s after the hung rank's last heartbeat "
          f"(heartbeat_timeout {HEARTBEAT_TIMEOUT:g} s; target <= {HEARTBEAT_TIMEOUT + 2:g} s); "
          f"category {hang['category']}, job {hang['state']}")
    print(f"time to recover: {hang['recovery_s']:.1f} s from the decision to the next attempt's first step "
          f"(target < 15 s)")
    print(f"goodput: {good['goodput']:.1%} ({good['kept_s']:.0f} s of kept steps in {good['wall_s']:.0f} s wall; "
          f"{good['faults']} faults {good['categories']} over {good['steps']} steps at "
          f"{good['step_time_s']:.2f} s/step; job {good['state']}; target >= 70%)")
    if base["reacted_after_s"] is not None:
        ratio = base["reacted_after_s"] / hang["detection_s"]
        print(f"baseline torchrun --max-restarts 3 (collective timeout {args.collective_timeout:g} s): reacted "
              f"{base['reacted_after_s']:.1f} s after the hang; fsdp-orch detects it {ratio:.1f}x sooner")
    else:
        ratio = base["still_hung_after_s"] / hang["detection_s"]
        print(f"baseline torchrun --max-restarts 3: still hung {base['still_hung_after_s']:.0f} s after the hang "
              f"(gave up waiting); fsdp-orch detects it more than {ratio:.1f}x sooner")
    ok = (hang["state"] == "SUCCEEDED" and good["state"] == "SUCCEEDED"
          and hang["detection_s"] <= HEARTBEAT_TIMEOUT + 2 and hang["recovery_s"] < 15
          and good["goodput"] >= 0.70)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
