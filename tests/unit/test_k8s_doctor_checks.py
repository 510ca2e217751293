"""``doctor`` for the kubernetes kind, its pure parts: the access it needs judged from the API
server's answers (each missing verb named with its resource), the Role that grants exactly that
access, and docs/kubernetes.md showing that Role as ``role_manifest`` writes it. The answers come
from a real cluster in tests/k8s/test_k8s_doctor.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_orch.backends.kubernetes.doctor import (
    JOBSET_ACCESS,
    REQUIRED_ACCESS,
    access_checks,
    claim_check,
    jobset_check,
    kubernetes_checks,
    named_secrets,
    needed_access,
    resource_name,
    role_manifest,
    secret_checks,
    why_no_answer,
)
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.observe.command import CommandResult

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"
BASE = {"kind": "kubernetes", "image": "busybox", "shared_dir": "/srv", "namespace": "ml",
        "volumes": [{"name": "srv", "mount_path": "/srv", "host_path": "/srv"}],
        "run_volume": "srv"}


def profile(**changes: Any) -> KubernetesProfile:
    return KubernetesProfile.model_validate({**BASE, **changes})


def no_command(argv: list[str], timeout: float) -> CommandResult:
    raise AssertionError(f"doctor ran {argv}")


def missing_named(checks: list[Any]) -> set[str]:
    """The 'verb resource' pairs the failed access lines name."""
    named: set[str] = set()
    for check in checks:
        if not check.ok and check.name.startswith("access to "):
            named |= set(check.detail.split(": ", 1)[1].split(", "))
    return named


def test_the_kind_needs_what_it_does_and_jobsets_only_with_use_jobset() -> None:
    assert ("create", "jobs", "batch") in REQUIRED_ACCESS
    assert ("get", "pods/log", "") in REQUIRED_ACCESS
    assert len(set(REQUIRED_ACCESS)) == len(REQUIRED_ACCESS)
    assert needed_access(False) == REQUIRED_ACCESS
    assert needed_access(True) == REQUIRED_ACCESS + JOBSET_ACCESS
    assert {r for _, r, g in JOBSET_ACCESS} == {"jobsets"}
    assert resource_name("jobsets", "jobset.x-k8s.io") == "jobsets.jobset.x-k8s.io"
    assert resource_name("services", "") == "services"


def test_every_access_allowed_is_one_line_per_resource_all_holding() -> None:
    checks = access_checks(dict.fromkeys(REQUIRED_ACCESS, True), "ml")
    assert all(c.ok for c in checks)
    assert [c.name for c in checks][:2] == ["access to jobs.batch", "access to services"]
    assert len(checks) == len({(r, g) for _, r, g in REQUIRED_ACCESS})
    assert checks[0].detail == "create, delete, get, list, watch in namespace ml"


def test_each_missing_access_is_named_with_its_resource_and_the_role_to_grant_it() -> None:
    allowed = dict.fromkeys(needed_access(True), True)
    for access in (("create", "jobs", "batch"), ("delete", "services", ""),
                   ("get", "pods/log", ""), ("watch", "jobsets", "jobset.x-k8s.io")):
        allowed[access] = False
    checks = access_checks(allowed, "ml")
    assert missing_named(checks) == {"create jobs.batch", "delete services", "get pods/log",
                                     "watch jobsets.jobset.x-k8s.io"}
    failed = [c for c in checks if not c.ok]
    assert len(failed) == 4
    assert failed[0].detail == "missing in namespace ml: create jobs.batch"
    assert all("docs/kubernetes.md" in c.fix and "Role" in c.fix for c in failed)


def rules_of(manifest: str) -> tuple[dict[str, Any], dict[str, Any], set[tuple[str, str, str]]]:
    role, binding = yaml.safe_load_all(manifest)
    granted = {(verb, resource, group) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    return role, binding, granted


@pytest.mark.parametrize("use_jobset", [False, True])
def test_the_role_grants_exactly_what_the_kind_needs(use_jobset: bool) -> None:
    role, binding, granted = rules_of(role_manifest("123", "alice", use_jobset))
    assert granted == set(needed_access(use_jobset))
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "123"  # text, not a number
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "123"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "alice"}]


def doc_blocks() -> list[str]:
    return re.findall(r"^```text\n(.*?)^```", DOC.read_text(), re.S | re.M)


def test_the_docs_show_the_role_as_role_manifest_writes_it() -> None:
    """docs/kubernetes.md's Role cannot drift from the access doctor checks."""
    blocks = doc_blocks()
    assert role_manifest("default") in blocks
    [jobset_rule] = [b for b in blocks if b.startswith("- apiGroups: [\"jobset.x-k8s.io\"]")]
    assert jobset_rule in role_manifest("default", use_jobset=True)
    assert jobset_rule not in role_manifest("default")


