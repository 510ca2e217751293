"""Planning: every derived number computed once and printed everywhere from that one place."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from planning import SUPERVISOR, plan_on, render

from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.backends.slurm.allocation import step_argv
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.launch.plan import RDZV_PORT_RANGE, rendezvous_port, slug, spec_json
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.places.builtin import builtin_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CTX = PlanContext(job_id="j1", attempt=2, run_root="/h", job_dir="/jobs/demo",
                  supervisor_command=SUPERVISOR)


def plan(kind: str, extra: str = "", ctx: PlanContext = CTX):  # type: ignore[no-untyped-def]
    job = load_job_text("name: demo run\nscript: train.py\n" + extra)
    return plan_on(job, parse_profile(FIXTURES / "clusters" / f"{kind}.yaml"), kind, ctx)


def texts(p) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {a.name: a.text for a in render(p, search=[builtin_dir("templates")])}


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate", "python"])
def test_node_count_and_world_size_come_from_one_place(launcher: str) -> None:
    """Changing nodes changes every line that shows a node count or world size, and only those."""
    two = texts(plan("slurm", f"launcher: {launcher}\nnodes: 2\n"))
    three = texts(plan("slurm", f"launcher: {launcher}\nnodes: 3\n"))
    assert all(len(two[n].splitlines()) == len(three[n].splitlines()) for n in two)
    changed = {(name, a, b) for name in two
               for a, b in zip(two[name].splitlines(), three[name].splitlines(), strict=True)
               if a != b}
    lines = {b for _, _, b in changed}
    # slurm fixture: 4 GPUs per node -> world size 8 vs 12
    assert "#SBATCH --nodes=3" in lines
    step = step_argv(plan("slurm", f"launcher: {launcher}\nnodes: 3\n"), "node.sh")
    assert "--nodes=3" in step and "--ntasks-per-node=1" in step  # the attempt's job step
    assert "# 3 node(s) x 4 process(es) = world size 12; launcher " + launcher in lines
    expected_launch = {"torchrun": "  --nnodes 3 \\", "accelerate": "  --num_machines 3 \\",
                       "python": "export NNODES=3"}[launcher]
    assert expected_launch in lines
    for _, old, new in changed:
        assert re.sub(r"\b3\b", "2", re.sub(r"\b12\b", "8", new)) == old, (old, new)
    if launcher == "accelerate":
        assert "num_processes: 12" in lines and "  --num_processes 12 \\" in lines
    if launcher == "python":
        assert "export WORLD_SIZE=12" in lines
    assert json.loads(three["job.json"])["_resolved"]["world_size"] == 12


def test_procs_per_node_sources() -> None:
    assert plan("slurm").nproc_per_node == 4  # gpus_per_node
    assert plan("slurm", "procs_per_node: 2\n").nproc_per_node == 2  # the job wins
    assert plan("local").nproc_per_node == 2  # the profile's procs_per_node
    assert plan("ssh", "nodes: 2\n").world_size == 16
    tpu = plan("tpu-vm", "launcher: xla\n")
    assert (tpu.nnodes, tpu.nproc_per_node, tpu.world_size, tpu.device) == (4, 1, 4, "tpu")


def test_rendezvous() -> None:
    p = plan("slurm")
    assert p.rdzv_port == rendezvous_port("j1", 2)
    low, high = RDZV_PORT_RANGE
    assert low <= p.rdzv_port < high < 32768  # never in Linux's ephemeral port range
    assert p.rdzv_id == "j1-a2" and p.rdzv_host is None
    assert plan("ssh").rdzv_port == 29400 and plan("ssh").rdzv_host == "node1.example.internal"
    ctx = PlanContext(job_id="j1", attempt=2, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR, rdzv_port=31000)
    assert plan("local", ctx=ctx).rdzv_port == 31000


def test_paths() -> None:
    p = plan("local")
    assert p.workdir == "/jobs/demo"
    assert p.checkpoint_dir == "/jobs/demo/checkpoints/demo-run"
    assert (p.run_dir, p.attempt_dir, p.spec_path) == (
        "/h/runs/j1", "/h/runs/j1/attempt-2", "/h/runs/j1/job.json")
    assert (plan("local", "workdir: sub/../w\ncheckpoint: {dir: ck}\n").checkpoint_dir
            == "/jobs/demo/w/ck")
    assert plan("ssh").workdir == "/shared/work"
    assert plan("ssh", "workdir: exp1\n").workdir == "/shared/work/exp1"
    # a TPU VM worker keeps the job on its own disk
    assert plan("tpu-vm", "launcher: xla\n").checkpoint_dir == (
        "/var/tmp/fsdp-orch/runs/j1/code/checkpoints/demo-run")


def test_resume_and_env() -> None:
    ctx = PlanContext(job_id="j1", attempt=1, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR, resume_from="/ck/step-5")
    env = dict(plan("local", ctx=ctx).env)
    assert env["FSDP_ORCH_RESUME"] == "/ck/step-5" and env["FSDP_ORCH_ATTEMPT"] == "1"
    assert dict(plan("tpu-vm", "launcher: xla\n").env)["PJRT_DEVICE"] == "TPU"


def test_entry_points_to_program() -> None:
    assert plan("local", "args: [a, b]\n").program == ["train.py", "a", "b"]
    job = load_job_text("name: x\ncommand: [./run, -v]\nargs: [a]\n")
    p = plan_on(job, parse_profile(FIXTURES / "clusters" / "local.yaml"), "local", CTX)
    assert p.program == ["./run", "-v", "a"] and p.entry_kind == "command"


def test_planning_is_pure() -> None:
    assert plan("slurm") == plan("slurm")
    p = plan("slurm")
    assert spec_json(p) == spec_json(p)


@pytest.mark.parametrize(("name", "expected"), [
    ("demo run", "demo-run"), ("a/b\\c", "a-b-c"), ("$(x)", "x"), ("...", "job"), ("é", "job"),
    ("x" * 100, "x" * 60),
])
def test_slug(name: str, expected: str) -> None:
    assert slug(name) == expected


def test_resume_args_are_appended_only_when_there_is_a_checkpoint() -> None:
    extra = ('args: [--x]\n'
             'checkpoint: {resume_args: ["--resume_from_checkpoint", "{checkpoint}", '
             '"--at={step}"]}\n')
    assert plan("local", extra).program == ["train.py", "--x"]
    assert "FSDP_ORCH_RESUME_FROM" not in dict(plan("local", extra).env)
    ctx = PlanContext(job_id="j1", attempt=1, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR, resume_from="/out/checkpoint-40",
                      resume_step=40)
    p = plan("local", extra, ctx=ctx)
    assert p.program == [
        "train.py", "--x", "--resume_from_checkpoint", "/out/checkpoint-40", "--at=40"]
    env = dict(p.env)
    assert (env["FSDP_ORCH_RESUME_FROM"] == "/out/checkpoint-40"
            and env["FSDP_ORCH_RESUME_STEP"] == "40")
    assert "--resume_from_checkpoint /out/checkpoint-40" in texts(p)["launch.sh"]


def test_a_warm_start_passes_its_checkpoint_until_the_job_has_one_of_its_own() -> None:
    extra = ('args: [--x]\ncheckpoint: {init_args: ["--model_name_or_path", "{checkpoint}"],'
             ' resume_args: ["--resume_from_checkpoint", "{checkpoint}"]}\n')
    warm = dict(job_id="j1", run_root="/h", job_dir="/j", supervisor_command=SUPERVISOR,
                init_from="/prev/checkpoint-90", init_step=90, checkpoint_per_job=True)
    first = plan("local", extra, ctx=PlanContext(attempt=0, **warm))
    assert first.program == ["train.py", "--x", "--model_name_or_path", "/prev/checkpoint-90"]
    env = dict(first.env)
    assert (env["FSDP_ORCH_INIT_FROM"] == "/prev/checkpoint-90"
            and env["FSDP_ORCH_INIT_OPTIMIZER"] == "0")
    # its own folder: never the previous run's
    assert first.checkpoint_dir == "/j/checkpoints/demo-run/j1"
    # a restart after the job saved: its own checkpoint wins, the warm start is not passed again
    later = plan("local", extra,
                 ctx=PlanContext(attempt=1, resume_from="/j/checkpoints/demo-run/j1/checkpoint-5",
                                 resume_step=5, **warm))
    assert later.program == [
        "train.py", "--x", "--resume_from_checkpoint", "/j/checkpoints/demo-run/j1/checkpoint-5"]
    assert "FSDP_ORCH_INIT_FROM" not in dict(later.env)
    # a plain submit: as before
    assert plan("local", extra).checkpoint_dir.endswith("/checkpoints/demo-run")


def test_job_id_in_the_checkpoint_dir_and_args_gives_each_run_its_own_folder() -> None:
    extra = 'args: [--output_dir, "out/{job_id}"]\ncheckpoint: {dir: "out/{job_id}"}\n'
    ctx = PlanContext(job_id="a1b2", attempt=0, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR, checkpoint_per_job=True)
    p = plan("local", extra, ctx=ctx)
    assert p.program == ["train.py", "--output_dir", "out/a1b2"]
    assert p.checkpoint_dir.endswith("/out/a1b2")  # a folder the user named is not nested further
    assert plan("local", 'checkpoint: {dir: out}\n', ctx=ctx).checkpoint_dir.endswith("/out")


def test_every_kind_exports_the_collective_timeout_and_the_bootstrap_path() -> None:
    """The bootstrap is the one of the fsdp-orch the profile's python imports, found on the node
    (issue 62): never the path of the fsdp-orch that planned the job (``bootstrap_dir``)."""
    ctx = PlanContext(job_id="j1", attempt=0, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR, bootstrap_dir="/pkg/boot site")
    found = 'export PYTHONPATH="$FSDP_ORCH_PACKAGE"/bootstrap/site${PYTHONPATH:+:"$PYTHONPATH"}'
    for kind, extra in (("local", ""), ("slurm", ""), ("ssh", ""), ("tpu-vm", "launcher: xla\n")):
        p = plan(kind, extra + "watch: {collective_timeout: 90s}\n", ctx=ctx)
        assert dict(p.env)["FSDP_ORCH_COLLECTIVE_TIMEOUT"] == "90"
        main = [t for name, t in texts(p).items() if name.endswith(".sh") and "NODE_RANK=" in t]
        assert main and all(found in t and "/pkg/" not in t for t in main), kind
        # a TPU VM's workers have their own disks: the copy sent with the job comes first
        if kind == "tpu-vm":
            own = 'export PYTHONPATH=/var/tmp/fsdp-orch/runs/j1/lib${PYTHONPATH:+:"$PYTHONPATH"}'
            assert all(t.index(own) < t.index(found) for t in main)


def test_nccl_flight_recorder_on_gpus_with_the_users_values_winning() -> None:
    env = dict(plan("slurm").env)  # the fixture profile has gpus_per_node
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/h/runs/j1/attempt-2/flight_recorder_rank_"
    mine = dict(plan("slurm", "env: {TORCH_FR_BUFFER_SIZE: '50'}\n").env)
    assert mine["TORCH_FR_BUFFER_SIZE"] == "50" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in mine
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in dict(plan("local").env)  # CPU: gloo, no NCCL
