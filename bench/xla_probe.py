"""What the supervisor's probes see on the XLA path (issue 27): the demo under FSDPv2 on torch_xla's
CPU PJRT device (4 virtual devices, one process, ``.venv-xla``), on the local kind, hung at a step.

Every 0.2 s it reads the rank's heartbeat and notes how old each signal is: the last step
(``progress_at``), the main thread's last Python bytecode (``python_at``), the last CPU use of the
XLA process (``compute_at``) and the last bytes written (``io_at``). It also takes py-spy stacks of
the main thread during steady training. It prints, per phase (start-up and the first compiles,
steady steps, the hang): the longest time the main thread stayed in one native call, and the
longest time CPU use stayed below a quarter of a core; then the verdict's delay after the last
progress and the evidence's first line.

    .venv/bin/python bench/xla_probe.py [--json]      (makes .venv-xla first if missing)
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from cli_harness import copy_demo, make_cli  # noqa: E402

from fsdp_orch.observe.heartbeats import read_heartbeats  # noqa: E402
from fsdp_orch.observe.stack_parse import parse_pyspy_dump  # noqa: E402
from fsdp_orch.observe.user_frame import main_thread  # noqa: E402

SMALL_DEMO = ["--vocab", "64", "--dim", "32", "--layers", "2", "--heads", "2", "--seq-len", "16",
              "--batch-size", "16", "--lr", "0.01"]
HANG_STEP = 150
WINDOW_S = 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    subprocess.run(["bash", str(REPO / "scripts" / "setup-xla.sh")], check=True, stdout=sys.stderr)
    python = REPO / ".venv-xla" / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="fsdp-orch-xla-probe-") as tmp:
        base = Path(tmp)
        cli = make_cli(base)
        (cli.home / "clusters").mkdir(parents=True)
        (cli.home / "clusters" / "xla-cpu.yaml").write_text(
            f"kind: local\ndevice: cpu\npython: {python}\nprocs_per_node: 1\n")
        job = copy_demo(base)
        submitted = cli.run("submit", "--cluster", "xla-cpu", str(job), "--set", "launcher=python",
                            "--set", "procs_per_node=1", "--set",
                            f"args={json.dumps(['--steps', '200', *SMALL_DEMO])}",
                            "--set", "env.PJRT_DEVICE=CPU", "--set", "env.CPU_NUM_DEVICES=4",
                            "--set", f"env.FSDP_ORCH_FAULT=hang:step={HANG_STEP}:rank=0",
                            "--set", "restart.max_restarts=0", "--set",
                            "watch.hang_detection=fixed",
                            "--set", f"watch.heartbeat_timeout={WINDOW_S}s", check=True)
        job_id = submitted.stdout.strip().split()[-1]
        run_dir = cli.home / "runs" / job_id
        samples, stacks = watch(cli, job_id, run_dir)
        status = cli.status(job_id)
    report = summarize(samples, stacks, status)
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0


def watch(cli, job_id: str, run_dir: Path) -> tuple[list[dict], collections.Counter]:
    samples: list[dict] = []
    stacks: collections.Counter = collections.Counter()
    started = time.time()
    py_spy = Path(sys.executable).with_name("py-spy")
    while time.time() - started < 300:
        beat = read_heartbeats(run_dir, 0).get(0)
        now = time.time()
        if beat is not None:
            samples.append({"t": now - started, "step": beat.step, "state": beat.state,
                            "python_age": None if beat.python_at is None else now - beat.python_at,
                            "compute_age": (None if beat.compute_at is None
                                            else now - beat.compute_at),
                            "progress_age": now - beat.progress_time})
            if 20 <= beat.step < HANG_STEP - 10 and len(stacks) < 40:
                dump = subprocess.run([str(py_spy), "dump", "--pid", str(beat.pid)],
                                      capture_output=True, text=True)
                threads = parse_pyspy_dump(dump.stdout)
                main = main_thread(threads)
                if main and main.frames:
                    top = main.frames[0]
                    stacks[f"{Path(top.file).name}:{top.function}"] += 1
        if cli.status(job_id)["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.2)
    return samples, stacks


def longest(samples: list[dict], key: str) -> float:
    return max((s[key] or 0.0 for s in samples), default=0.0)


def summarize(samples: list[dict], stacks: collections.Counter, status: dict) -> dict:
    startup = [s for s in samples if s["step"] <= 2]
    steady = [s for s in samples if 2 < s["step"] < HANG_STEP]
    hung = [s for s in samples if s["step"] == HANG_STEP]
    [failure] = status["failures"] or [{}]
    return {
        "phases": {
            name: {"seconds": round(rows[-1]["t"] - rows[0]["t"], 1) if rows else 0,
                   "longest_native_call_s": round(longest(rows, "python_age"), 1),
                   "longest_quiet_cpu_s": round(longest(rows, "compute_age"), 1)}
            for name, rows in (("start-up and the first compiles (steps 0-2)", startup),
                               ("steady steps", steady), (f"hung at step {HANG_STEP}", hung))},
        "main_thread_innermost_frames_in_steady_steps": dict(stacks.most_common(5)),
        "verdict": failure.get("category"),
        "verdict_after_last_progress_s": failure.get("stalled_for_s"),
        "window_s": WINDOW_S,
        "evidence_first_line": (failure.get("evidence") or "").split(";")[0],
    }


def table(report: dict) -> str:
    lines = ["| phase | seconds | longest native call (s) | longest CPU quiet (s) |",
             "|---|---|---|---|"]
    for name, row in report["phases"].items():
        lines.append(f"| {name} | {row['seconds']} | {row['longest_native_call_s']} | "
                     f"{row['longest_quiet_cpu_s']} |")
    lines.append("")
    lines.append("main thread's innermost frame in steady steps (py-spy): "
                 f"{report['main_thread_innermost_frames_in_steady_steps']}")
    lines.append(f"verdict: {report['verdict']} after {report['verdict_after_last_progress_s']} s "
                 f"(window {report['window_s']} s); evidence: {report['evidence_first_line']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
