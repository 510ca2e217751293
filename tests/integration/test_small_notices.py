"""Smaller things users hit (issue 67): the script's own checkpoints follow the umask submit ran
with while fsdp-orch's run folder stays private; a fault kind the script cannot meet is refused at
submit with nothing written; a Trainer's own ``--fsdp`` on CPU and an ``fsdp:`` block a script
never reads are said by ``render``. Real jobs: the unchanged torchrun FSDP2 script, 2 CPU ranks."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_harness import why

from fsdp_orch.launch.start_choices import TRAINER_FSDP_ON_CPU
from fsdp_orch.places.builtin import local_has_gpu

pytestmark = pytest.mark.slow

SMALL = ["--steps", "12", "--save-every", "6", "--log-every", "6", "--dim", "32", "--batch-size",
         "4"]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.lstat().st_mode)
            for p in [folder, *folder.rglob("*")] if not p.is_symlink()}


@pytest.mark.parametrize("standby", ["auto", "off"])
def test_the_scripts_checkpoints_follow_the_submit_umask_the_run_folder_stays_private(
        unchanged, standby):
    cli, job = unchanged("torchrun_fsdp2")
    with umask(0o022):
        proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job),
                       "--set", "args=" + json.dumps(SMALL), "--set", f"launch.standby={standby}")
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED", why(status)
    written = modes(job.parent / "ckpt")
    assert any(name.endswith(".distcp") for name in written), written
    # as the same script run by hand with umask 022 writes them
    assert {m for n, m in written.items() if (job.parent / "ckpt" / n).is_dir()} == {0o755}
    assert {m for n, m in written.items() if (job.parent / "ckpt" / n).is_file()} == {0o644}
    run_dir = Path(status["run_dir"])
    own = modes(run_dir)
    assert any("stacks" in name for name in own), own  # written by the bootstrap inside a rank
    loose = {n: oct(m) for n, m in own.items() if m & 0o077}  # 0700 folders, 0600 (0700) files
    assert not loose, loose
    spec = json.loads((run_dir / "job.json").read_text())
    assert spec["launch"]["umask"] == "0022"


def test_a_fault_only_the_runtime_injects_is_refused_for_a_script_without_it(unchanged):
    cli, job = unchanged("torchrun_fsdp2")
    proc = cli.run("submit", "--cluster", "local", str(job),
                   "--set", "env.FSDP_ORCH_FAULT=checkpoint_crash:step=6:rank=0")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("fsdp-orch: error: ") and "env.FSDP_ORCH_FAULT: checkpoint_crash" in line
    assert "train.py does not import fsdp_orch.runtime" in line and "Traceback" not in line
    assert not cli.home.exists() or not (cli.home / "runs").exists()  # nothing written
    rendered = cli.run("render", "--cluster", "local", str(job), "--set",
                       "env.FSDP_ORCH_FAULT=checkpoint_crash:step=6:rank=0", check=True)
    assert "submit refuses env.FSDP_ORCH_FAULT: checkpoint_crash" in rendered.stderr


def test_the_demo_using_the_runtime_may_ask_for_a_checkpoint_crash(cli, demo):
    rendered = cli.run("render", "--cluster", "local", str(demo), "--set",
                       "env.FSDP_ORCH_FAULT=checkpoint_crash:step=6:rank=0", check=True)
    assert "submit refuses" not in rendered.stderr and "fsdp: applies" not in rendered.stderr


@pytest.mark.skipif(local_has_gpu(), reason="a Trainer runs --fsdp as FSDP on a GPU")
def test_a_trainers_own_fsdp_on_cpu_and_an_fsdp_block_it_never_reads_are_said(unchanged):
    cli, job = unchanged("hf_trainer")
    rendered = cli.run("render", "--cluster", "local", str(job), "--set",
                       'args=[--output_dir, out, --fsdp, "full_shard auto_wrap", --use_cpu]',
                       "--set", "fsdp.version=2", check=True)
    lines = rendered.stderr.splitlines()
    assert f"fsdp-orch: {TRAINER_FSDP_ON_CPU.format(flag='--fsdp')}" in lines, lines
    assert any(line.startswith("fsdp-orch: fsdp: applies to scripts using fsdp_orch.runtime; "
                               "train.py does not import it") for line in lines), lines
