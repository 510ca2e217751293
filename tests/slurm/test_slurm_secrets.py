"""Secrets by reference on the real SLURM test cluster, 2 nodes x 1 rank, from a login node kept
apart (its own mount namespace, a private tmpfs home) with a shared_dir the compute side sees:
HF_TOKEN by from_env reaches the ranks through sbatch's environment, the webhook's Authorization
by from_file reaches the receiver from the notifier on the login node, and no file holds either
(tests/secret_checks.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from secret_checks import (
    Place,
    SecretJob,
    make_secrets,
    other_account,
    reachable_base,
    receiver,
    scratch_in,
    write_job,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.root]


@pytest.fixture
def account() -> tuple[int, int]:
    return other_account()


@pytest.fixture
def login_node(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A login node (``LoginNode`` of tests/slurm/conftest.py) whose home, work folder and
    shared_dir (1777) lie in a folder every account may list; closed after the checks that follow
    the test."""
    conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))
    assert (conftest is not None
            and hasattr(conftest, "LoginNode")), "tests/slurm/conftest.py is not loaded"
    with reachable_base("fsdp-orch-secrets-slurm-") as base:
        node = conftest.LoginNode(base, scratch_in(base))
        try:
            yield node
        finally:
            node.close()


def test_a_slurm_job_with_a_shared_dir_gets_its_secrets_by_reference_and_no_file_holds_them(
        slurm_cluster, account, login_node, tmp_path):
    values = make_secrets(tmp_path / "private")
    base = login_node.work.parent

    def inside(argv: Sequence[str]):  # type: ignore[no-untyped-def]
        return login_node.inside(*argv)

    with receiver() as got:
        # base holds the login node's private home (seen only inside it), the shared_dir and the job
        status = SecretJob(cli=login_node.cli, cluster="slurm",
                           job=write_job(base / "job", values, got.port, nodes=2),
                           values=values, receiver=got, nodes=2,
                           home=Place(str(login_node.home), "the login node's home", inside),
                           places=[Place(str(base), "login node's home, shared_dir, job", inside)],
                           account=account).run_and_check()
    assert Path(status["run_dir"]).is_relative_to(base / "shared"), status["run_dir"]
