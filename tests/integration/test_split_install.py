"""The split install the README recommends (issue 62): the CLI from an environment without torch
(what ``pipx install fsdp-orch`` makes; ``tests/cli_without_torch.py``), the ranks from ``.venv``
(torch and fsdp-orch, as ``pip install 'fsdp-orch[runtime]'`` makes it), on the local kind and in
the scripts rendered for the others. Nothing on a node may run from the CLI's environment.

Before: the built-in ``local`` profile ran the ranks on the CLI's python, so submit accepted the
job and it failed three times as ``unknown``; a ranks' python with torch and no fsdp-orch did the
same; ``render`` wrote the CLI's interpreter into ``sbatch.sh`` and its package root onto the node
agent's ``PYTHONPATH``; ``fit`` refused without saying how to run it."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cli_harness import REPO, copy_demo, demo_args, why
from cli_without_torch import (  # noqa: F401 (a fixture)
    RANKS_PYTHON,
    TorchlessCli,
    build_torch_only_env,
    clean_env,
    torchless_python,
)

TINY_FIT = REPO / "tests" / "fixtures" / "fit" / "tiny-llama"


@pytest.fixture
def cli(tmp_path: Path, torchless_python: Path) -> TorchlessCli:  # noqa: F811
    """The CLI from the environment without torch, with a home and a working folder of its own."""
    work = tmp_path / "work"
    work.mkdir()
    return TorchlessCli(home=tmp_path / "home", cwd=work, python=str(torchless_python))


def local_profile(cli: TorchlessCli, name: str, python: Path | str) -> str:
    """A local profile of the user's own (``./clusters/NAME.yaml``): its ranks run on ``python``."""
    folder = cli.cwd / "clusters"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(f"kind: local\ndevice: cpu\npython: {python}\n")
    return name


