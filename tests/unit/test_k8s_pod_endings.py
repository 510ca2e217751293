"""What a pod's status means to the supervisor (``backends/kubernetes/pod_endings``), from pods
shaped as the API server returns them in JSON. The reasons and messages are Kubernetes' own: the
kubelet's (pkg/kubelet/images/types.go, kuberuntime_container.go, eviction/helpers.go,
preemption/preemption.go, nodeshutdown/, lifecycle/predicate.go, kubelet_pods.go), the node
controller's (pkg/util/node: NodeLost) and, from 1.26 on, the DisruptionTarget condition's
(PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fsdp_orch.backends.kubernetes.pod_endings import PodEnding, pod_ending
from fsdp_orch.vocab.categories import DEFAULT_RETRY_ON, NOT_RETRYABLE, FailureCategory
from fsdp_orch.vocab.hints import hint_for

NAME = "fsdp-orch-0123456789ab-a0-1-x7k2p"
IMAGE = "registry.example.com/ml/train:2025.01"
T = "2025-01-20T10:00:00Z"


def condition(kind: str, status: str = "True", reason: str | None = None,
              message: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None,
                             "lastTransitionTime": T}
    if reason:
        found["reason"] = reason
    if message:
        found["message"] = message
    return found


def pod(phase: str, state: dict[str, Any] | None = None, conditions: list[Any] | None = None,
        node: str | None = "gpu-7", **status: Any) -> dict[str, Any]:
    """A pod of an attempt's Indexed Job, as ``GET /api/v1/namespaces/ns/pods/NAME`` returns it."""
    scheduled = [condition("PodScheduled")] if node else []
    out: dict[str, Any] = {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": NAME, "namespace": "ml-team",
                     "labels": {"fsdp-orch/job-id": "0123456789ab", "fsdp-orch/attempt": "0",
                                "batch.kubernetes.io/job-completion-index": "1"},
                     "annotations": {"batch.kubernetes.io/job-completion-index": "1"}},
        "spec": {"restartPolicy": "Never", "hostname": "fsdp-orch-0123456789ab-a0-1",
                 "subdomain": "fsdp-orch-0123456789ab-a0",
                 "containers": [{"name": "node", "image": IMAGE}],
                 **({"nodeName": node} if node else {})},
        "status": {"phase": phase, "conditions": conditions if conditions is not None
                   else [condition("Initialized"), *scheduled], "qosClass": "Guaranteed",
                   **status},
    }
    if state is not None:
        out["status"]["containerStatuses"] = [{
            "name": "node", "state": state, "lastState": {}, "ready": "running" in state,
            "restartCount": 0, "image": IMAGE, "imageID": "", "started": "running" in state}]
    return out


def terminated(code: int, reason: str, message: str | None = None) -> dict[str, Any]:
    ended = {"exitCode": code, "reason": reason, "startedAt": T, "finishedAt": T,
             "containerID": "containerd://3f2a"}
    return {"terminated": {**ended, **({"message": message} if message else {})}}


def waiting(reason: str, message: str | None = None) -> dict[str, Any]:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def disrupted(reason: str, message: str) -> list[dict[str, Any]]:
    return [condition("DisruptionTarget", "True", reason, message), condition("Initialized"),
            condition("Ready", "False", "PodFailed"), condition("PodScheduled")]


