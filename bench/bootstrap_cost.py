"""What the bootstrap (``fsdp_orch/bootstrap/site/sitecustomize.py``) costs a process, against the
same process without it, both measured here:

* start-up: the median wall time of ``python -c pass`` with and without it (interleaved), and
  ``-X importtime``'s cumulative time of ``sitecustomize`` (target < 50 ms);
* per step: a single-process loop of tiny optimizer steps (``Linear(256, 256)``, SGD) in
  subprocesses with and without the bootstrap (interleaved); in the bootstrap's process, the step
  hooks alone, called directly as torch calls them after each step; the agent's step hook timed
  where torch calls it in ``Linear(1024, 1024)`` steps (``hook_in_step_us``: cold there, several
  times its cost in a loop); the agent's step hook in place (``in_situ``: blocks of those steps with
  and without it, interleaved in the bootstrap's process: the hook and every write a step sets off,
  without the process-to-process noise, though not without the machine's); and one heartbeat write,
  which the agent's watcher thread makes every ``TICK_S`` (its I/O releases the GIL; the main thread
  writes one only at a state change).

A step's time is its fastest block's (timeit's rule), in process CPU time (all threads: the agent's
watcher thread included) and in wall time: on a shared machine other processes inflate a median by
tens of percent, far more than the hook costs, and even the fastest blocks of two processes differ
by several microseconds. The hook called alone resolves its cost; a larger step (``Linear(1024,
1024)``) is a reference to set it against.

Used by ``bench/recovery.py``; alone: ``.venv/bin/python bench/bootstrap_cost.py [--steps-only]
[--processes N] [--source DIR]`` (``--source``: the bootstrap of another copy of the package,
``DIR/fsdp_orch``, to set two versions side by side on the same machine). With ``--worker`` it is
the step loop (prints one JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# name, width, batch, steps per block, blocks
TINY = ("Linear(256,256) b32", 256, 32, 200, 40)
LARGER = ("Linear(1024,1024) b32", 1024, 32, 20, 6)
_IMPORTTIME = re.compile(r"import time:\s*(\d+)\s*\|\s*(\d+)\s*\|\s*sitecustomize\s*$", re.M)


def _envs(run_dir: Path, source: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """The plain process's environment and the bootstrap's (``source``: the folder holding the
    ``fsdp_orch`` package to load it from; None: this one)."""
    from fsdp_orch.places.builtin import bootstrap_site_dir

    plain = {k: v
             for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_") and k != "PYTHONPATH"}
    plain["OMP_NUM_THREADS"] = "1"
    path = [str(bootstrap_site_dir())]
    if source is not None:
        path = [os.path.join(source, "fsdp_orch", "bootstrap", "site"), source]
    boot = dict(plain, PYTHONPATH=os.pathsep.join(path), FSDP_ORCH_RUN_DIR=str(run_dir),
                FSDP_ORCH_ATTEMPT="0")
    return plain, boot


def startup_cost(runs: int = 20, source: str | None = None) -> dict:
    """Median ``python -c pass`` with and without the bootstrap, and its ``-X importtime``."""
    with tempfile.TemporaryDirectory() as tmp:
        plain, boot = _envs(Path(tmp), source)
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
    """One heartbeat write as the agent does it, and its share of the time at the rate a training
    rank writes them: every TICK_S, from the watcher thread (counted whole, though its I/O releases
    the GIL). The main thread writes one only when the state changes (a step goes to the step
    mark)."""
    from fsdp_orch.bootstrap.heartbeat_thread import TICK_S
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
    per_s = 1 / TICK_S
    write_us = statistics.median(times)
    return {"write_us": write_us, "writes_per_s": per_s, "main_thread_writes_per_s": 0,
            "wall_share_pct": write_us * per_s / 1e4}


def step_cost(processes: int = 2, source: str | None = None) -> dict:
    """The tiny step with and without the bootstrap (the fastest block of ``processes`` subprocesses
    each, interleaved), the larger step's time without it, the agent's hook in place (the median of
    the bootstrap's processes) and the heartbeat write."""
    with tempfile.TemporaryDirectory() as tmp:
        plain, boot = _envs(Path(tmp), source)
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
                 "hook_us": min(r["hook_us"] for r in runs["bootstrap"]),
                 "hook_in_step_us": statistics.median(r["hook_in_step_us"]
                                                      for r in runs["bootstrap"]),
                 "in_situ": {key: statistics.median(r["in_situ"][key] for r in runs["bootstrap"])
                             for key in runs["bootstrap"][0]["in_situ"]}}
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
    active = bool(current is not None and current.active)
    print(json.dumps({**result, "bootstrap_active": active, "hook_us": _hook_alone_us(opt),
                      "hook_in_step_us": _hook_in_step_us(current, step) if active else None,
                      "in_situ": _in_situ(current, step) if active else {}}))


