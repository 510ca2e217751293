"""How close is ``fsdp-orch fit``'s estimate to the same tracker run for real?

For each job (by default the demo, the Hugging Face Trainer script's GPT-2, and the tiny Llama of
``tests/fixtures/fit`` with LoRA on every Linear and trained whole): the estimate (``fsdp-orch fit
--json``, FakeTensorMode over a fake process group) and ``--repeat`` real runs
(``fsdp_orch.fit.real_run``: 2 torchrun ranks, gloo, real CPU tensors, the same model, sharding and
step under ``FSDPMemTracker``), rank 0's peak tracked bytes by category. Target (issue 46): the
peak within 10%.

    .venv/bin/python bench/fit_real.py [JOB ...] [--repeat 3]
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

from fsdp_orch.fit.real_run import command

REPO = Path(__file__).resolve().parents[1]
MIB = float(1 << 20)
TINY_LLAMA_JOB = ("name: tiny-llama\nscript: train.py\nprocs_per_node: 2\n"
                  "fit: {{model: tiny-llama, batch_size: 2, seq_len: 64{lora}}}\n")


def default_jobs(work: Path) -> dict[str, Path]:
    """Private copies of the examples (their factories and configs beside them), and the tiny
    Llama's two jobs."""
    shutil.copytree(REPO / "examples" / "demo", work / "demo")
    shutil.copytree(REPO / "examples" / "unchanged" / "hf_trainer", work / "hf_trainer")
    shutil.copytree(REPO / "tests" / "fixtures" / "fit" / "tiny-llama", work / "tiny-llama")
    (work / "lora.yaml").write_text(TINY_LLAMA_JOB.format(
        lora=", lora: {r: 8, target_modules: all-linear}"))
    (work / "full.yaml").write_text(TINY_LLAMA_JOB.format(lora=""))
    return {"demo (train:model_for_fit)": work / "demo" / "job.yaml",
            "HF Trainer's GPT-2 (tiny-gpt2)": work / "hf_trainer" / "job.yaml",
            "tiny Llama, LoRA r=8 all-linear": work / "lora.yaml",
            "tiny Llama, trained whole": work / "full.yaml"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jobs", nargs="*", help="job files with a fit: block (default: the four)")
    p.add_argument("--repeat", type=int, default=3, help="real runs of each job")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        jobs = ({j: Path(j).resolve() for j in args.jobs} if args.jobs
                else default_jobs(work))
        env = {**os.environ, "FSDP_ORCH_HOME": str(work / "home"), "OMP_NUM_THREADS": "1"}
        estimates = {}
        for name, job in jobs.items():
            out = subprocess.run([sys.executable, "-m", "fsdp_orch", "fit", str(job), "--cluster",
                                  "local", "--json", "--no-cache"], env=env, check=True,
                                 capture_output=True, text=True).stdout
            estimates[name] = json.loads(out)["tracked_bytes"]
        runs: list[dict[str, dict]] = []
        for i in range(args.repeat):
            out_file = work / f"real-{i}.json"
            subprocess.run(command([str(j) for j in jobs.values()], 2, str(out_file)), env=env,
                           check=True, capture_output=True, cwd=work)
            runs.append(json.loads(out_file.read_text()))
    print(f"{'job':<34}{'estimate':>12}{'real (min-max)':>24}{'estimate / real':>18}")
    for name, job in jobs.items():
        est = estimates[name]["total"]
        real = [r[str(job)]["peak"]["total"] for r in runs]
        print(f"{name:<34}{est / MIB:>8.2f} MiB{min(real) / MIB:>11.2f}-{max(real) / MIB:.2f} MiB"
              f"{est / max(real):>11.3f}-{est / min(real):.3f}")
        diff = {k: (v, runs[0][str(job)]["peak"].get(k, 0))
                for k, v in estimates[name].items()
                if k != "total" and v != runs[0][str(job)]["peak"].get(k, 0)}
        if diff:
            print(f"{'':<4}categories apart in the first real run (estimate, real): {diff}")


if __name__ == "__main__":
    main()