LOST = FailureCategory.PREEMPTION_OR_NODE_LOST
TAKEN = [  # (what, pod, a word the evidence says)
    ("scheduler-preemption", pod("Failed", terminated(143, "Error"), disrupted(
        "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority "
        "pod")), "PreemptionByScheduler"),
    ("drain", pod("Running", {"running": {"startedAt": T}}, disrupted(
        "EvictionByEvictionAPI", "Eviction API: evicting")), "EvictionByEvictionAPI"),
    ("taint-manager", pod("Running", {"running": {"startedAt": T}}, disrupted(
        "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")),
     "NoExecute taint"),
    ("kubelet-pressure-1.27", pod("Failed", terminated(137, "Error"), disrupted(
        "TerminationByKubelet", "The node was low on resource: memory."),
        reason="Evicted", message="The node was low on resource: memory. "),
     "TerminationByKubelet"),
    ("evicted-1.25", pod("Failed", terminated(137, "Error"), reason="Evicted",
                         message="The node was low on resource: ephemeral-storage. Container node "
                                 "was using 52Gi, which exceeds its request of 0. "), "evicted"),
    ("kubelet-preemption", pod("Failed", terminated(137, "Error"), reason="Preempting",
                               message="Preempted in order to admit critical pod"), "Preempting"),
    ("node-shutdown", pod("Failed", terminated(143, "Error"), reason="Terminated",
                          message="Pod was terminated in response to imminent node shutdown."),
     "shutdown"),
    ("node-lost", pod("Unknown", {"running": {"startedAt": T}}, reason="NodeLost",
                      message=f"Node gpu-7 which was running pod {NAME} is unresponsive"),
     "NodeLost"),
    ("phase-unknown", pod("Unknown", {"running": {"startedAt": T}}), "phase Unknown"),
    ("admission-gpus", pod("Failed", None, reason="OutOfnvidia.com/gpu",
                           message="Node didn't have enough resource: nvidia.com/gpu, requested: "
                                   "4, used: 8, capacity: 8"), "OutOfnvidia.com/gpu"),
]


@pytest.mark.parametrize(("what", "the_pod", "word"), TAKEN, ids=[t[0] for t in TAKEN])
def test_what_the_cluster_takes_away_is_a_lost_node_never_the_jobs_fault(
        what: str, the_pod: dict[str, Any], word: str) -> None:
    ending = pod_ending(the_pod)
    assert ending.category == LOST and not ending.is_users_error and ending.pending_why is None
    assert word in ending.evidence and ending.evidence.startswith(f"pod {NAME} on gpu-7: ")
    assert LOST.value in DEFAULT_RETRY_ON and LOST.value not in NOT_RETRYABLE


def test_out_of_its_memory_limit_is_the_oom_killers_sigkill_not_the_gpus() -> None:
    ending = pod_ending(pod("Failed", terminated(137, "OOMKilled")))
    assert ending.category == FailureCategory.KILLED_SIGKILL and not ending.is_users_error
    assert "OOMKilled (exit 137)" in ending.evidence and "resources.memory" in ending.evidence
    assert "OOM killer" in hint_for(FailureCategory.KILLED_SIGKILL, ending.evidence)


IMAGE_ERRORS = [
    waiting("ErrImagePull", f'rpc error: code = NotFound desc = failed to pull and unpack image '
                            f'"{IMAGE}": failed to resolve reference "{IMAGE}": {IMAGE}: '
                            "not found"),
    waiting("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"'),
    waiting("InvalidImageName", 'Failed to apply default image tag "Train:latest": couldn\'t parse '
                                'image reference "Train:latest": invalid reference format: '
                                "repository name must be lowercase"),
    waiting("ErrImageNeverPull", f'Container image "{IMAGE}" is not present with pull policy of '
                                 "Never"),
]


@pytest.mark.parametrize("state", IMAGE_ERRORS, ids=[s["waiting"]["reason"] for s in IMAGE_ERRORS])
def test_an_image_that_cannot_be_pulled_is_the_users_error_at_once(state: dict[str, Any]) -> None:
    ending = pod_ending(pod("Pending", state))
    assert ending == PodEnding(FailureCategory.NODE_SETUP_ERROR, ending.evidence,
                               is_users_error=True)
    assert IMAGE in ending.evidence and state["waiting"]["reason"] in ending.evidence
    assert FailureCategory.NODE_SETUP_ERROR.value in NOT_RETRYABLE


@pytest.mark.parametrize(("message", "named"), [
    ('secret "hf-token" not found', "Secret hf-token does not exist"),
    ('configmap "train-config" not found', "ConfigMap train-config does not exist"),
    ("couldn't find key token in Secret ml-team/hf-token", "Secret ml-team/hf-token has no key "
                                                            "token"),
    ("container has runAsNonRoot and image will run as root (pod: \"x\", container: node)",
     "its configuration cannot be made")])
def test_a_missing_secret_or_config_map_is_named_and_the_users_error(message: str,
                                                                     named: str) -> None:
    ending = pod_ending(pod("Pending", waiting("CreateContainerConfigError", message)))
    assert ending.category == FailureCategory.NODE_SETUP_ERROR and ending.is_users_error
    assert named in ending.evidence and "CreateContainerConfigError" in ending.evidence


def test_an_image_without_bash_cannot_start_node_sh() -> None:
    message = ('failed to create containerd task: failed to create shim task: OCI runtime create '
               'failed: runc create failed: unable to start container process: exec: "bash": '
               "executable file not found in $PATH: unknown")
    ending = pod_ending(pod("Failed", terminated(128, "StartError", message)))
    assert ending.category == FailureCategory.NODE_SETUP_ERROR and ending.is_users_error
    assert "executable file not found" in ending.evidence and "(exit 128)" in ending.evidence


def test_unschedulable_is_pending_with_the_schedulers_message_not_a_failure() -> None:
    message = ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes "
               "are available: 3 No preemption victims found for incoming pod.")
    the_pod = pod("Pending", None, [condition("PodScheduled", "False", "Unschedulable", message)],
                  node=None)
    ending = pod_ending(the_pod)
    assert ending.category is None and not ending.is_users_error
    assert ending.pending_why == f"pod {NAME}: Unschedulable: {message}"