def timed(cli: TorchlessCli, *args: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """``cli.run(*args)``, its wall time and the CPU time it and its children took (what a busy
    machine does not stretch: the suite runs beside other workers on 2 cores)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = cli.run(*args)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def refused_at_once(cli: TorchlessCli, *args: str) -> str:
    """``submit`` refused: exit 2 in under 2 s, one line on stderr, nothing on stdout, nothing
    written (not even the home). The line."""
    proc, wall, cpu = timed(cli, "submit", *args)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert cpu < 2.0 and wall < 10.0, f"the refusal took {wall:.2f} s ({cpu:.2f} s of CPU)"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and proc.stdout == "", proc.stderr
    assert not cli.home.exists() or not any(cli.home.rglob("*")), sorted(cli.home.rglob("*"))
    return lines[0]


def test_the_builtin_local_profile_is_refused_at_once_naming_the_python_and_torch(
        cli: TorchlessCli, tmp_path: Path) -> None:
    demo = copy_demo(tmp_path)
    line = refused_at_once(cli, "--cluster", "local", str(demo), "--set", demo_args(20))
    assert line.startswith("fsdp-orch: error: ") and "python:" in line, line
    assert f"the ranks' python {cli.python} (the CLI's own) cannot import torch" in line, line
    assert "./clusters/local.yaml" in line and "pipx inject fsdp-orch torch" in line, line


def test_a_ranks_python_with_torch_and_without_fsdp_orch_is_refused_and_doctor_says_so(
        cli: TorchlessCli, tmp_path: Path) -> None:
    torch_only = build_torch_only_env(tmp_path / "torch-only")
    demo = copy_demo(tmp_path)
    name = local_profile(cli, "torch-only", torch_only)
    line = refused_at_once(cli, "--cluster", name, str(demo), "--set", demo_args(20))
    assert f"the ranks' python {torch_only} cannot import fsdp_orch" in line, line
    assert f"{torch_only} -m pip install 'fsdp-orch[runtime]'" in line and "python:" in line, line
    doctor = cli.run("doctor", "--cluster", name, "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode == 1, doctor.stdout
    assert checks["torch for the ranks"]["ok"], checks["torch for the ranks"]
    mine = checks["fsdp-orch for the ranks"]
    assert not mine["ok"] and "cannot import fsdp_orch" in mine["detail"], mine
    assert "fsdp-orch[runtime]" in mine["fix"], mine


@pytest.mark.slow
def test_the_demo_succeeds_with_the_ranks_on_the_profiles_python(
        cli: TorchlessCli, tmp_path: Path) -> None:
    demo = copy_demo(tmp_path)
    name = local_profile(cli, "train", RANKS_PYTHON)
    proc = cli.run("submit", "--cluster", name, "--wait", "--json", str(demo),
                   "--set", demo_args(20), timeout=300)
    assert proc.stdout.strip(), proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED" and status["progress"]["step"] == 20, why(status)
    attempt = Path(status["run_dir"]) / "attempt-0"
    launch = (attempt / "launch.sh").read_text()
    assert cli.venv not in launch, "the launch script names the CLI's environment"
    assert f"exec {RANKS_PYTHON} -u -m torch.distributed.run" in launch or (
        f"{RANKS_PYTHON} -m fsdp_orch.standby.launch" in launch), launch
    # the node agent and the bootstrap came from the ranks' environment, not the CLI's
    assert f"{RANKS_PYTHON} -m fsdp_orch.nodeagent" in launch, launch


def rendered(cli: TorchlessCli, tmp_path: Path, profile: str) -> str:
    demo = copy_demo(tmp_path)
    proc = cli.run("render", "--cluster", profile, str(demo), "--set", "nodes=2",
                   "--job-id", "split0000001")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("kind", ["slurm", "ssh"])
def test_rendered_node_scripts_name_no_path_of_the_clis_environment(
        cli: TorchlessCli, tmp_path: Path, kind: str) -> None:
    """The built-in profiles (``python:`` left to its default) and one naming the ranks' python."""
    text = rendered(cli, tmp_path, kind)
    assert cli.venv not in text, [line for line in text.splitlines() if cli.venv in line]
    if kind == "slurm":
        assert ("exec python3 -m fsdp_orch.supervise.supervisor split0000001 --run-dir "
                in text), text
    named = cli.cwd / "clusters" / f"{kind}-train.yaml"
    named.parent.mkdir(exist_ok=True)
    builtin = (REPO / "clusters" / f"{kind}.yaml").read_text()
    named.write_text(builtin.replace("\nvenv: ", "\n# venv: ") + f"python: {RANKS_PYTHON}\n")
    text = rendered(cli, tmp_path / "again", named.stem)
    assert cli.venv not in text, [line for line in text.splitlines() if cli.venv in line]
    assert f"{RANKS_PYTHON} -m fsdp_orch" in text  # the node side runs on the ranks' python
    if kind == "slurm":
        assert f"exec {RANKS_PYTHON} -m fsdp_orch.supervise.supervisor split0000001" in text


def tiny_fit_job(tmp_path: Path) -> Path:
    shutil.copytree(TINY_FIT, tmp_path / "tiny-llama")
    job = tmp_path / "job.yaml"
    job.write_text("name: tiny-fit\nscript: train.py\nprocs_per_node: 2\n"
                   "fsdp: {mixed_precision: 'no'}\n"
                   "fit: {model: tiny-llama, batch_size: 2, seq_len: 64, dtype: float32}\n")
    return job


def test_fit_without_torch_says_how_to_run_it(cli: TorchlessCli, tmp_path: Path) -> None:
    job = tiny_fit_job(tmp_path)
    proc, wall, cpu = timed(cli, "fit", str(job), "--cluster", "local", "--gpu-memory", "1GB")
    assert cpu < 2.0 and wall < 10.0, f"the refusal took {wall:.2f} s ({cpu:.2f} s of CPU)"
    assert proc.returncode == 2 and proc.stdout == "", proc
    [line] = proc.stderr.strip().splitlines()
    assert f"this CLI's python {cli.python} has none" in line, line
    assert "pipx inject fsdp-orch torch transformers" in line, line
    assert f"-m fsdp_orch fit {job} --cluster local --gpu-memory 1GB" in line, line
    assert "set python: in the profile" in line, line


@pytest.mark.slow
def test_fit_without_torch_runs_on_the_profiles_python(cli: TorchlessCli, tmp_path: Path) -> None:
    job = tiny_fit_job(tmp_path)
    name = local_profile(cli, "train", RANKS_PYTHON)
    proc = cli.run("fit", str(job), "--cluster", name, "--json", "--gpu-memory", "1GB",
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"measuring with the profile's python {RANKS_PYTHON}" in proc.stderr, proc.stderr
    found = json.loads(proc.stdout)
    assert found["ranks"] == 2 and found["fits"] is True, found


def test_a_slurm_allocation_whose_python_lacks_fsdp_orch_ends_failed_naming_it(
        tmp_path: Path) -> None:
    """The batch script as SLURM runs it (outside a job step it stops before its first srun): the
    profile's python has torch and no fsdp-orch, so the supervisor cannot start; it says so in
    ``slurm-<id>.out`` and exits 78, and ``status`` gives that line as the job's reason (a stand-in
    for sacct: the real cluster's run of this is the same script)."""
    from planning import plan_on, render

    from fsdp_orch.backends.slurm.kind import refresh
    from fsdp_orch.backends.slurm.parse import SlurmJob
    from fsdp_orch.backends.slurm.profile import SlurmProfile
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.jobspec.schema import JobSpec
    from fsdp_orch.launch.plan_inputs import PlanContext
    from fsdp_orch.record.index import JobIndex
    from fsdp_orch.record.store import Store
    from fsdp_orch.supervise import SUPERVISOR_MODULE

    torch_only = build_torch_only_env(tmp_path / "torch-only")
    profile = SlurmProfile.model_validate({"kind": "slurm", "python": str(torch_only)})
    spec = JobSpec.model_validate({"name": "x", "script": "train.py", "nodes": 2})
    ctx = PlanContext(job_id="abc", attempt=0, run_root=str(tmp_path), job_dir=str(tmp_path),
                      bootstrap_dir="/anywhere/fsdp_orch/bootstrap/site",
                      supervisor_command=(str(torch_only), "-m", SUPERVISOR_MODULE))
    [batch] = [a for a in render(plan_on(job=spec, profile=profile, cluster="slurm", ctx=ctx))
               if a.name == "sbatch.sh"]
    ran = subprocess.run(["bash", "-s"], input=batch.text, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert ran.returncode == 78, (ran.returncode, ran.stdout, ran.stderr)
    said = f"python {torch_only} on "
    assert said in ran.stderr and "cannot import fsdp_orch" in ran.stderr, ran.stderr
    # each node's script of an attempt stops the same way, in the words the supervisor classifies
    # as node_setup_error (not retried), before its output goes to the node-local console
    node = [a for a in render(plan_on(job=spec, profile=profile, cluster="slurm", ctx=ctx))
            if a.name == "node.sh"][0]
    step = subprocess.run(["bash", "-s"], input=node.text, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path,
                          env={**clean_env(), "SLURM_NODEID": "0", "RDZV_HOST": "127.0.0.1"})
    assert step.returncode == 78, (step.returncode, step.stdout, step.stderr)
    assert step.stderr.startswith(f"[fsdp-orch] node setup: python {torch_only} on "), step.stderr
    assert "cannot import fsdp_orch: install it there" in step.stderr, step.stderr

    job = tmp_path / "job.yaml"
    job.write_text("name: n\nlauncher: python\ncommand: ['true']\n")
    home = tmp_path / "home"
    index = JobIndex(Store(home / "jobs.db"), [str(home / "runs")])
    job_id, _, _ = record_submission(index, SubmitRequest(job, "slurm", home_dir=home))
    index.journal(job_id).scheduled("slurm:41")
    run_dir = Path(json.loads(index.store.status_json(job_id))["run_dir"])
    (run_dir / "slurm-41.out").write_text(ran.stdout + ran.stderr)

    def failed(ids: list[str]) -> dict[str, SlurmJob]:
        return {"41": SlurmJob("41", f"fsdp-orch-{job_id}", "FAILED", "78:0", "", "", "", "node1")}

    refresh(index, index.store.active_jobs(), query_fn=failed)
    status = json.loads(index.store.status_json(job_id))
    assert status["state"] == "FAILED", status
    assert "SLURM job 41 ended FAILED (exit 78:0): python " in status["reason"], status["reason"]
    assert "cannot import fsdp_orch" in status["reason"] and "python:" in status["reason"]
