"""The kubernetes kind's profile and planning: its rows in the bad-input corpus (each bad field one
clear line naming the file, the field and what was expected: tests/unit/bad_input_corpus.py's
K8S_CASES, run with the rest by test_bad_input_corpus), the built-in profile, the quantities and
names as Kubernetes reads them, and what ``place()`` and the artifacts decide."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from bad_input_corpus import CASES, K8S_CASES, REFUSED  # type: ignore[import-not-found]

from fsdp_orch.backends.kubernetes import syntax
from fsdp_orch.backends.kubernetes.kind import COLD, KIND
from fsdp_orch.backends.kubernetes.manifest import (
    NAME_MAX,
    job_label,
    object_names,
    pod_hostname,
    submitting_user,
)
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile, reserved_label
from fsdp_orch.backends.registry import KIND_MODULES, cluster_kind
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan, make_plan
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.launch.render import render_plan
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.vocab.errors import InputError

BUILTIN = Path(__file__).resolve().parents[2] / "clusters" / "kubernetes.yaml"
BASE = {"kind": "kubernetes", "image": "busybox", "shared_dir": "/srv",
        "volumes": [{"name": "srv", "mount_path": "/srv", "host_path": "/srv"}],
        "run_volume": "srv"}
CTX = PlanContext(job_id="0123456789ab", attempt=0, run_root="/srv/alice", job_dir="/srv/jobs/x",
                  bootstrap_dir="/opt/fsdp_orch/bootstrap/site")


def profile(**changes: object) -> KubernetesProfile:
    return KubernetesProfile.model_validate({**BASE, **changes})


def job(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"name": "demo", "script": "train.py", **fields})


def plan(job_spec: JobSpec, prof: KubernetesProfile, ctx: PlanContext = CTX) -> LaunchPlan:
    return make_plan(job_spec, prof, "k8s", ctx, KIND)


def test_the_kind_is_built_in_and_the_corpus_covers_it() -> None:
    refused = [c for c in K8S_CASES if c.outcome == REFUSED]
    assert len(refused) >= 60 and len(K8S_CASES) - len(refused) >= 5
    assert "kubernetes" in KIND_MODULES and cluster_kind("kubernetes") is KIND
    assert {c.id for c in K8S_CASES} <= {c.id for c in CASES}


def test_the_builtin_profile_is_valid_and_says_what_the_kind_does() -> None:
    prof = KubernetesProfile.model_validate(yaml.safe_load(BUILTIN.read_text()))
    assert "Indexed Job" in prof.description and "headless Service" in prof.description
    assert prof.run_volume == "runs" and prof.shared_dir == "/mnt/fsdp-orch"
    assert prof.service_account is None  # no token in the pods by default


@pytest.mark.parametrize(("text", "value"), [
    ("8", Decimal(8)), ("500m", Decimal("0.5")), ("64Gi", Decimal(64 * 2**30)),
    ("1.5e3", Decimal(1500)), ("1E", Decimal(10**18)), ("1E3", Decimal(1000)),
    (".5", Decimal("0.5")), ("5.", Decimal(5)), ("128974848", Decimal(128974848)),
    ("129M", Decimal(129 * 10**6)), ("123Mi", Decimal(123 * 2**20))])
def test_quantities_read_as_kubernetes_reads_them(text: str, value: Decimal) -> None:
    assert syntax.quantity(text) == value


@pytest.mark.parametrize("text", ["", "-1", "+", "1e", "1.2.3", "64GB", "1 Gi", "Gi", "1ki",
                                  "0x10", "١٠", "1e99999999999"])
def test_what_kubernetes_would_refuse_as_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Kubernetes quantity"):
        syntax.quantity(text)


def test_names_and_labels_as_kubernetes_checks_them() -> None:
    assert syntax.dns_label("a" * 63) and syntax.dns_subdomain("a.b-c.d")
    for bad in ("A", "a_b", "-a", "a-", "a" * 64, "", "a.b"):
        with pytest.raises(ValueError, match="RFC 1123"):
            syntax.dns_label(bad)
    assert syntax.label_key("example.com/team") and syntax.label_value("") == ""
    for bad in ("/a", "a/", "Ex ample.com/a", "a/b/c", "a" * 64):
        with pytest.raises(ValueError, match="label key"):
            syntax.label_key(bad)
    assert syntax.as_label_value("jo.hn smith!") == "jo.hn_smith"
    assert syntax.as_label_value("_" * 70) == "unknown"
    assert len(syntax.as_label_value("a" * 90)) == 63
    assert reserved_label("fsdp-orch/x") and reserved_label("node.kubernetes.io/x")
    assert reserved_label("app.kubernetes.io/managed-by") and reserved_label("k8s.io/x")
    assert not reserved_label("app.kubernetes.io/name") and not reserved_label("team")


def test_place_one_pod_per_node_with_the_profiles_ranks_and_device() -> None:
    gpu = plan(job(nodes=3), profile(resources={"gpus": 8}))
    assert (gpu.nnodes, gpu.nproc_per_node, gpu.device) == (3, 8, "cuda")
    assert gpu.rdzv_host == "fsdp-orch-0123456789ab-a0-0.fsdp-orch-0123456789ab-a0"
    assert not gpu.standby and COLD in gpu.standby_reason
    cpu = plan(job(nodes=2, procs_per_node=3), profile(procs_per_node=2, device="cpu"))
    assert (cpu.nproc_per_node, cpu.device) == (3, "cpu")
    assert plan(job(), profile()).nproc_per_node == 1
    hosted = plan(job(), profile(host_network=True, rdzv_host="127.0.0.1", use_jobset=True))
    assert hosted.rdzv_host == "127.0.0.1"
    jobset = plan(job(nodes=2), profile(use_jobset=True))
    assert jobset.rdzv_host == "fsdp-orch-0123456789ab-a0-node-0-0.fsdp-orch-0123456789ab-a0"


def test_the_job_folder_is_the_images_where_the_profile_says_so() -> None:
    p = plan(job(workdir="src"), profile(workdir="/app", volumes=[
        *BASE["volumes"], {"name": "app", "mount_path": "/app", "host_path": "/code"}]))  # type: ignore[list-item]
    assert p.workdir == "/app/src" and p.checkpoint_dir == "/app/src/checkpoints/demo"


def test_what_the_pods_could_not_find_is_refused_at_render() -> None:
    with pytest.raises(InputError, match="elastic range"):
        plan(job(nodes="1-2"), profile())
    with pytest.raises(InputError, match="also in env_from_secrets") as exc:
        plan(job(env={"HF_TOKEN": "x"}),
             profile(env_from_secrets=[{"env": "HF_TOKEN", "secret": "hf", "key": "token"}]))
    assert exc.value.field == "env"
    off = PlanContext(**{**CTX.__dict__, "job_dir": "/home/alice/job"})
    for checkpoint, field in ((None, "workdir"), ("/scratch/x", "checkpoint.dir")):
        spec = job(checkpoint={"dir": checkpoint}) if checkpoint else job()
        ctx = CTX if checkpoint else off
        with pytest.raises(InputError, match="none of the cluster's volumes") as exc:
            render_plan(plan(spec, profile(), ctx), KIND, search=[builtin_dir("templates")])
        assert exc.value.field == field
    read_only = profile(volumes=[*BASE["volumes"], {"name": "ro", "mount_path": "/ro",  # type: ignore[list-item]
                                                     "host_path": "/ro", "read_only": True}])
    with pytest.raises(InputError, match="read_only"):
        render_plan(plan(job(checkpoint={"dir": "/ro/ckpt"}), read_only), KIND,
                    search=[builtin_dir("templates")])
    never = job(checkpoint={"dir": "/scratch/x", "resume": "never"})
    assert render_plan(plan(never, profile()), KIND, search=[builtin_dir("templates")])


@pytest.mark.parametrize(("job_id", "attempt"), [
    ("0123456789ab", 0), ("0123456789ab", 1234567), ("JOBID", 0), ("jobid", 0),
    ("a" * 64, 3), ("x.y_z-", 1), ("-", 2)])
def test_object_names_are_always_ones_kubernetes_accepts(job_id: str, attempt: int) -> None:
    names = object_names(job_id, attempt, jobset=True)
    assert len(names.name) <= NAME_MAX and syntax.dns_label(names.name)
    assert syntax.dns_label(pod_hostname(names.name, 99999, jobset=True))
    assert syntax.dns_label(names.env_secret) and syntax.label_value(job_label(job_id))
    if job_id == "0123456789ab":  # an id submit draws: the names say it as it is
        assert names.name == f"fsdp-orch-0123456789ab-a{attempt}"
        assert (names.env_secret, job_label(job_id)) == ("fsdp-orch-0123456789ab-env", job_id)


def test_ids_that_read_the_same_lower_cased_keep_apart() -> None:
    assert object_names("JOBID", 0, False).name != object_names("jobid", 0, False).name
    assert job_label("JOBID") == "JOBID"


def test_the_user_label_is_the_run_roots_user_else_this_process() -> None:
    assert submitting_user(plan(job(), profile())) == "alice"
    from fsdp_orch.places.private import user_name

    other = PlanContext(**{**CTX.__dict__, "run_root": "/srv"})
    assert submitting_user(plan(job(), profile(), other)) == user_name()