def test_secrets_each_missing_one_named_with_what_uses_it() -> None:
    prof = profile(image_pull_secrets=["regcred"],
                   env_from_secrets=[{"env": "WANDB_API_KEY", "secret": "wandb", "key": "api-key"},
                                     {"env": "HF_TOKEN", "secret": "hf", "key": "token"},
                                     {"env": "OTHER", "secret": "regcred", "key": "x"}])
    assert named_secrets(prof) == ["regcred", "wandb", "hf"]
    [ok] = secret_checks(prof, {"regcred": {"x", ".dockerconfigjson"}, "wandb": {"api-key"},
                                "hf": {"token"}})
    assert ok.ok and ok.detail == "regcred, wandb, hf in namespace ml"
    [bad] = secret_checks(prof, {"regcred": {".dockerconfigjson"}, "wandb": None,
                                 "hf": "403 Forbidden"})
    assert not bad.ok
    assert ("Secret wandb does not exist in namespace ml (env_from_secrets WANDB_API_KEY)"
            in bad.detail)
    assert "Secret regcred has no key x (env_from_secrets OTHER)" in bad.detail
    assert "Secret hf cannot be read: 403 Forbidden" in bad.detail
    assert secret_checks(profile(), {}) == []


def test_the_run_volumes_claim_must_be_bound() -> None:
    bound = {"spec": {"accessModes": ["ReadWriteMany"]},
             "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"],
                        "capacity": {"storage": "1Ti"}}}
    check = claim_check("runs", "ml", bound)
    assert check.ok and check.detail == "Bound (ReadWriteMany, 1Ti)"
    pending = claim_check("runs", "ml", {"spec": {"accessModes": ["ReadWriteOnce"]},
                                         "status": {"phase": "Pending"}})
    assert not pending.ok and pending.detail.startswith("Pending, not Bound (ReadWriteOnce)")
    missing = claim_check("runs", "ml", None)
    assert not missing.ok and "no PersistentVolumeClaim runs in namespace ml" in missing.detail
    refused = claim_check("runs", "ml", "403 Forbidden")
    assert not refused.ok and refused.detail == "cannot read it: 403 Forbidden"


def test_jobsets_need_the_api_served() -> None:
    assert jobset_check({"jobset.x-k8s.io": ["v1alpha2"], "batch": ["v1"]}).ok
    other = jobset_check({"jobset.x-k8s.io": ["v1alpha1"]})
    assert not other.ok and "versions of jobset.x-k8s.io: v1alpha1" in other.detail
    assert "use_jobset: false" in jobset_check({"batch": ["v1"]}).fix
    assert not jobset_check("no answer (Connection refused)").ok


def test_no_kubeconfig_is_one_failed_line_not_a_raise(tmp_path: Path) -> None:
    checks = kubernetes_checks(profile(kubeconfig=str(tmp_path / "none")), None, no_command)
    assert [(c.name, c.ok) for c in checks] == [("kubeconfig", False)]
    assert checks[0].detail.startswith(f"no kubeconfig at {tmp_path / 'none'}")


def test_no_such_context_is_one_failed_line(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))
    checks = kubernetes_checks(profile(kubeconfig=str(config), context="b"), None, no_command)
    assert [(c.name, c.ok) for c in checks] == [("kubeconfig", False)]
    assert "has no context 'b'; it has a" in checks[0].detail


def test_a_server_that_does_not_answer_is_said_in_one_line() -> None:
    from urllib3.connection import HTTPSConnection
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    cause = NewConnectionError(HTTPSConnection("127.0.0.1", 1),
                               "Failed to establish a new connection: [Errno 111] Connection "
                               "refused")
    said = why_no_answer(MaxRetryError(None, "/version/", cause))  # type: ignore[arg-type]
    assert said == "Failed to establish a new connection: [Errno 111] Connection refused"
    assert why_no_answer(TimeoutError()) == "TimeoutError"


def test_the_dry_runs_pod_is_the_pod_an_attempt_makes() -> None:
    """doctor's probe (``probe_pod``) against the golden Job of the same profile: every field
    the server judges a pod by is the same, so what the dry run admits an attempt's pod is."""
    from fsdp_orch.backends.kubernetes.probe import probe_job, probe_pod
    from fsdp_orch.backends.registry import parse_profile

    repo = Path(__file__).resolve().parents[2]
    profile = parse_profile(repo / "tests" / "fixtures" / "clusters" / "kubernetes.yaml")
    golden = yaml.safe_load((repo / "tests" / "golden" / "kubernetes-torchrun" / "k8s-job.yaml")
                            .read_text())["spec"]["template"]["spec"]
    pod = probe_pod(profile)  # type: ignore[arg-type]
    assert probe_job(pod)["spec"]["template"]["spec"] == pod["spec"]
    probe = pod["spec"]
    for key in ("restartPolicy", "enableServiceLinks", "automountServiceAccountToken",
                "serviceAccountName", "priorityClassName", "securityContext", "nodeSelector",
                "tolerations", "affinity", "imagePullSecrets", "volumes"):
        assert probe.get(key) == golden.get(key), key
    for key in ("image", "imagePullPolicy", "resources", "volumeMounts"):
        assert probe["containers"][0][key] == golden["containers"][0][key], key
