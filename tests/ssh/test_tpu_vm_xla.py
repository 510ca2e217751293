"""`--cluster tpu-vm` with real torch_xla on its worker: the stand-in gcloud
(tests/ssh/tpu_stand.py) with ONE worker (a v4-8) whose profile runs the XLA environment's python
(``.venv-xla``), and the ``xla`` launcher: PJRT_DEVICE=CPU from the profile's pjrt_device, 4 virtual
CPU devices from the job's env. The demo runs FSDPv2 (SPMD, a (4, 1) mesh, one process) on the
worker, crashes, and resumes from its checkpoint in the bucket: the steps it trains again have the
first attempt's losses to the last printed digit (tests/xla compares a resumed run with a clean one,
run beside it; here the stand and the bucket are what is new, and a second XLA run would cost about
30 CPU-seconds). One worker: PJRT's CPU client is a world of one per process, so two workers would
each be alone (the runtime refuses that)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import xla_env
from cli_harness import repeated, step_losses
from tpu_stand import Stand, explained, tpu_stand
from xla_env import SMALL_DEMO, XLA_DEVICES

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.xla]

xla_python = xla_env.xla_python  # the session fixture of tests/xla

# A step costs a tenth of a second, an attempt's start-up and compiling 10-30 s: the crash three
# steps after the first save, two saves in the second attempt.
STEPS = 12
INTERVAL = 4
CRASH = INTERVAL + 3
# XLA's CPU compiler without LLVM's optimizations (as tests/xla's profile runs it): compiling
# dominates a short XLA run, and at level 0 it takes a fifth of the CPU time, to the same losses.
XLA_FLAGS = "--xla_backend_optimization_level=0"
XLA_JOB = ["--set", f"args={json.dumps(['--steps', str(STEPS), *SMALL_DEMO])}",
           "--set", f"checkpoint.interval={INTERVAL}",
           "--set", f"env.CPU_NUM_DEVICES={XLA_DEVICES}"]


@pytest.fixture
def xla_stand(ssh_hosts, xla_python: Path) -> Iterator[Stand]:  # type: ignore[no-untyped-def]
    """A TPU VM of one worker (host 1, a v4-8) whose profile runs the XLA environment's python."""
    yield from tpu_stand(ssh_hosts, xla_python, num_workers=1, env={"OMP_NUM_THREADS": "2",
                                                                      "XLA_FLAGS": XLA_FLAGS})


def test_fsdpv2_on_a_one_worker_tpu_vm_resumes_after_a_crash_to_the_first_attempts_losses(
        ssh_hosts, xla_stand: Stand, xla_python: Path) -> None:
    faulted = xla_stand.submit(*XLA_JOB, "--set",
                               f"env.FSDP_ORCH_FAULT=crash:step={CRASH}:rank=0")
    assert isinstance(faulted, dict) and faulted["state"] == "SUCCEEDED", explained(faulted)
    assert faulted["attempts"] == 2, explained(faulted)
    [crash] = faulted["failures"]
    assert crash["category"] == "injected_fault" and crash["action"] == "restart", crash
    job_id = faulted["id"]
    result = json.loads(xla_stand.on_worker(ssh_hosts, 0, job_id, "result.json"))
    # the runtime's plan on the worker: FSDPv2 over the 4 virtual CPU devices of one process
    plan = result["plan"]["plan"]
    assert (plan["wrapper"], plan["spmd"], plan["devices"], plan["processes"]) == (
        "SpmdFullyShardedDataParallel", True, XLA_DEVICES, 1), plan
    assert plan["mesh_shape"] == [XLA_DEVICES, 1], plan
    assert result["resumed_from"] == INTERVAL and result["final_step"] == STEPS, result
    # the crash came after step 4's checkpoint (in the bucket); XLA's CPU backend is deterministic
    # and the checkpoint holds the sharded weights, the optimizer's state and the RNG states: the
    # steps trained again (5 to 7, where it crashed) repeat the first attempt's losses
    first, second = (step_losses(xla_stand.on_worker(ssh_hosts, 0, job_id,
                                                     f"attempt-{a}/console-node-0.log"))
                     for a in (0, 1))
    assert repeated(first, second) == list(range(INTERVAL + 1, CRASH + 1)), (sorted(first),
                                                                             sorted(second))
    assert sorted(second) == list(range(INTERVAL + 1, STEPS + 1)), sorted(second)
    # the node scripts: the profile's pjrt_device, the job's device count, the XLA environment's
    # python
    for attempt in (0, 1):
        script = xla_stand.on_worker(ssh_hosts, 0, job_id, f"attempt-{attempt}/node-0.sh")
        assert ("export PJRT_DEVICE=CPU" in script
                and f"export CPU_NUM_DEVICES={XLA_DEVICES}" in script), script
        assert "WORLD_SIZE=1 " in script, script
        assert f"exec {xla_python} -u train.py" in script, script
