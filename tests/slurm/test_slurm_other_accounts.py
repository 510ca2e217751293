"""The other account's attacks where they apply on SLURM (issue 42): from a login node kept apart
(its own mount namespace, a private home), with a ``shared_dir`` every account can write (1777,
like /scratch). A checkpoint folder planted in the shared_dir, and a cluster profile planted in a
shared folder the user works in, are refused at submit with one line, and nothing of them runs or
reaches the scheduler. Real test cluster, real second account (``useradd``, ``setpriv``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import Cli, copy_demo, demo_args
from other_accounts import PLANT_CHECKPOINT, as_other, plant_wrapper
from secret_checks import OTHER, other_account, reachable_base, scratch_in

pytestmark = [pytest.mark.slurm, pytest.mark.root]


@pytest.fixture
def account() -> tuple[int, int]:
    return other_account()


@pytest.fixture
def login_node(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Path]]:
    """A login node whose shared_dir is a 1777 folder: (node, shared_dir)."""
    conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))
    assert conftest is not None and hasattr(conftest, "LoginNode")
    with reachable_base("fsdp-orch-other-slurm-") as base:
        shared = scratch_in(base)
        node = conftest.LoginNode(base, shared)
        try:
            yield node, shared
        finally:
            node.close()


def queued(slurm_cluster) -> set[str]:  # type: ignore[no-untyped-def]
    """The scheduler's job ids now (the tests before may leave a job ending)."""
    return set(slurm_cluster.run("squeue", "--noheader", "-o", "%i").stdout.split())


def test_a_checkpoint_planted_in_the_shared_dir_is_refused_at_submit(
        slurm_cluster, account, login_node, tmp_path):
    node, shared = login_node
    marker, planted = shared / "ran-as-the-victim", shared / "ckpt"
    planter = shared / "plant.py"
    planter.write_text(PLANT_CHECKPOINT)
    planter.chmod(0o644)
    as_other(account, f"mkdir -m 777 {planted}; python3 {planter} {planted} {marker}")
    demo = copy_demo(tmp_path)
    before = queued(slurm_cluster)
    proc = node.cli.run("submit", "--cluster", "slurm", str(demo), "--set", demo_args(10),
                        "--set", "nodes=2", "--set", "procs_per_node=1",
                        "--set", f"checkpoint.dir={planted}", timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    [line] = proc.stderr.strip().splitlines()
    assert f"refused checkpoint folder {planted}" in line, line
    assert f"uid {account[0]} ({OTHER})" in line and "mode 0777" in line, line
    assert "Traceback" not in proc.stderr
    time.sleep(2)
    assert not marker.exists(), f"the planted checkpoint was loaded: {marker.read_text()}"
    assert queued(slurm_cluster) <= before  # nothing reached the scheduler
    assert not (shared / "runs").exists() or not any((shared / "runs").iterdir())


def test_a_profile_planted_where_the_user_works_on_the_login_node_is_refused(
        slurm_cluster, account, login_node, tmp_path):
    node, shared = login_node
    marker = shared / "ran-as-the-victim"
    wrapper = plant_wrapper(account, shared, marker)
    work = shared / "work"
    as_other(account, f"mkdir -m 777 {work}; mkdir -m 755 {work}/clusters; "
                      f"printf 'kind: slurm\\npython: {wrapper}\\nshared_dir: {shared}\\n'"
                      f" > {work}/clusters/slurm.yaml")
    prefix = tuple(f"--wd={work}" if part.startswith("--wd=") else part
                   for part in node.cli.prefix)
    cli = Cli(home=node.home, cwd=work, prefix=prefix)  # the victim works in the shared folder
    demo = copy_demo(tmp_path)
    before = queued(slurm_cluster)
    proc = cli.run("submit", "--cluster", "slurm", str(demo), "--set", demo_args(10), timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    [line] = proc.stderr.strip().splitlines()
    assert f"refused cluster profile {work}/clusters/slurm.yaml" in line, line
    assert f"uid {account[0]} ({OTHER})" in line, line
    time.sleep(2)
    assert not marker.exists(), f"the planted python ran as the victim: {marker.read_text()}"
    assert queued(slurm_cluster) <= before  # nothing reached the scheduler
