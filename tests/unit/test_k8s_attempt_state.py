"""An attempt's state from its pods as the API returns them (``backends.kubernetes.attempt_state``):
all succeeded is 0; a pod deleted, being deleted or evicted ends it as taken by the cluster (no
restart budget used), a node lost as a lost node under the budget; an image that cannot be pulled
is the user's error at once; a pod that failed gives its container's exit code; a pending pod says
why."""

from __future__ import annotations

from typing import Any

from fsdp_orch.backends.kubernetes.attempt_state import USERS_ERROR_EXIT, attempt_state
from fsdp_orch.backends.kubernetes.pod_watch import DELETED
from fsdp_orch.vocab.categories import NODE_LOST_EXIT, FailureCategory


def pod(name: str, phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": "localhost"},
            "status": {"phase": phase, **status}}


def terminated(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"containerStatuses": [{"name": "node", "state": {
        "terminated": {"exitCode": code, "reason": reason}}}]}


def test_every_pod_succeeded_is_exit_0_and_fewer_is_still_running() -> None:
    both = {"a-0": pod("a-0", "Succeeded"), "a-1": pod("a-1", "Succeeded")}
    assert attempt_state(both, 2).exit_code == 0
    assert attempt_state({"a-0": pod("a-0", "Succeeded"), "a-1": pod("a-1", "Running")},
                         2).exit_code is None


def test_a_failed_pod_gives_its_exit_code_for_the_logs_to_explain() -> None:
    state = attempt_state({"a-0": pod("a-0", "Running"),
                           "a-1": pod("a-1", "Failed", **terminated(3))}, 2)
    assert state.exit_code == 3 and state.ended_by is None


def test_a_deleted_pod_is_a_lost_node_and_an_evicted_one_too() -> None:
    gone = {"a-0": {**pod("a-0", "Running"), DELETED: True}}
    state = attempt_state(gone, 2)
    assert state.exit_code == NODE_LOST_EXIT
    assert state.ended_by is not None and state.ended_by.retryable
    assert state.ended_by.category == FailureCategory.PREEMPTION_OR_NODE_LOST
    evicted = attempt_state({"a-0": pod("a-0", "Failed", reason="Evicted",
                                        message="The node was low on resource: memory.")}, 2)
    assert evicted.exit_code == NODE_LOST_EXIT
    assert evicted.ended_by is not None
    assert evicted.ended_by.category == FailureCategory.PREEMPTION_OR_NODE_LOST


def test_an_image_that_cannot_be_pulled_is_the_users_error_at_once() -> None:
    waiting = {"containerStatuses": [{"name": "node", "image": "nope:1", "state": {
        "waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}}}]}
    state = attempt_state({"a-0": pod("a-0", "Pending", **waiting)}, 2)
    assert state.exit_code == USERS_ERROR_EXIT
    assert state.ended_by is not None and not state.ended_by.retryable


def test_a_pod_no_node_can_hold_says_the_schedulers_message() -> None:
    unschedulable = {"conditions": [{"type": "PodScheduled", "status": "False",
                                     "reason": "Unschedulable",
                                     "message": "0/1 nodes are available: 1 Insufficient cpu."}]}
    state = attempt_state({"a-0": pod("a-0", "Pending", **unschedulable)}, 2)
    assert state.exit_code is None and state.ended_by is None
    assert state.pending_why is not None and "Insufficient cpu" in state.pending_why


def test_a_pod_that_failed_is_the_cause_before_the_pods_its_job_then_deleted() -> None:
    # once pod a-1 fails, the Indexed Job's controller deletes a-0: not a lost node
    pods = {"a-0": {**pod("a-0", "Running"), DELETED: True},
            "a-1": pod("a-1", "Failed", **terminated(78))}
    state = attempt_state(pods, 2)
    assert state.exit_code == 78 and state.ended_by is None


def test_a_pod_being_deleted_is_taken_by_the_cluster_before_its_container_ends() -> None:
    # the eviction API before 1.26 (no DisruptionTarget), a drain: a deletionTimestamp, then
    # SIGTERM to the container, whose exit would otherwise read as the job's own failure
    evicting = pod("a-0", "Running")
    evicting["metadata"]["deletionTimestamp"] = "2026-12-04T20:00:00Z"
    state = attempt_state({"a-0": evicting, "a-1": pod("a-1", "Running")}, 2)
    assert state.exit_code == NODE_LOST_EXIT
    assert state.ended_by is not None and state.ended_by.taken
    assert "a-0 is being deleted" in state.ended_by.evidence
    killed = {**evicting, "status": {"phase": "Failed", **terminated(143)}}
    assert attempt_state({"a-0": killed}, 2).ended_by is not None
    gone = attempt_state({"a-0": {**pod("a-0", "Running"), DELETED: True}}, 2)
    assert gone.ended_by is not None and gone.ended_by.taken
    assert "a-0 was deleted" in gone.ended_by.evidence


def test_an_eviction_is_taken_and_a_lost_node_is_not() -> None:
    evicted = attempt_state({"a-0": pod("a-0", "Failed", reason="Evicted")}, 2).ended_by
    assert evicted is not None and evicted.taken
    for lost in (pod("a-0", "Failed", reason="NodeLost"), pod("a-0", "Unknown")):
        ended = attempt_state({"a-0": lost}, 2).ended_by
        assert ended is not None and not ended.taken
        assert ended.category == FailureCategory.PREEMPTION_OR_NODE_LOST
