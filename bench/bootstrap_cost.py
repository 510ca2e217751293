"""What the bootstrap (``fsdp_orch/bootstrap/site/sitecustomize.py``) costs a process, against the
same process without it, both measured here:

* start-up: the median wall time of ``python -c pass`` with and without it (interleaved), and
  ``-X importtime``'s cumulative time of ``sitecustomize`` (target < 50 ms);
* per step: a single-process loop of tiny optimizer steps (``Linear(256, 256)``, SGD) in
  subprocesses with and without the bootstrap (interleaved); in the bootstrap's process, the step
  hooks alone, called directly as torch calls them after each step; and one heartbeat write, which
  the agent does on the main thread at most 5 times a second (its watcher thread's writes release
  the GIL in I/O).

A step's time is its fastest block's (timeit's rule), in process CPU time (all threads: the agent's
watcher thread included) and in wall time: on a shared machine other processes inflate a median by
tens of percent, far more than the hook costs, and even the fastest blocks of two processes differ
by several microseconds. The hook called alone resolves its cost; a larger step (``Linear(1024,
1024)``) is a reference to set it against.

Used by ``bench/recovery.py``; alone: ``.venv/bin/python bench/bootstrap_cost.py``. With
``--worker`` it is the step loop (prints one JSON object).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name, width, batch, steps per block, blocks
TINY = ("Linear(256,256) b32", 256, 32, 200, 40)
LARGER = ("Linear(1024,1024) b32", 1024, 32, 20, 6)
_IMPORTTIME = re.compile(r"import time:\s*(\d+)\s*\|\s*(\d+)\s*\|\s*sitecustomize\s*$", re.M)


def _envs(run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    from fsdp_orch.places.builtin import bootstrap_site_dir

    plain = {k: v
             for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_") and k != "PYTHONPATH"}
    plain["OMP_NUM_THREADS"] = "1"
    boot = dict(plain, PYTHONPATH=str(bootstrap_site_dir()), FSDP_ORCH_RUN_DIR=str(run_dir),
                FSDP_ORCH_ATTEMPT="0")
    return plain, boot


def startup_cost(runs: int = 20) -> dict:
    """Median ``python -c pass`` with and without the bootstrap, and its ``-X importtime``."""
    with tempfile.TemporaryDirectory() as tmp:
        plain, boot = _envs(Path(tmp))
        times: dict[str, list[float]] = {"plain": [], "bootstrap": []}
        for _ in range(runs):
            for name, env in (("plain", plain), ("bootstrap", boot)):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
                times[name].append(time.perf_counter() - t0)
        imports = []
        for _ in range(5):
            proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=boot,
                                  capture_output=True, text=True, check=True)
            found = _IMPORTTIME.findall(proc.stderr)
            if found:
                imports.append(int(found[-1][1]) / 1000)
    plain_ms = statistics.median(times["plain"]) * 1000
    boot_ms = statistics.median(times["bootstrap"]) * 1000
    return {"plain_ms": plain_ms, "bootstrap_ms": boot_ms, "delta_ms": boot_ms - plain_ms,
            "sitecustomize_import_ms": statistics.median(imports) if imports else None,
            "runs": runs}


def heartbeat_write_cost(writes: int = 300) -> dict:
    """One heartbeat write as the agent does it, and its share of the main thread's time at the most
    frequent writing there (after a step, at most every STEP_WRITE_MIN_S)."""
    from fsdp_orch.bootstrap.heartbeat_thread import STEP_WRITE_MIN_S
    from fsdp_orch.observe.heartbeats import Heartbeat, write_heartbeat

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank-0.json"
        times = []
        for step in range(writes):
            t0 = time.perf_counter()
            now = time.time()
            write_heartbeat(path, Heartbeat(rank=0, attempt=0, step=step, loss=None, time=now,
                                            state="training", pid=os.getpid(), progress_at=now,
                                            python_at=now, host="bench"))
            times.append((time.perf_counter() - t0) * 1e6)
    per_s = 1 / STEP_WRITE_MIN_S
    write_us = statistics.median(times)
    return {"write_us": write_us, "main_thread_writes_per_s": per_s,
            "wall_share_pct": write_us * per_s / 1e4}


def step_cost(processes: int = 2) -> dict:
    """The tiny step with and without the bootstrap (the fastest block of ``processes`` subprocesses
    each, interleaved), the larger step's time without it, and the heartbeat write."""
    with tempfile.TemporaryDirectory() as tmp:
        plain, boot = _envs(Path(tmp))
        runs: dict[str, list[dict]] = {"plain": [], "bootstrap": []}
        for _ in range(processes):
            for name, env in (("plain", plain), ("bootstrap", boot)):
                proc = subprocess.run([sys.executable, __file__, "--worker"], env=env,
                                      capture_output=True, text=True, check=True)
                runs[name].append(json.loads(proc.stdout))
    if not all(r["bootstrap_active"] for r in runs["bootstrap"]) or \
            any(r["bootstrap_active"] for r in runs["plain"]):
        raise SystemExit(f"bootstrap cost: the bootstrap was not active where expected: {runs}")
    out: dict = {"tiny": TINY[0], "larger": LARGER[0], "processes": processes,
                 "hook_us": min(r["hook_us"] for r in runs["bootstrap"])}
    for clock in ("cpu_us", "wall_us"):
        plain_us = min(r[TINY[0]][clock] for r in runs["plain"])
        boot_us = min(r[TINY[0]][clock] for r in runs["bootstrap"])
        larger_us = min(r[LARGER[0]][clock] for r in runs["plain"])
        out[clock] = {"plain_us": plain_us, "bootstrap_us": boot_us,
                      "overhead_us": boot_us - plain_us,
                      "overhead_pct": 100 * (boot_us - plain_us) / plain_us,
                      "larger_plain_us": larger_us,
                      "larger_overhead_pct": 100 * (boot_us - plain_us) / larger_us}
    out["heartbeat_write"] = heartbeat_write_cost()
    return out


def _worker() -> None:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    result: dict[str, dict[str, float]] = {}
    for name, width, batch, steps, blocks in (TINY, LARGER):
        model = torch.nn.Linear(width, width)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, width)

        def step(model: torch.nn.Module = model, opt: torch.optim.Optimizer = opt,
                 x: torch.Tensor = x) -> None:
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()

        for _ in range(steps):
            step()
        wall, cpu = [], []
        for _ in range(blocks):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                step()
            cpu.append((time.process_time() - c0) / steps * 1e6)
            wall.append((time.perf_counter() - t0) / steps * 1e6)
        result[name] = {"cpu_us": min(cpu), "wall_us": min(wall)}
    agent = sys.modules.get("fsdp_orch.bootstrap.agent")
    current = agent.current() if agent is not None else None
    print(json.dumps({**result, "bootstrap_active": bool(current is not None and current.active),
                      "hook_us": _hook_alone_us(opt)}))


def _hook_alone_us(opt: object, calls: int = 5000, blocks: int = 10) -> float:
    """The global optimizer-step post hooks (the agent's, in the bootstrap's process), called as
    torch calls them after a step: the fastest block's time per step."""
    from torch.optim.optimizer import _global_optimizer_post_hooks

    hooks = list(_global_optimizer_post_hooks.values())
    best = float("inf")
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            for hook in hooks:
                hook(opt, (), {})
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker()
    else:
        print(json.dumps({"startup": startup_cost(), "step": step_cost()}, indent=1))
