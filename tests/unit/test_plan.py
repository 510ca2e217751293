"""Planning: every derived number computed once and printed everywhere from that one place."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fsdp_orch.plan import RDZV_PORT_RANGE, PlanContext, make_plan, rendezvous_port, slug, spec_json
from fsdp_orch.profiles import parse_profile
from fsdp_orch.render import render_plan
from fsdp_orch.resources import builtin_dir
from fsdp_orch.spec import load_job_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CTX = PlanContext(job_id="j1", attempt=2, home="/h", job_dir="/jobs/demo")


def plan(kind: str, extra: str = "", ctx: PlanContext = CTX):  # type: ignore[no-untyped-def]
    job = load_job_text("name: demo run\nscript: train.py\n" + extra)
    return make_plan(job, parse_profile(FIXTURES / "clusters" / f"{kind}.yaml"), kind, ctx)


def texts(p) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {a.name: a.text for a in render_plan(p, search=[builtin_dir("templates")])}


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate", "python"])
def test_node_count_and_world_size_come_from_one_place(launcher: str) -> None:
    """Changing nodes changes every line that shows a node count or world size, and only those."""
    two = texts(plan("slurm", f"launcher: {launcher}\nnodes: 2\n"))
    three = texts(plan("slurm", f"launcher: {launcher}\nnodes: 3\n"))
    assert all(len(two[n].splitlines()) == len(three[n].splitlines()) for n in two)
    changed = {(name, a, b) for name in two
               for a, b in zip(two[name].splitlines(), three[name].splitlines(), strict=True) if a != b}
    lines = {b for _, _, b in changed}
    # slurm fixture: 4 GPUs per node -> world size 8 vs 12
    assert "#SBATCH --nodes=3" in lines
    assert any(line.startswith("srun --nodes=3 ") for line in lines)
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
    ctx = PlanContext(job_id="j1", attempt=2, home="/h", job_dir="/j", rdzv_port=31000)
    assert plan("local", ctx=ctx).rdzv_port == 31000


def test_paths() -> None:
    p = plan("local")
    assert p.workdir == "/jobs/demo"
    assert p.checkpoint_dir == "/jobs/demo/checkpoints/demo-run"
    assert (p.run_dir, p.attempt_dir, p.spec_path) == ("/h/runs/j1", "/h/runs/j1/attempt-2", "/h/runs/j1/job.json")
    assert plan("local", "workdir: sub/../w\ncheckpoint: {dir: ck}\n").checkpoint_dir == "/jobs/demo/w/ck"
    assert plan("ssh").workdir == "/shared/work"
    assert plan("ssh", "workdir: exp1\n").workdir == "/shared/work/exp1"
    assert plan("tpu-vm", "launcher: xla\n").checkpoint_dir == "~/work/checkpoints/demo-run"


def test_resume_and_env() -> None:
    ctx = PlanContext(job_id="j1", attempt=1, home="/h", job_dir="/j", resume_from="/ck/step-5")
    env = dict(plan("local", ctx=ctx).env)
    assert env["FSDP_ORCH_RESUME"] == "/ck/step-5" and env["FSDP_ORCH_ATTEMPT"] == "1"
    assert dict(plan("tpu-vm", "launcher: xla\n").env)["PJRT_DEVICE"] == "TPU"


def test_entry_points_to_program() -> None:
    assert plan("local", "args: [a, b]\n").program == ["train.py", "a", "b"]
    job = load_job_text("name: x\ncommand: [./run, -v]\nargs: [a]\n")
    p = make_plan(job, parse_profile(FIXTURES / "clusters" / "local.yaml"), "local", CTX)
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
