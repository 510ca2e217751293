"""How fast is ``fsdp-orch status --json`` over a store of 10,000 jobs, against ``python -c pass``?

Both are timed in the same run (the machines are noisy), as medians of several runs.
Targets: ratio under 4, status under 300 ms.

    .venv/bin/python bench/cli_latency.py [--jobs 10000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fsdp_orch.places.home import store_path
from fsdp_orch.record.status import Failure, JobStatus
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.states import JobState

CATEGORIES = ["hang", "nccl_timeout", "gloo_timeout_or_peer_lost", "preemption_or_node_lost"]


def a_status(home: Path, i: int, jobs: int, rng: random.Random, now: float) -> JobStatus:
    """Job ``i`` as its events would fold: a real index is mostly finished jobs, a few running."""
    job_id = f"{i:012x}"
    state = (JobState.RUNNING.value if i >= jobs - 20 else
             rng.choice([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]).value)
    created = now + i * 60
    return JobStatus(
        id=job_id, name=f"job-{i % 97}", cluster="local", kind="local",
        run_dir=str(home / "runs" / job_id),
        created_at=created, state=state, attempts=1 + i % 3, restarts=i % 3,
        ended_at=created + 30 if state != JobState.RUNNING.value else None,
        last_checkpoint_step=(i % 7) * 50, progress_step=(i % 7) * 50 + 3,
        progress_loss=rng.random() * 5,
        progress_at=created + 20,
        failures=[Failure(attempt, rng.choice(CATEGORIES), "evidence line", created + 10, 12.5,
                          "restart", None)
                  for attempt in range(i % 3)])


def fill_store(home: Path, jobs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    store = Store(store_path(str(home)))
    now = time.time() - jobs * 60
    for i in range(jobs):
        store.put(a_status(home, i, jobs, rng, now))
    store.close()


def time_command(argv: list[str], env: dict[str, str], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    cli = Path(sys.executable).parent / "fsdp-orch"
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fill_store(home, args.jobs)
        env = {**os.environ, "FSDP_ORCH_HOME": str(home)}
        out = subprocess.run([str(cli), "status", "--json"], env=env, capture_output=True,
                             text=True, check=True).stdout
        listed = json.loads(out)
        assert len(listed) == args.jobs, f"status listed {len(listed)} jobs, expected {args.jobs}"
        # An installed wheel has its bytecode compiled by pip; a checkout may run with
        # PYTHONDONTWRITEBYTECODE set (and compile fsdp_orch on every start): compile it once here.
        import compileall

        import fsdp_orch

        compileall.compile_dir(str(Path(fsdp_orch.__file__).parent), quiet=1)
        time_command([sys.executable, "-c", "pass"], env, 3)  # warm the page cache
        baseline = time_command([sys.executable, "-c", "pass"], env, args.repeat)
        status = time_command([str(cli), "status", "--json"], env, args.repeat)
        # The first status after any change rebuilds the cached list inside SQLite.
        rebuild = []
        store = Store(store_path(str(home)))
        for i in range(args.repeat):
            changed = store.job(f"{i:012x}")
            changed.progress_step = 10_000 + i  # type: ignore[union-attr]
            store.put(changed)  # type: ignore[arg-type]
            rebuild += time_command([str(cli), "status", "--json"], env, 1)
        store.close()
    base_ms = statistics.median(baseline) * 1000
    status_ms = statistics.median(status) * 1000
    ratio = status_ms / base_ms
    print(f"jobs in store:                 {args.jobs}")
    print(f"python -c pass (median of {args.repeat}):   {base_ms:7.1f} ms")
    print(f"fsdp-orch status --json (median): {status_ms:7.1f} ms   "
          f"({len(out) / 1e6:.1f} MB of JSON)")
    print(f"ratio status / python:          {ratio:7.2f}   (target < 4)")
    print(f"status --json right after a change (rebuilds the cached list): "
          f"{statistics.median(rebuild) * 1000:.1f} ms (median of {args.repeat})")
    print(f"status under 300 ms:            {'yes' if status_ms < 300 else 'NO'}")
    return 0 if ratio < 4 and status_ms < 300 else 1


if __name__ == "__main__":
    raise SystemExit(main())