def test_a_claim_that_does_not_exist_is_the_users_error_not_a_wait() -> None:
    message = ('0/1 nodes are available: 1 persistentvolumeclaim "team-srv" not found. preemption: '
               "0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    ending = pod_ending(pod("Pending", None, [condition("PodScheduled", "False", "Unschedulable",
                                                       message)], node=None))
    assert ending.category == FailureCategory.NODE_SETUP_ERROR and ending.is_users_error
    assert "PersistentVolumeClaim team-srv does not exist" in ending.evidence


@pytest.mark.parametrize("state", [
    waiting("ContainerCreating"), waiting("RegistryUnavailable", "image pull failed for "
                                          f"{IMAGE} because the registry is unavailable."),
    waiting("CreateContainerError", "context deadline exceeded")])
def test_what_the_kubelet_retries_itself_is_pending_with_why(state: dict[str, Any]) -> None:
    ending = pod_ending(pod("Pending", state))
    assert ending.category is None and not ending.is_users_error
    assert ending.pending_why is not None and state["waiting"]["reason"] in ending.pending_why
    assert ending.pending_why.startswith(f"pod {NAME} on gpu-7: container node: ")


def test_not_scheduled_yet_is_pending() -> None:
    fresh = pod("Pending", None, [], node=None)
    assert pod_ending(fresh).pending_why == f"pod {NAME}: waiting to be scheduled"
    assert pod_ending({"metadata": {"name": "x"}}).pending_why == "pod x: waiting to be scheduled"


def test_running_succeeded_and_a_plain_exit_are_left_to_the_supervisor() -> None:
    running = pod_ending(pod("Running", {"running": {"startedAt": T}},
                             [condition("Initialized"), condition("Ready"),
                              condition("PodScheduled")]))
    assert running == PodEnding(None, f"pod {NAME} on gpu-7: Running")
    done = pod_ending(pod("Succeeded", terminated(0, "Completed")))
    assert done.category is None and "(exit 0)" in done.evidence
    crashed = pod_ending(pod("Failed", terminated(1, "Error")))
    assert crashed == PodEnding(None, f"pod {NAME} on gpu-7: container node ended (exit 1): Error")


def test_a_disruption_decides_before_the_containers_own_ending() -> None:
    """A preempted pod's container ends in an error too (SIGTERM: 143; after the grace, 137):
    the cluster's taking it is what it means."""
    the_pod = pod("Failed", terminated(137, "OOMKilled"), disrupted("PreemptionByScheduler", "x"))
    assert pod_ending(the_pod).category == LOST
    not_yet = copy.deepcopy(the_pod)
    not_yet["status"]["conditions"][0]["status"] = "False"
    assert pod_ending(not_yet).category == FailureCategory.KILLED_SIGKILL


def test_evidence_is_one_line_of_bounded_length() -> None:
    ending = pod_ending(pod("Pending", waiting("ErrImagePull", "line one\nline two " + "x" * 900)))
    assert "\n" not in ending.evidence and len(ending.evidence) == 500
