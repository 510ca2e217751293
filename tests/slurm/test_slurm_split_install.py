"""The split install on the real SLURM test cluster (issue 62): the CLI from an environment without
torch (``tests/cli_without_torch.py``) on a login node kept apart, built inside that login node's
private home, so the compute nodes cannot see it, as a pipx folder on a real login node; the
profile's ``python:`` names the ranks' environment (``.venv``, on the filesystem the nodes share).

Before: ``sbatch.sh`` ran the supervisor with the CLI's interpreter and the node agent imported
fsdp_orch from the CLI's package root: neither exists on the nodes, and the job failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import copy_demo, demo_args, why
from cli_without_torch import RANKS_PYTHON, TorchlessCli

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TESTS = Path(__file__).resolve().parents[1]
TWO_NODES = ["--set", "nodes=2", "--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
             "--set", "watch.startup_timeout=120s"]


def torchless_inside(node, where: Path) -> Path:  # type: ignore[no-untyped-def]
    """The CLI's environment without torch, built at ``where`` inside ``node``'s mount namespace
    (its private home): only that login node sees it. Its python."""
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); from pathlib import Path; "
            "from cli_without_torch import build_torchless_env; "
            f"print(build_torchless_env(Path({str(where)!r})))")
    proc = subprocess.run([node.nsenter, f"--target={node.holder.pid}", "--mount", "--",
                           sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    python = Path(proc.stdout.strip().splitlines()[-1])
    assert not python.exists(), "the compute side (this process's view) sees the CLI's env"
    no_torch = node.inside(str(python), "-c", "import torch")
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr, no_torch
    return python


def test_a_job_submitted_from_a_cli_without_torch_succeeds(slurm_cluster, login_nodes,
                                                           tmp_path: Path) -> None:
    [node] = login_nodes(1)
    python = torchless_inside(node, node.home / "pipx" / "venvs" / "fsdp-orch")
    cli = TorchlessCli(home=node.home / "fsdp-orch-home", cwd=node.work, prefix=node.cli.prefix,
                       python=str(python))
    # the login node's profile (the built-in one, with the shared run root) and the ranks' python
    profile = node.work / "clusters" / "slurm.yaml"
    lines = [line for line in profile.read_text().splitlines()
             if not line.startswith("python:")]
    (node.work / "clusters" / "split.yaml").write_text(
        "\n".join([*lines, f"python: {RANKS_PYTHON}"]) + "\n")
    demo = copy_demo(tmp_path)
    proc = cli.run("submit", "--cluster", "split", "--wait", "--json", str(demo), *TWO_NODES,
                   "--set", demo_args(10), timeout=400)
    assert proc.stdout.strip(), proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED" and status["progress"]["step"] == 10, why(status)
    run_dir = Path(status["run_dir"])
    batch = (run_dir / "sbatch.sh").read_text()
    assert f"exec {RANKS_PYTHON} -m fsdp_orch.supervise.supervisor " in batch, batch
    for script in (batch, (run_dir / "attempt-0" / "node.sh").read_text()):
        assert str(node.home) not in script, "a script the nodes run names the login node's home"
