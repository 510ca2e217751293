"""``doctor`` for the kubernetes kind against the real test cluster: every line holds for an admin;
a service account bound to the Role of docs/kubernetes.md passes too, and one bound to that Role
less two verbs is told exactly those two; a server that does not answer is one line within
seconds; a missing Secret and a claim that is not Bound are named."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from fsdp_orch.backends.kubernetes.doctor import ANSWERS, kubernetes_checks, role_manifest
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.observe.command import CommandResult
from fsdp_orch.vocab.checks import Check

if TYPE_CHECKING:  # tests/ is no package: the fixture's class is for readers and type checkers
    from conftest import K8sCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.root]

ENV_SECRET, PULL_SECRET = "doctor-env", "doctor-pull"
DOCTOR_BOUND_S = 15  # a whole doctor against a server that does not answer


def no_command(argv: list[str], timeout: float) -> CommandResult:
    raise AssertionError(f"doctor ran {argv}")


def profile(cluster: K8sCluster, run_dir: Path, **changes: Any) -> KubernetesProfile:
    """A profile of the session's namespace with a host_path run volume and the two Secrets the
    module makes."""
    return KubernetesProfile.model_validate({
        "kind": "kubernetes", "kubeconfig": str(cluster.kubeconfig),
        "namespace": cluster.namespace, "image": cluster.image, "shared_dir": str(run_dir),
        "volumes": [{"name": "runs", "mount_path": str(run_dir), "host_path": str(run_dir)}],
        "run_volume": "runs", "image_pull_secrets": [PULL_SECRET],
        "env_from_secrets": [{"env": "HF_TOKEN", "secret": ENV_SECRET, "key": "token"}],
        **changes})


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


@pytest.fixture(scope="module")
def secrets_made(k8s_cluster: K8sCluster) -> None:
    from kubernetes import client

    core = client.CoreV1Api(k8s_cluster.api_client())
    ns = k8s_cluster.namespace
    core.create_namespaced_secret(ns, {"metadata": {"name": ENV_SECRET},
                                       "stringData": {"token": "not-a-real-token"}})
    core.create_namespaced_secret(ns, {"metadata": {"name": PULL_SECRET},
                                       "type": "kubernetes.io/dockerconfigjson",
                                       "stringData": {".dockerconfigjson": '{"auths": {}}'}})


def test_every_check_holds_for_an_admin(k8s_cluster: K8sCluster, secrets_made: None,
                                        tmp_path: Path) -> None:
    checks = kubernetes_checks(profile(k8s_cluster, tmp_path), None, no_command)
    assert failed(checks) == []
    names = [c.name for c in checks]
    assert names[:3] == ["kubeconfig", ANSWERS, f"namespace {k8s_cluster.namespace}"]
    assert "access to jobs.batch" in names and "access to pods/log" in names
    assert "Secrets the profile names" in names
    assert checks[1].detail.endswith("Kubernetes v1.25.0-alpha.2") or not k8s_cluster.local
    assert checks[2].detail == "exists"


def cluster_entry(cluster: K8sCluster) -> dict[str, Any]:
    """The admin kubeconfig's cluster: its server and certificate authority."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    current = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    return next(c["cluster"] for c in config["clusters"]
                if c["name"] == current["context"]["cluster"])


def write_kubeconfig(path: Path, cluster: dict[str, Any], token: str, namespace: str) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "doctor",
              "clusters": [{"name": "test", "cluster": cluster}],
              "users": [{"name": "doctor", "user": {"token": token}}],
              "contexts": [{"name": "doctor", "context": {"cluster": "test", "user": "doctor",
                                                          "namespace": namespace}}]}
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        yaml.safe_dump(config, out)
    return path


