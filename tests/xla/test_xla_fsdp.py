"""fsdp_orch.runtime's XLA path, run for real with torch_xla 2.9.0 on its CPU PJRT device (no TPU
here): the demo model under FSDPv2 (SpmdFullyShardedDataParallel on a (4, 1) ("fsdp", "tensor")
mesh of 4 virtual CPU devices in one process) and under XlaFullyShardedDataParallel (one process,
one device: PJRT's CPU client is a world of one per process, measured: two processes under
torchrun each see ``world_size() == 1``). Each job runs under the real supervisor on the local
kind, with injected faults, and resumes from the checkpoints the plan chose: the steps a resumed
attempt trains again repeat the attempt before's losses (no clean run beside: an XLA process is
among the suite's costliest, and the comparison shows the same exact restore)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import (
    Cli,
    attempt_log,
    copy_demo,
    culprit_leads,
    repeated,
    step_losses,
    why,
)
from conftest import SMALL_DEMO, SPMD_ENV, XLA_DEVICES

pytestmark = [pytest.mark.slow, pytest.mark.xla]

# A step costs a tenth of a second here, an attempt's start-up and compiling 10-30 s: three saves a
# job (the crashed attempt's, the hung one's, the last), each fault three steps after a save.
STEPS = 12
INTERVAL = 4
AFTER = 3  # a fault comes at the end of the third step after a save


def job_args(job: Path, *extra: str) -> list[str]:
    return ["--cluster", "xla-cpu", str(job), "--set", "launcher=python",
            "--set", "procs_per_node=1",
            "--set", f"args={json.dumps(['--steps', str(STEPS), *SMALL_DEMO])}",
            "--set", f"checkpoint.interval={INTERVAL}", "--set", "restart.backoff.initial=1s",
            "--set", "restart.backoff.jitter=0", "--set", "watch.heartbeat_timeout=8s",
            "--set", "watch.hang_detection=fixed", *extra]


def submit(cli: Cli, job: Path, *extra: str) -> dict:
    proc = cli.run("submit", "--wait", "--json", *job_args(job, *extra), timeout=600)
    assert proc.stdout.strip(), (proc.returncode, proc.stderr)
    return json.loads(proc.stdout)


def result(status: dict) -> dict:
    return json.loads((Path(status["run_dir"]) / "result.json").read_text())


def console_losses(status: dict, attempt: int) -> dict[int, str]:
    return step_losses(attempt_log(status["run_dir"], attempt, "console-node-0.log"))


def test_fsdpv2_on_four_devices_resumes_after_a_crash_and_a_hang_to_the_first_attempts_losses(
        xla_cli: Cli, tmp_path: Path) -> None:
    faulted_job = copy_demo(tmp_path / "faulted")
    faults = (f"crash:step={INTERVAL + AFTER}:rank=0;"
              f"hang:step={2 * INTERVAL + AFTER}:rank=0:attempt=1")
    faulted = submit(xla_cli, faulted_job, *SPMD_ENV, "--set", f"env.FSDP_ORCH_FAULT={faults}")
    assert faulted["state"] == "SUCCEEDED" and faulted["attempts"] == 3, why(faulted)
    final = result(faulted)
    plan = final["plan"]["plan"]
    assert (plan["wrapper"], plan["spmd"], plan["devices"], plan["processes"]) == (
        "SpmdFullyShardedDataParallel", True, XLA_DEVICES, 1)
    assert plan["mesh_shape"] == [XLA_DEVICES, 1] and plan["mesh_axis_names"] == ["fsdp", "tensor"]
    assert plan["checkpoint_method"] == "dcp+spmd-planners"
    assert faulted["progress"]["step"] == STEPS and faulted["progress"]["loss_source"] == "runtime"
    crash, hang = faulted["failures"]
    assert crash["category"] == "injected_fault" and crash["action"] == "restart"
    # One process drives all four devices: the hung process is the culprit, stuck in the fault's
    # native sleep, outside any collective (under SPMD the collectives are inside XLA's graph).
    assert hang["category"] == "hang" and culprit_leads(hang["evidence"], 0), hang["evidence"]
    assert final["resumed_from"] == 2 * INTERVAL  # the hang came after step 8's checkpoint
    # Each resume trains the steps after its checkpoint again, to the first attempt's losses:
    # 5-7 (the crash at 7, after step 4's checkpoint), then from 9 to the hang (at 11).
    a0, a1, a2 = (console_losses(faulted, a) for a in range(3))
    assert repeated(a0, a1) == list(range(INTERVAL + 1, INTERVAL + AFTER + 1)), (sorted(a0),
                                                                                  sorted(a1))
    assert repeated(a1, a2)[:AFTER - 1] == list(range(2 * INTERVAL + 1, 2 * INTERVAL + AFTER)), \
        sorted(a1)
    assert sorted(a2) == list(range(2 * INTERVAL + 1, STEPS + 1)), sorted(a2)
    step_dir = faulted_job.parent / "checkpoints" / "demo" / f"step-{STEPS:08d}"
    assert (step_dir / ".metadata").is_file(), sorted(p.name for p in step_dir.parent.iterdir())


def test_xla_fsdp_v1_resumes_after_a_crash_to_the_first_attempts_losses(
        xla_cli: Cli, tmp_path: Path) -> None:
    v1 = ["--set", "env.PJRT_DEVICE=CPU", "--set", "fsdp.xla_fsdp_v2=false"]
    faulted_job = copy_demo(tmp_path / "faulted")
    faulted = submit(xla_cli, faulted_job, *v1,
                     "--set", f"env.FSDP_ORCH_FAULT=crash:step={INTERVAL + AFTER}:rank=0")
    assert faulted["state"] == "SUCCEEDED" and faulted["attempts"] == 2, why(faulted)
    final = result(faulted)
    plan = final["plan"]["plan"]
    assert (plan["wrapper"], plan["spmd"], plan["devices"], plan["processes"]) == (
        "XlaFullyShardedDataParallel", False, 1, 1)
    assert plan["checkpoint_method"] == "dcp-per-rank-state"
    assert final["resumed_from"] == INTERVAL and final["final_step"] == STEPS
    # The steps trained again after step 4's checkpoint (5 to 7, where it crashed) repeat the
    # first attempt's losses.
    first, second = (console_losses(faulted, a) for a in (0, 1))
    assert repeated(first, second) == list(range(INTERVAL + 1, INTERVAL + AFTER + 1)), sorted(first)
    step_dir = faulted_job.parent / "checkpoints" / "demo" / f"step-{STEPS:08d}"
    assert (step_dir / ".metadata").is_file()


def test_xla_fsdp_settings_and_grad_ckpt_reach_the_wrapped_modules(
        xla_cli: Cli, tmp_path: Path) -> None:
    job = copy_demo(tmp_path)
    probe = (
        Path(__file__).resolve().parents[1] / "fixtures" / "scripts" / "xla_wrapper_read_back.py")
    (job.parent / probe.name).write_text(probe.read_text())
    settings = {"compute_dtype": "bfloat16", "buffer_dtype": "float32",
                "shard_param_on_dim_0": True,
                "flatten_parameters": False, "fp32_reduce_scatter": True,
                "optimization_barrier_in_forward": False}
    status = submit(xla_cli, job, "--set", f"script={probe.name}", "--set", "args=[]",
                    "--set", "env.PJRT_DEVICE=CPU", "--set", "fsdp.xla_fsdp_v2=false",
                    "--set", "fsdp.xla_fsdp_grad_ckpt=true",
                    "--set", f"fsdp.xla_fsdp_settings={json.dumps(settings)}")
    assert status["state"] == "SUCCEEDED", why(status)
    read_back = json.loads((Path(status["run_dir"]) / "read_back.json").read_text())
    wrappers = read_back["wrappers"]
    assert set(wrappers) == {"<root>", "blocks.0", "blocks.1"}, wrappers  # the Block layers + root
    for name, held in wrappers.items():
        for key, value in settings.items():
            assert held[key] == value, (name, key, held)
        # FULL_SHARD (the default) reshards each layer after forward; torch_xla keeps the root's
        # parameters (its disable_reshard_on_root, true by default), as FSDP2 does
        assert held["reshard_after_forward"] is (name != "<root>"), (name, held)
    assert read_back["checkpointed_blocks"] == ["blocks.0", "blocks.1"]
    assert all(loss == loss and loss > 0 for loss in read_back["losses"])  # trained: finite losses
