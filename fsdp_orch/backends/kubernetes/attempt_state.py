"""Where an attempt stands, as a pure function of its pods (the latest state of each, as
``pod_watch`` keeps them): its exit code once it ended, what the cluster says ended it
(``EngineEnding``: a pod evicted, deleted or on a lost node, an image that cannot be pulled), and
why it is not running yet (the scheduler's message)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_orch.backends.base import EngineEnding
from fsdp_orch.backends.kubernetes.pod_endings import pod_ending
from fsdp_orch.backends.kubernetes.pod_watch import DELETED
from fsdp_orch.vocab.categories import NODE_LOST_EXIT, FailureCategory

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
USERS_ERROR_EXIT = 1  # an attempt ended for the user's error before any rank ran


@dataclass(frozen=True)
class AttemptState:
    exit_code: int | None  # None while it runs (or waits)
    ended_by: EngineEnding | None
    pending_why: str | None  # not every pod runs yet, and why (the first such pod's)


def attempt_state(pods: Mapping[str, Mapping[str, Any]], nnodes: int) -> AttemptState:
    """The attempt of ``nnodes`` pods, from the pods seen so far, by name. A pod that failed on its
    own is the cause before a pod deleted: once one pod of an Indexed Job fails, the Job's
    controller deletes the others."""
    pending = None
    deleted = None
    for name in sorted(pods):
        pod = pods[name]
        phase = (pod.get("status") or {}).get("phase")
        if being_deleted(pod) and phase != "Succeeded":
            deleted = deleted or name
            continue
        ending = pod_ending(pod)
        if ending.category is not None:
            if ending.is_users_error:
                code = USERS_ERROR_EXIT
            elif ending.category == FailureCategory.PREEMPTION_OR_NODE_LOST:
                code = NODE_LOST_EXIT
            else:
                code = _exit_code(pod)
            return AttemptState(code, EngineEnding(ending.category, ending.evidence,
                                                   retryable=not ending.is_users_error,
                                                   taken=ending.taken), None)
        if phase == "Failed":
            return AttemptState(_exit_code(pod) or 1, None, None)
        pending = pending or ending.pending_why
    if deleted is not None:
        gone = "was deleted" if pods[deleted].get(DELETED) else "is being deleted"
        return AttemptState(NODE_LOST_EXIT, EngineEnding(
            FailureCategory.PREEMPTION_OR_NODE_LOST,
            f"pod {deleted} {gone} while it ran (an eviction, a drain or someone's delete)",
            taken=True), None)
    done = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Succeeded"]
    if len(done) >= nnodes:
        return AttemptState(0, None, None)
    return AttemptState(None, None, pending)


def being_deleted(pod: Mapping[str, Any]) -> bool:
    """Deleted, or on its way (a ``deletionTimestamp``: the eviction API, a drain, a delete with
    its grace period): its containers are being stopped, so its end is not its own."""
    return bool(pod.get(DELETED) or (pod.get("metadata") or {}).get("deletionTimestamp"))


def ended_in_error(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's container ended with an exit code other than 0."""
    return _exit_code(pod, default=0) != 0


def completion_index(pod: Mapping[str, Any]) -> str:
    """The pod's index in its Indexed Job (its node rank), "?" where it has none."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(COMPLETION_INDEX, "?"))


def _exit_code(pod: Mapping[str, Any], default: int = 1) -> int:
    """The first container's exit code that ended in error (``default`` where none says)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated") or {}
        code = ended.get("exitCode")
        if isinstance(code, int) and code != 0:
            return code
    return default


__all__ = ["AttemptState", "COMPLETION_INDEX", "USERS_ERROR_EXIT", "attempt_state",
           "being_deleted", "completion_index", "ended_in_error"]
