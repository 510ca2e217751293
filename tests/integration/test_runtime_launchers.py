"""The second examples (examples/launchers): an mp.spawn script under the ``python`` launcher and an
Accelerate script with an accelerate-format FSDP config, both rendered by the real fsdp-orch CLI."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fsdp_orch.checkpoints.folders import latest_complete, list_checkpoints
from fsdp_orch.nodeagent.beat_dir import read_node_heartbeats

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def render(example: Path, home: Path, job_id: str, attempt: int, *sets: str) -> Path:
    """Render attempt ``attempt`` with the CLI and put the files where launch.sh expects them."""
    run_dir = home / "runs" / job_id
    attempt_dir = run_dir / f"attempt-{attempt}"
    argv = [sys.executable, "-m", "fsdp_orch", "render", "--cluster", "local",
            str(example / "job.yaml"),
            "--out", str(attempt_dir), "--job-id", job_id, "--attempt", str(attempt)]
    for item in sets:
        argv += ["--set", item]
    env = {**os.environ, "FSDP_ORCH_HOME": str(home)}
    subprocess.run(argv, check=True, env=env, capture_output=True, text=True)
    shutil.copy(attempt_dir / "job.json", run_dir / "job.json")
    return attempt_dir


def copy_example(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(REPO / "examples" / "launchers" / name, target,
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    return target


def run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 240) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    proc = subprocess.run(argv, cwd=cwd, env={**full_env, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.quick
def test_spawn_example_under_the_python_launcher_trains_checkpoints_and_resumes(tmp_path):
    example = copy_example("spawn", tmp_path)
    home, job_id = tmp_path / "home", f"spawn-{tmp_path.name}"
    # batches of 8, not the tutorial's 32: a step of its convolutions costs 0.04 s of CPU a rank
    # instead of 0.1 s, and nothing here depends on the batch's size
    first = render(example, home, job_id, 0, "args=[--steps, 4, --batch-size, 8]",
                   "checkpoint.interval=2")
    out = run(["bash", str(first / "launch.sh")]).stdout
    assert [line.split()[0] for line in out.splitlines() if line.startswith("step=")] == [
        "step=1", "step=2", "step=3", "step=4"]
    beats = read_node_heartbeats(job_id, 0)
    assert (sorted(beats) == [0, 1]
            and all(b.state == "done" and b.step == 4 for b in beats.values()))
    ckpt_dir = example / "checkpoints" / "spawn-example"
    assert [(c.step, c.complete) for c in list_checkpoints(ckpt_dir)] == [(2, True), (4, True)]

    # to step 10, where the scheduler decays, saved there by the job's own interval (10)
    second = render(example, home, job_id, 1, "args=[--steps, 10, --batch-size, 8]")
    out = run(["bash", str(second / "launch.sh")]).stdout
    lines = [line for line in out.splitlines() if line.startswith("step=")]
    assert lines[0].startswith("step=5 ")
    # The LR scheduler was checkpointed as an extra: StepLR(step_size=10) decays at step 10 only
    # if it resumed at 4 rather than starting over.
    assert lines[5].startswith("step=10 ") and lines[5].endswith("lr=0.7"), lines
    assert len(lines) == 6 and latest_complete(ckpt_dir).step == 10


@pytest.mark.quick
def test_accelerate_example_reads_an_accelerate_config_and_runs_two_cpu_processes(tmp_path):
    example = copy_example("accelerate", tmp_path)
    home, job_id = tmp_path / "home", f"accel-{tmp_path.name}"
    attempt = render(example, home, job_id, 0, "args=[--steps, 4, --save-every, 2]")
    config = yaml.safe_load((attempt / "accelerate_config.yaml").read_text())
    # fsdp-orch took the FSDP options from the accelerate-format file beside job.yaml...
    assert config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "Block"
    assert config["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] is True
    assert config["num_processes"] == 2
    # ...and, without GPUs, rendered a CPU config (Accelerate runs FSDP only on GPUs).
    assert config["distributed_type"] == "MULTI_CPU" and config["use_cpu"] is True
    exports = {}  # the FSDP_ORCH_* environment the launch script exports
    for line in (attempt / "launch.sh").read_text().splitlines():
        if line.startswith("export FSDP_ORCH_") and "=" in line and "$" not in line:
            name, value = line.removeprefix("export ").split("=", 1)
            exports[name] = shlex.split(value)[0]
    # The rendered launch script itself: on CPU it takes Accelerate's torchrun path (--multi_gpu
    # with ACCELERATE_USE_CPU), so two CPU processes run distributed.
    launch = (attempt / "launch.sh").read_text()
    assert "export ACCELERATE_USE_CPU=1" in launch and "--multi_gpu" in launch
    argv = ["bash", str(attempt / "launch.sh")]
    env = {"OMP_NUM_THREADS": "1"}
    out = run(argv, cwd=example, env=env).stdout
    assert "distributed_type=MULTI_CPU num_processes=2" in out
    beats = read_node_heartbeats(job_id, 0)
    assert (sorted(beats) == [0, 1]
            and all(b.state == "done" and b.step == 4 for b in beats.values()))
    ckpt_dir = Path(exports["FSDP_ORCH_CHECKPOINT_DIR"])
    assert [(c.step, c.complete, c.layout) for c in list_checkpoints(ckpt_dir)] == [
        (2, True, "hf"), (4, True, "hf")]
    assert json.loads((ckpt_dir / "checkpoint-4" / "trainer_state.json").read_text()) == {
        "global_step": 4}
    attempt = render(example, home, job_id, 1, "args=[--steps, 6, --save-every, 2]")
    again = run(["bash", str(attempt / "launch.sh")], cwd=example, env=env).stdout
    assert f"resumed from {ckpt_dir / 'checkpoint-4'} (step 4)" in again
    assert "step=5 " in again and "step=1 " not in again
    assert [c.step for c in list_checkpoints(ckpt_dir)] == [4, 6]  # keep_last 2