def _hook_in_step_us(agent: object, step: Callable[[], None], steps: int = 50,
                     rounds: int = 6) -> float:
    """The agent's step hook timed where torch calls it, in larger steps (``step``): between two
    global post hooks of the bench's, against a hook that does nothing in its place (the median
    step of each block, the median block). What it touches is cold there, the step having swept
    the caches: several times what the hook alone costs, called in a loop."""
    from torch.optim.optimizer import _global_optimizer_post_hooks as hooks

    saved = dict(hooks)
    ours = [h for h in saved.values() if getattr(h, "__self__", None) is agent]
    began = [0.0]
    spans: list[float] = []

    def start(*_: object) -> None:
        began[0] = time.perf_counter()

    def end(*_: object) -> None:
        spans.append(time.perf_counter() - began[0])

    def block(middle: list[Callable[..., None]]) -> float:
        hooks.clear()
        for i, hook in enumerate([start, *middle, end]):
            hooks[-1 - i] = hook  # keys of their own: torch's handles count up from 0
        spans.clear()
        for _ in range(steps):
            step()
        return statistics.median(spans) * 1e6

    with_hook, without = [], []
    try:
        for _ in range(rounds):
            with_hook.append(block(ours))
            without.append(block([_nothing]))
    finally:
        hooks.clear()
        hooks.update(saved)
    return statistics.median(with_hook) - statistics.median(without)


def _nothing(*_: object) -> None:
    pass


def _in_situ(agent: object, step: Callable[[], None], steps: int = 60,
             rounds: int = 12) -> dict[str, float]:
    """Blocks of ``steps`` larger steps (``step``: its optimizer counts the most steps, so that the
    hook takes its full path) with the agent's step hook in place and without it (taken out of
    torch's global post hooks), interleaved, in this process: what the hook and the writes a step
    sets off cost, in % of the step. The median round's difference, and the fastest blocks'. The
    watcher thread's ticks run in both."""
    from torch.optim.optimizer import _global_optimizer_post_hooks as hooks

    ours = {k: h for k, h in hooks.items() if getattr(h, "__self__", None) is agent}

    def block(hooked: bool) -> float:
        for key, hook in ours.items():
            if hooked:
                hooks[key] = hook
            else:
                hooks.pop(key, None)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t0) / steps * 1e6

    block(True)
    on, off, diffs = [], [], []
    for i in range(rounds):
        first = i % 2 == 0  # the order alternates: a drift of the machine's load cancels
        a, b = block(first), block(not first)
        with_us, without_us = (a, b) if first else (b, a)
        on.append(with_us)
        off.append(without_us)
        diffs.append(100 * (with_us - without_us) / without_us)
    block(True)
    return {"step_us": statistics.median(off), "median_pct": statistics.median(diffs),
            "fastest_pct": 100 * (min(on) - min(off)) / min(off)}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--steps-only", action="store_true", help="leave out the start-up cost")
    parser.add_argument("--processes", type=int, default=2,
                        help="subprocesses with and without the bootstrap (default 2 each)")
    parser.add_argument("--source", help="measure the bootstrap of SOURCE/fsdp_orch instead")
    args = parser.parse_args()
    if args.worker:
        _worker()
        return
    source = os.path.abspath(args.source) if args.source else None
    out = {} if args.steps_only else {"startup": startup_cost(source=source)}
    out["step"] = step_cost(args.processes, source)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
