"""The kubernetes kind's manifests read back as Kubernetes objects: for each launcher of its
profile and for the JobSet variant, through the real planner and templates, in the golden context
of tests/unit/test_render_golden.py (the same job, job id, run root and job folder), with the
fixture profiles tests/fixtures/clusters/kubernetes*.yaml. Names are RFC 1123, labels are there, no
service account token unless asked, the environment by reference only. The golden files of these
cases, and bash -n and shellcheck over their scripts, are test_render_golden's
(tests/golden/kubernetes-<case>/)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from planning import SUPERVISOR

from fsdp_orch.backends.kubernetes.kind import KIND
from fsdp_orch.backends.kubernetes.manifest import yaml_value
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.launch.plan import make_plan
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.launch.render import Artifact, render_plan
from fsdp_orch.places.builtin import builtin_dir

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures"
NODES = 2
# (fixture profile, launcher): every launcher of the kind, then the JobSet on the host network
CASES = [*[("kubernetes", launcher) for launcher in KubernetesProfile.launchers],
         ("kubernetes-jobset", "torchrun")]
IDS = [f"{profile}-{launcher}" for profile, launcher in CASES]
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def fixture_profile(name: str) -> KubernetesProfile:
    profile = parse_profile(FIXTURES / "clusters" / f"{name}.yaml")
    assert isinstance(profile, KubernetesProfile)
    return profile


@functools.cache
def render_case(profile_name: str, launcher: str) -> tuple[Artifact, ...]:
    """As test_render_golden's render_case renders a kind's case (its context, word for word)."""
    profile = fixture_profile(profile_name)
    job, _ = load_job(FIXTURES / "jobs" / "script.yaml",
                      [f"launcher={launcher}", f"nodes={NODES}", 'launch.umask="0022"'])
    ctx = PlanContext(job_id="j0123456789a", attempt=1, run_root="/srv/fsdp-orch",
                      job_dir="/srv/jobs/demo", local_has_gpu=False,
                      bootstrap_dir="/opt/fsdp-orch/fsdp_orch/bootstrap/site",
                      supervisor_command=SUPERVISOR)
    plan = make_plan(job, profile, profile.kind, ctx, KIND)
    return tuple(render_plan(plan, KIND, search=[builtin_dir("templates")]))


def test_the_artifacts_of_a_job_and_of_a_jobset() -> None:
    names = {case: sorted(a.name for a in render_case(*case)) for case in CASES}
    assert names[("kubernetes", "torchrun")] == ["job.json", "k8s-job.yaml", "k8s-service.yaml",
                                                 "node.sh"]
    assert names[("kubernetes-jobset", "torchrun")] == ["job.json", "k8s-jobset.yaml", "node.sh"]
    for case in CASES:
        for art in render_case(*case):
            assert art.executable == art.name.endswith(".sh"), (case, art.name)
            assert art.path.startswith("/srv/fsdp-orch/runs/j0123456789a/"), art.path


def manifests_of(case: tuple[str, str]) -> dict[str, dict[str, Any]]:
    """Each YAML manifest of ``case``, read back: one document a file."""
    out = {}
    for art in render_case(*case):
        if art.name.startswith("k8s-"):
            docs = list(yaml.safe_load_all(art.text))
            assert len(docs) == 1 and isinstance(docs[0], dict), art.name
            out[art.name] = docs[0]
    return out


def pod_of(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "JobSet":
        (replicated,) = manifest["spec"]["replicatedJobs"]
        assert replicated["replicas"] == 1
        return job_spec_of(manifest)["template"]
    return manifest["spec"]["template"]


def job_spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "JobSet":
        return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    return manifest["spec"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_manifests_read_back_as_kubernetes_objects(case: tuple[str, str]) -> None:
    found = manifests_of(case)
    main = found.get("k8s-job.yaml") or found["k8s-jobset.yaml"]
    name = main["metadata"]["name"]
    assert name == "fsdp-orch-j0123456789a-a1" and DNS_LABEL.fullmatch(name) and len(name) <= 63
    expected = {"app.kubernetes.io/managed-by": "fsdp-orch", "fsdp-orch/job-id": "j0123456789a",
                "fsdp-orch/attempt": "1", "fsdp-orch/user": "fsdp-orch"}
    for manifest in found.values():
        assert expected.items() <= manifest["metadata"]["labels"].items()
        assert manifest["metadata"]["namespace"] == fixture_profile(case[0]).namespace
    spec = job_spec_of(main)
    assert (spec["completionMode"], spec["completions"], spec["parallelism"],
            spec["backoffLimit"]) == ("Indexed", NODES, NODES, 0)
    pod = pod_of(main)
    assert expected.items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["subdomain"] == name
    assert pod["spec"]["enableServiceLinks"] is False
    (container,) = pod["spec"]["containers"]
    node_sh = next(a for a in render_case(*case) if a.name == "node.sh")
    assert container["command"] == ["bash", node_sh.path]
    if "k8s-service.yaml" in found:
        service = found["k8s-service.yaml"]["spec"]
        assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
        assert service["selector"].items() <= pod["metadata"]["labels"].items()


def test_no_service_account_token_unless_the_profile_names_an_account() -> None:
    jobset_pod = pod_of(manifests_of(("kubernetes-jobset", "torchrun"))["k8s-jobset.yaml"])
    assert jobset_pod["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in jobset_pod["spec"]
    assert jobset_pod["spec"]["hostNetwork"] is True
    pod = pod_of(manifests_of(("kubernetes", "torchrun"))["k8s-job.yaml"])
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["automountServiceAccountToken"] is True


def test_the_environment_is_in_the_manifest_by_reference_only() -> None:
    """The job's plain values stay in node.sh (the user's own file); the manifest, which whoever
    may read Jobs reads, names Secrets: the job's own for its references, the profile's."""
    case = ("kubernetes", "torchrun")
    pod = pod_of(manifests_of(case)["k8s-job.yaml"])
    (container,) = pod["spec"]["containers"]
    assert container["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": "fsdp-orch-j0123456789a-env", "key": "HF_TOKEN"}}},
        {"name": "WANDB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "wandb",
                                                                "key": "api-key"}}}]
    texts = {a.name: a.text for a in render_case(*case)}
    assert "golden-plain-key" in texts["node.sh"]
    assert not any("golden-plain-key" in text for name, text in texts.items()
                   if name.startswith("k8s-"))


def test_the_pod_asks_for_the_profiles_resources_and_mounts_its_volumes() -> None:
    pod = pod_of(manifests_of(("kubernetes", "torchrun"))["k8s-job.yaml"])
    (container,) = pod["spec"]["containers"]
    amounts = {"cpu": "16", "memory": "256Gi", "nvidia.com/gpu": "4"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    assert container["volumeMounts"] == [{"name": "srv", "mountPath": "/srv"},
                                         {"name": "data", "mountPath": "/data", "readOnly": True},
                                         {"name": "fsdp-orch-shm", "mountPath": "/dev/shm"}]
    assert pod["spec"]["volumes"] == [
        {"name": "srv", "persistentVolumeClaim": {"claimName": "team-srv"}},
        {"name": "data", "hostPath": {"path": "/mnt/datasets", "type": "Directory"}},
        {"name": "fsdp-orch-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
    assert pod["spec"]["tolerations"][1] == {"key": "spot", "operator": "Equal", "value": "true",
                                             "effect": "NoExecute", "tolerationSeconds": 120}
    assert pod["spec"]["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-creds"}]
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["us-east-1a"]


def test_the_rendezvous_is_pod_0s_stable_name_or_the_profiles_address() -> None:
    scripts = {case: next(a.text for a in render_case(*case) if a.name == "node.sh")
               for case in CASES}
    job = scripts[("kubernetes", "torchrun")]
    assert "RDZV_HOST=fsdp-orch-j0123456789a-a1-0.fsdp-orch-j0123456789a-a1\n" in job
    assert 'NODE_ADDR="$(hostname)".fsdp-orch-j0123456789a-a1\n' in job
    assert 'NODE_RANK="${JOB_COMPLETION_INDEX:?' in job
    jobset = scripts[("kubernetes-jobset", "torchrun")]
    # one machine's host network: each pod a loopback address of its own
    assert "RDZV_HOST=127.0.0.1\n" in jobset
    assert "NODE_ADDR=127.0.0.$((NODE_RANK + 1))\n" in jobset
    assert "NODE_ADDR=" not in scripts[("kubernetes", "python")]


def test_a_jobset_restarts_nothing_itself_and_names_its_service() -> None:
    jobset = manifests_of(("kubernetes-jobset", "torchrun"))["k8s-jobset.yaml"]
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["spec"]["failurePolicy"] == {"maxRestarts": 0}
    assert jobset["spec"]["network"] == {"enableDNSHostnames": True,
                                         "subdomain": "fsdp-orch-j0123456789a-a1"}


@pytest.mark.parametrize("text", ["", "plain", 'a "quoted" \\ path', "multi\nline: x\n- y",
                                  "# not a comment", "{not: a mapping}", "true", "1e3", "~",
                                  "tab\there", "é ünicode ☃ 日本", "emoji 😀", "\u2028\x85\x00"])
def test_a_value_is_read_back_as_it_was(text: str) -> None:
    assert yaml.safe_load(f"key: {yaml_value(text)}") == {"key": text}
    assert "\n" not in yaml_value(text)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(), inner, max_size=3), max_leaves=10))
def test_any_mapping_is_read_back_as_it_was(value: Any) -> None:
    assert yaml.safe_load(yaml_value({"v": value})) == {"v": value}