@pytest.fixture
def bound_account(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[Any]:
    """``bind(name, taken_away)``: a service account bound to docs/kubernetes.md's Role less the
    ``taken_away`` (verb, resource, group) triples; its kubeconfig (a TokenRequest token)."""
    from kubernetes import client

    api = k8s_cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    ns = k8s_cluster.namespace

    def bind(name: str, taken_away: set[tuple[str, str, str]]) -> Path:
        core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
        role, binding = yaml.safe_load_all(role_manifest(ns, f"system:serviceaccount:{ns}:{name}"))
        for rule in role["rules"]:
            [resource], [group] = rule["resources"], rule["apiGroups"]
            rule["verbs"] = [v for v in rule["verbs"] if (v, resource, group) not in taken_away]
        role["metadata"]["name"] = binding["metadata"]["name"] = binding["roleRef"]["name"] = name
        rbac.create_namespaced_role(ns, role)
        rbac.create_namespaced_role_binding(ns, binding)
        token = core.create_namespaced_service_account_token(
            name, ns, {"spec": {"expirationSeconds": 600}}).status.token
        path = write_kubeconfig(tmp_path / f"{name}.kubeconfig", cluster_entry(k8s_cluster),
                                token, ns)
        wait_for_access(path, ns)
        return path

    yield bind


def wait_for_access(kubeconfig: Path, namespace: str, timeout: float = 30) -> None:
    """Until the new binding is in force (the authorizer's cache): 'get pods/log' allowed."""
    from kubernetes import client, config

    reviews = client.AuthorizationV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    body = {"spec": {"resourceAttributes": {"namespace": namespace, "verb": "get",
                                            "resource": "pods", "subresource": "log"}}}
    deadline = time.monotonic() + timeout
    while not reviews.create_self_subject_access_review(body).status.allowed:
        assert time.monotonic() < deadline, f"the binding took no effect in {timeout}s"
        time.sleep(0.2)


def test_the_documented_role_is_enough(k8s_cluster: K8sCluster, secrets_made: None,
                                       bound_account: Any, tmp_path: Path) -> None:
    kubeconfig = bound_account("doctor-role", set())
    checks = kubernetes_checks(profile(k8s_cluster, tmp_path, kubeconfig=str(kubeconfig)), None,
                               no_command)
    assert failed(checks) == []
    # the Role grants no read of namespaces: seen by a dry-run create in it
    [namespace] = [c for c in checks if c.name == f"namespace {k8s_cluster.namespace}"]
    assert namespace.detail == "exists (a dry-run create in it was accepted)"


def test_each_verb_taken_away_is_named(k8s_cluster: K8sCluster, secrets_made: None,
                                       bound_account: Any, tmp_path: Path) -> None:
    kubeconfig = bound_account("doctor-less", {("create", "jobs", "batch"),
                                               ("delete", "services", "")})
    checks = kubernetes_checks(profile(k8s_cluster, tmp_path, kubeconfig=str(kubeconfig)), None,
                               no_command)
    ns = k8s_cluster.namespace
    assert [(c.name, c.detail) for c in failed(checks)] == [
        ("access to jobs.batch", f"missing in namespace {ns}: create jobs.batch"),
        ("access to services", f"missing in namespace {ns}: delete services")]
    assert all("docs/kubernetes.md" in c.fix for c in failed(checks))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_does_not_answer_is_one_line(k8s_cluster: K8sCluster,
                                                   tmp_path: Path) -> None:
    cluster = {**cluster_entry(k8s_cluster), "server": f"https://127.0.0.1:{closed_port()}"}
    kubeconfig = write_kubeconfig(tmp_path / "away.kubeconfig", cluster, "no-token", "default")
    began = time.monotonic()
    checks = kubernetes_checks(profile(k8s_cluster, tmp_path, kubeconfig=str(kubeconfig)), None,
                               no_command)
    took = time.monotonic() - began
    assert [(c.name, c.ok) for c in checks] == [("kubeconfig", True), (ANSWERS, False)]
    said = checks[1].detail
    assert "does not answer" in said and "Connection refused" in said and "\n" not in said, said
    assert took < DOCTOR_BOUND_S, took


def test_a_missing_secret_is_named(k8s_cluster: K8sCluster, secrets_made: None,
                                   tmp_path: Path) -> None:
    prof = profile(k8s_cluster, tmp_path, env_from_secrets=[
        {"env": "HF_TOKEN", "secret": ENV_SECRET, "key": "token"},
        {"env": "WANDB_API_KEY", "secret": "doctor-absent", "key": "api-key"},
        {"env": "OTHER", "secret": ENV_SECRET, "key": "no-such-key"}])
    [bad] = failed(kubernetes_checks(prof, None, no_command))
    assert bad.name == "Secrets the profile names"
    assert bad.detail == (f"Secret {ENV_SECRET} has no key no-such-key (env_from_secrets OTHER); "
                          f"Secret doctor-absent does not exist in namespace "
                          f"{k8s_cluster.namespace} (env_from_secrets WANDB_API_KEY)")


def test_the_run_volumes_claim_must_exist_and_be_bound(k8s_cluster: K8sCluster,
                                                       secrets_made: None,
                                                       tmp_path: Path) -> None:
    from kubernetes import client

    api = k8s_cluster.api_client()
    core = client.CoreV1Api(api)
    ns = k8s_cluster.namespace
    volume = f"{ns}-doctor"  # cluster-wide: deleted below
    core.create_persistent_volume({
        "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": "", "hostPath": {"path": str(tmp_path)},
                 "claimRef": {"namespace": ns, "name": "doctor-bound"}}})  # no other claim's
    try:
        for name in ("doctor-bound", "doctor-pending"):
            core.create_namespaced_persistent_volume_claim(ns, {
                "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                         "resources": {"requests": {"storage": "1Gi"}}}})
        deadline = time.monotonic() + 60
        while core.read_namespaced_persistent_volume_claim(
                "doctor-bound", ns).status.phase != "Bound":
            assert time.monotonic() < deadline, "the claim was not bound in 60s"
            time.sleep(0.3)
        said = {}
        for claim in ("doctor-bound", "doctor-pending", "doctor-absent"):
            volumes = [{"name": "runs", "mount_path": str(tmp_path),
                        "persistent_volume_claim": claim}]
            checks = kubernetes_checks(profile(k8s_cluster, tmp_path, volumes=volumes), None,
                                       no_command)
            [line] = [c for c in checks if c.name == f"run volume's claim {claim}"]
            said[claim] = line
            assert failed(checks) == ([] if claim == "doctor-bound" else [line])
        assert said["doctor-bound"].detail == "Bound (ReadWriteMany, 1Gi)"
        assert said["doctor-pending"].detail.startswith("Pending, not Bound (ReadWriteMany)")
        assert said["doctor-absent"].detail.startswith(
            f"no PersistentVolumeClaim doctor-absent in namespace {ns}")
    finally:
        core.delete_persistent_volume(volume)


def test_a_pod_the_server_would_refuse_is_named_before_any_job(k8s_cluster: K8sCluster,
                                                                secrets_made: None,
                                                                tmp_path: Path) -> None:
    """A quota of 1 CPU in the namespace and a profile asking 8 a pod: the dry run says so."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_cluster.api_client())
    ns = k8s_cluster.namespace
    core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="one-cpu"),
        spec=client.V1ResourceQuotaSpec(hard={"requests.cpu": "1"})))
    try:
        deadline = time.monotonic() + 30  # the quota controller fills in what is used first
        while not core.read_namespaced_resource_quota("one-cpu", ns).status.used:
            assert time.monotonic() < deadline, "the quota was never filled in"
            time.sleep(0.2)
        big = profile(k8s_cluster, tmp_path, resources={"cpu": "8", "memory": "1Gi", "gpus": 0})
        [probe] = [c for c in kubernetes_checks(big, None, no_command) if "dry run" in c.name]
        assert not probe.ok and "exceeded quota: one-cpu" in probe.detail, probe
        small = profile(k8s_cluster, tmp_path, resources={"cpu": "500m", "memory": "1Gi",
                                                          "gpus": 0})
        [probe] = [c for c in kubernetes_checks(small, None, no_command) if "dry run" in c.name]
        assert probe.ok, probe
    finally:
        core.delete_namespaced_resource_quota("one-cpu", ns)
