"""What a pod's status means to the supervisor, as a pure function of the pod as the API returns
it (JSON, as a plain dict: ``metadata.name``, ``spec.nodeName``, ``status.phase``,
``status.reason``/``message``, ``status.conditions``, ``status.containerStatuses``).

- Taken away by the cluster, never the job's fault (``preemption_or_node_lost``, ``taken``: a new
  attempt with no restart budget used, as after a scheduler's requeue): a ``DisruptionTarget``
  condition (the scheduler's preemption, the eviction API of a drain, the taint manager, the pod
  GC, the kubelet), an eviction for node pressure (``Evicted``), the kubelet's own preemption
  (``Preempting``), a node shutting down. A pod being deleted (the eviction API before 1.26, a
  drain, someone's delete) is ``attempt_state``'s to judge: the Job's controller deletes the other
  pods of an attempt in which one failed.
- A node lost (``NodeLost``, or a pod whose phase is ``Unknown``), a node that refused the pod at
  admission (``OutOfcpu``, ``UnexpectedAdmissionError``...): ``preemption_or_node_lost`` under
  the restart budget, as a lost host is on every kind (the node may be bad).
- The container killed for its memory limit (``OOMKilled``): ``killed_sigkill``, the category of
  the kernel's OOM killer (host memory, not the GPU's: not ``cuda_oom``); its hint names it.
- What the user must fix, at once and not retried (``node_setup_error``, as a node's own launch
  script says of a python or folder missing there): an image that cannot be pulled or does not
  exist (``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``, ``ErrImageNeverPull``),
  a container config naming a Secret or ConfigMap (or a key of one) that is not there
  (``CreateContainerConfigError``, the object named), a command the image cannot start
  (``StartError``, ``ContainerCannotRun``), a PersistentVolumeClaim that does not exist.
- Not a failure yet, but worth saying why (``pending_why``): unschedulable (the scheduler's own
  message), a registry that does not answer, a container being created. The caller gives up
  after the profile's ``unschedulable_timeout``.
- Anything else that ended (exit N) is left to the logs and exit codes, as on every kind."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fsdp_orch.vocab.categories import FailureCategory

LOST = FailureCategory.PREEMPTION_OR_NODE_LOST
SETUP = FailureCategory.NODE_SETUP_ERROR
EVIDENCE_MAX = 500

# status.reason of a pod the cluster ended (kubelet: eviction, its own preemption, node shutdown;
# the node controller: NodeLost)
_TAKEN = {"Evicted": "evicted", "Preempting": "preempted by the kubelet",
          "Terminated": "ended by the node's shutdown", "Shutdown": "ended by the node's shutdown",
          "NodeShutdown": "refused by a node shutting down", "NodeLost": "its node was lost"}
# status.reason of a pod its node refused at admission, after the scheduler had placed it there
_REFUSED = re.compile(r"OutOf.+|UnexpectedAdmissionError|NodeAffinity|InvalidNodeInfo|"
                      r"UnknownReason|UnexpectedPredicateFailureType|PodOSNotSupported|"
                      r"PodOSSelectorNodeLabelDoesNotMatch")
_IMAGE = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
          "ImageInspectError")
_CANNOT_START = ("StartError", "ContainerCannotRun")
# waiting reasons the kubelet retries by itself, which may clear
_RETRIED = ("RegistryUnavailable", "CreateContainerError", "RunContainerError",
            "CreatePodSandboxError", "ContainerCreating", "PodInitializing")
_MISSING = re.compile(r'\b(secret|configmap)s? "([^"]+)" not found', re.IGNORECASE)
_MISSING_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) (\S+)")
_NO_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
_SPELLED = {"secret": "Secret", "configmap": "ConfigMap"}


@dataclass(frozen=True)
class PodEnding:
    """``category``: the failure, or None (running, succeeded, pending, or an exit the logs
    classify); ``evidence``: one line naming the pod; ``is_users_error``: fail the job now, do not
    retry or wait; ``pending_why``: not running yet, and why, for ``status``."""

    category: FailureCategory | None
    evidence: str
    is_users_error: bool = False
    pending_why: str | None = None
    taken: bool = False  # the cluster took the pod (EngineEnding.taken): no restart budget used


def pod_ending(pod: Mapping[str, Any]) -> PodEnding:
    """What ``pod`` (one object of a list or watch of pods, as JSON) says, in the order that
    decides: the cluster's taking it first (a preempted pod's container also ends in an error),
    then its container, then its scheduling."""
    status = pod.get("status") or {}
    where = _where(pod)
    for decide in (_disrupted, _taken, _container, _scheduling):
        found = decide(status, where)
        if found is not None:
            return _bounded(found)
    phase = status.get("phase") or "Pending"
    if phase == "Pending":
        return PodEnding(None, f"{where}: Pending", pending_why=f"{where}: waiting to be scheduled")
    return _bounded(PodEnding(None, f"{where}: {phase}"
                              + _said(status.get("reason"), status.get("message"))))


def _bounded(ending: PodEnding) -> PodEnding:
    """Its lines cut to ``EVIDENCE_MAX`` characters (a message can be long: an image's name, a
    registry's answer)."""
    why = ending.pending_why
    return replace(ending, evidence=ending.evidence[:EVIDENCE_MAX],
                   pending_why=why[:EVIDENCE_MAX] if why is not None else None)


def _where(pod: Mapping[str, Any]) -> str:
    name = (pod.get("metadata") or {}).get("name") or "?"
    node = (pod.get("spec") or {}).get("nodeName")
    return f"pod {name}" + (f" on {node}" if node else "")


def _said(reason: Any, message: Any) -> str:
    """``: reason: message`` in one line, for an evidence line; "" when neither is given."""
    parts = [" ".join(str(p).split()) for p in (reason, message) if p]
    return ": " + ": ".join(parts) if parts else ""


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def _disrupted(status: Mapping[str, Any], where: str) -> PodEnding | None:
    """A DisruptionTarget condition (Kubernetes 1.26 on): the pod is being taken away."""
    found = _condition(status, "DisruptionTarget")
    if found is None or found.get("status") != "True":
        return None
    return PodEnding(LOST, f"{where}: taken by the cluster"
                     + _said(found.get("reason") or "DisruptionTarget", found.get("message")),
                     taken=True)


def _taken(status: Mapping[str, Any], where: str) -> PodEnding | None:
    reason = status.get("reason") or ""
    if reason in _TAKEN:
        return PodEnding(LOST, f"{where}: {_TAKEN[reason]}" + _said(reason, status.get("message")),
                         taken=reason != "NodeLost")
    if status.get("phase") == "Failed" and _REFUSED.fullmatch(reason):
        return PodEnding(LOST, f"{where}: refused by its node at admission"
                         + _said(reason, status.get("message")))
    if status.get("phase") == "Unknown":
        return PodEnding(LOST, f"{where}: its node stopped reporting (phase Unknown)"
                         + _said(reason, status.get("message")))
    return None


def _container(status: Mapping[str, Any], where: str) -> PodEnding | None:
    """The first container whose state says something: terminated, then waiting."""
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        name = container.get("name") or "?"
        if state.get("terminated"):
            return _terminated(state["terminated"], f"{where}: container {name}")
        if state.get("waiting"):
            found = _waiting(state["waiting"], f"{where}: container {name}",
                             container.get("image"))
            if found is not None:
                return found
    return None


def _terminated(ended: Mapping[str, Any], where: str) -> PodEnding:
    reason, code = ended.get("reason") or "", ended.get("exitCode")
    exit_text = f" (exit {code})" if code is not None else ""
    if reason == "OOMKilled":
        return PodEnding(FailureCategory.KILLED_SIGKILL,
                         f"{where} OOMKilled{exit_text}: it went over its memory limit "
                         "(resources.memory)" + _said(None, ended.get("message")))
    if reason in _CANNOT_START:
        return PodEnding(SETUP, f"{where} could not start: the image cannot run node.sh's "
                         f"command (bash){exit_text}" + _said(reason, ended.get("message")),
                         is_users_error=True)
    return PodEnding(None, f"{where} ended{exit_text}" + _said(reason, ended.get("message")))


def _waiting(waiting: Mapping[str, Any], where: str, image: Any) -> PodEnding | None:
    reason, message = waiting.get("reason") or "", waiting.get("message")
    if reason in _IMAGE:
        shown = f" {image}" if image else ""
        return PodEnding(SETUP, f"{where}: the image{shown} cannot be pulled or does not exist "
                         "(the profile's image, image_pull_policy, image_pull_secrets)"
                         + _said(reason, message), is_users_error=True)
    if reason == "CreateContainerConfigError":
        return PodEnding(SETUP, f"{where}: {_config_missing(str(message or ''))}"
                         + _said(reason, message), is_users_error=True)
    if reason in _RETRIED:
        return PodEnding(None, f"{where}: {reason}",
                         pending_why=f"{where}" + _said(reason, message))
    return None


def _config_missing(message: str) -> str:
    """What a container's config names that is not there, from the kubelet's message."""
    key = _MISSING_KEY.search(message)
    if key is not None:
        return f"{key[2]} {key[3]} has no key {key[1]}"
    found = _MISSING.search(message)
    if found is not None:
        return f"{_SPELLED[found[1].lower()]} {found[2]} does not exist in the pod's namespace"
    return "its configuration cannot be made"


def _scheduling(status: Mapping[str, Any], where: str) -> PodEnding | None:
    found = _condition(status, "PodScheduled")
    if found is None or found.get("status") != "False":
        return None
    reason, message = found.get("reason") or "Unschedulable", found.get("message") or ""
    claim = _NO_CLAIM.search(message)
    if claim is not None:
        return PodEnding(SETUP, f"{where}: PersistentVolumeClaim {claim[1]} does not exist in the "
                         "pod's namespace (the profile's volumes)" + _said(reason, message),
                         is_users_error=True)
    return PodEnding(None, f"{where}: {reason}", pending_why=f"{where}" + _said(reason, message))


__all__ = ["PodEnding", "pod_ending"]
