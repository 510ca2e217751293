"""``doctor``'s dry run: a pod as the profile makes them (image, resources, volumes, node selector,
tolerations, affinity, host network, security context, service account, priority class), sent
with ``dryRun=All``: what the API server would refuse of any job's pods on this profile (a quota,
admission policies, a host network or hostPath the namespace forbids, an invalid value) is said
before a job is submitted. A Job's dry run alone would not say it: its pods are admitted only when
its controller makes them. Without the right to create pods, the Job of one such pod is sent
instead (what is invalid, the Job's own quota), and the line says what it could not check.
Nothing is created."""

from __future__ import annotations

from typing import Any

from fsdp_orch.backends.kubernetes.api import Api, ApiRefused
from fsdp_orch.backends.kubernetes.manifest import (
    CONTAINER,
    MANAGER,
    pod_resources,
    pod_volumes,
    security_context,
    tolerations,
    volume_mounts,
)
from fsdp_orch.backends.kubernetes.profile import MANAGED_BY, KubernetesProfile
from fsdp_orch.vocab.checks import Check

PROBE_NAME = "fsdp-orch-doctor-probe"


def probe_pod(profile: KubernetesProfile) -> dict[str, Any]:
    """A pod with the profile's pod spec, running ``true`` (pure)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "enableServiceLinks": False,
        "automountServiceAccountToken": profile.service_account is not None,
        "containers": [{"name": CONTAINER, "image": profile.image,
                        "imagePullPolicy": profile.image_pull_policy, "command": ["true"],
                        "resources": pod_resources(profile),
                        "volumeMounts": volume_mounts(profile)}],
        "volumes": pod_volumes(profile)}
    optional = {"serviceAccountName": profile.service_account,
                "priorityClassName": profile.priority_class,
                "securityContext": security_context(profile) or None,
                "nodeSelector": profile.node_selector or None,
                "tolerations": tolerations(profile) or None, "affinity": profile.affinity or None,
                "imagePullSecrets": [{"name": n} for n in profile.image_pull_secrets] or None}
    spec.update({k: v for k, v in optional.items() if v is not None})
    if profile.host_network:
        spec.update({"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"})
    labels = {**profile.labels, MANAGED_BY: MANAGER}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": PROBE_NAME, "namespace": profile.namespace, "labels": labels},
            "spec": spec}


def probe_job(pod: dict[str, Any]) -> dict[str, Any]:
    """The Job of one such pod (pure)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": pod["metadata"],
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels":
                                                                  pod["metadata"]["labels"]},
                                                     "spec": pod["spec"]}}}


def probe_check(api: Api, profile: KubernetesProfile, may_create_pods: bool) -> Check:
    """The server's dry run of ``probe_pod`` (or, without the right to create pods, of
    ``probe_job``), as one line."""
    name = "a pod of this profile (server dry run)"
    pod = probe_pod(profile)
    try:
        api.create(pod if may_create_pods else probe_job(pod), dry_run=True)
    except ApiRefused as refused:
        return Check(name, False, refused.detail,
                     "change what the server refuses in the profile (or ask the cluster's "
                     "admins for it); nothing was created")
    if not may_create_pods:
        return Check(name, True, "the API server would take a Job of such pods; their admission "
                                 "(pod quotas, policies) is checked only with the right to "
                                 "create pods (a dry run creates nothing)")
    return Check(name, True, "the API server would admit it (image, resources, volumes, "
                             "placement, quota, policies); nothing was created")


__all__ = ["PROBE_NAME", "probe_check", "probe_job", "probe_pod"]
