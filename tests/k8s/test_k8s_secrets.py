"""Secrets by reference on the Kubernetes test cluster, 2 pods x 1 rank: HF_TOKEN by from_env
reaches the ranks through the job's own Kubernetes Secret (``secretKeyRef``, never in a
manifest), the webhook's Authorization by from_file reaches the receiver; no file in the run
folder or the job folder holds a value (grepped as the owner and as a second account), and the
Secret is deleted when the job ends (tests/secret_checks.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_harness import Cli
from k8s_jobs import server_port, wait_for_no_objects, write_profile
from secret_checks import (
    Place,
    SecretJob,
    make_secrets,
    other_account,
    reachable_base,
    receiver,
    write_job,
)

if TYPE_CHECKING:
    from conftest import K8sCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.root]


@pytest.mark.parametrize("supervisor", ["here", "cluster"])
def test_the_pods_get_the_secrets_through_a_kubernetes_secret_and_no_file_holds_them(
        k8s_cluster: K8sCluster, tmp_path: Path, supervisor: str,
        request: pytest.FixtureRequest) -> None:
    """With the supervisor beside the CLI (it makes the job's Secret from the values submit
    handed it), and in its own pod (submit makes the Secret; the pod's supervisor has none of the
    values and makes nothing of them)."""
    account = other_account()
    values = make_secrets(tmp_path / "private")
    in_cluster = {} if supervisor == "here" else {"supervisor": {
        "runs": "cluster", "service_account": request.getfixturevalue("supervisor_account"),
        "api_server": f"https://127.0.0.1:{server_port(k8s_cluster)}"}}
    with reachable_base("fsdp-orch-secrets-k8s-") as base, receiver() as got:
        cli = Cli(home=base / "home", cwd=tmp_path / "work")
        write_profile(cli, k8s_cluster, base, **in_cluster)
        status = SecretJob(cli=cli, cluster="k8s",
                           job=write_job(base / "job", values, got.port, nodes=2),
                           values=values, receiver=got, nodes=2,
                           home=Place(str(cli.home), "the home"),
                           places=[Place(str(base), "home, run and job folders")],
                           account=account).run_and_check()
        # the pods took HF_TOKEN from the job's Secret, by reference
        manifest = (Path(status["run_dir"]) / "attempt-0" / "k8s-job.yaml").read_text()
        assert f"fsdp-orch-{status['id']}-env" in manifest and "secretKeyRef" in manifest
        assert values.hf_token not in manifest
        # gone with the job: no Secret, Job or Service of it is left in the namespace
        assert wait_for_no_objects(k8s_cluster, status["id"]) == []
        for job in json.loads(cli.run("status", "--json").stdout or "[]"):
            assert job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"), job
