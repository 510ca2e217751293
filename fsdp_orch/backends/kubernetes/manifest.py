"""What the Kubernetes manifests say, derived once from the plan and the profile: the objects'
names and labels, and each part of the pod spec as plain data, which the templates
(``templates/k8s-*.yaml.j2``) only lay out, every value through ``yaml_value``. Pure: the one
fact read beyond the plan is the login name, where the run root does not say it.

Object names: the Job (or JobSet) and its headless Service are ``fsdp-orch-<job id>-a<attempt>``;
the job's own Secret, which holds the values its ``env:`` takes by reference (``{from_env:}``,
``{from_file:}``) and which the doing side makes at submit, is ``fsdp-orch-<job id>-env``; the
supervisor's own Job, where it runs in the cluster, ``fsdp-orch-<job id>-supervisor``."""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from fsdp_orch.backends.kubernetes import syntax
from fsdp_orch.backends.kubernetes.api import IN_CLUSTER_ENV
from fsdp_orch.backends.kubernetes.profile import (
    MANAGED_BY,
    OWN_PREFIX,
    SHM_PATH,
    SHM_VOLUME,
    KubernetesProfile,
)
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.places.builtin import SUPERVISOR_MODULE

MANAGER = "fsdp-orch"
JOB_ID_LABEL = f"{OWN_PREFIX}/job-id"
ATTEMPT_LABEL = f"{OWN_PREFIX}/attempt"
USER_LABEL = f"{OWN_PREFIX}/user"
ROLE_LABEL = f"{OWN_PREFIX}/role"  # "supervisor" on the supervisor's Job and pod
CONTAINER = "node"
SUPERVISOR_CONTAINER = "supervisor"
REPLICATED_JOB = "node"  # the JobSet's one replicated Job
# How long a pod's pid 1 waits, once node.sh has ended, for the node agent's last summary and log
# copy: under the 30 s a deleted pod is given before SIGKILL.
DRAIN_S = 20
GPU_RESOURCE = "nvidia.com/gpu"
SIMPLE_KEY_MAX = 1024


# An attempt's object name leaves room for its pods' hostnames: a JobSet's last pod of 100000 nodes
# is <name>-node-0-99999, and a hostname is a DNS label (63 characters).
NAME_MAX = syntax.LABEL_MAX - len(f"-{REPLICATED_JOB}-0-99999")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def id_part(job_id: str, room: int) -> str:
    """``job_id`` as part of a DNS label of at most ``room`` characters: itself where it is one
    (every id submit draws is), else lower-cased with '-' for what a label cannot hold, cut to
    fit, and 8 hex digits of its hash, which keep it apart from another id that reads the same
    (``render --job-id JOBID``)."""
    if len(job_id) <= room and _DNS_LABEL.fullmatch(job_id):
        return job_id
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    text = re.sub(r"[^a-z0-9]+", "-", job_id.lower()).strip("-")[:room - len(digest) - 1]
    return f"{text.rstrip('-')}-{digest}".lstrip("-")


def object_name(job_id: str, attempt: int) -> str:
    """The attempt's Job (or JobSet) and headless Service: ``fsdp-orch-<job id>-a<attempt>``."""
    tail = f"-a{attempt}"
    return f"fsdp-orch-{id_part(job_id, NAME_MAX - len('fsdp-orch-') - len(tail))}{tail}"


def env_secret_name(job_id: str) -> str:
    """The job's own Secret: the values its env takes by reference, one key per variable."""
    return f"fsdp-orch-{id_part(job_id, syntax.LABEL_MAX - len('fsdp-orch--env'))}-env"


def supervisor_job_name(job_id: str) -> str:
    """The Job whose pod runs the job's supervisor in the cluster (``supervisor.runs: cluster``)."""
    room = syntax.LABEL_MAX - len("fsdp-orch--supervisor")
    return f"fsdp-orch-{id_part(job_id, room)}-supervisor"


def job_label(job_id: str) -> str:
    """The job id as a label's value (itself, for every id submit draws)."""
    try:
        return syntax.label_value(job_id)
    except ValueError:
        return id_part(job_id, syntax.LABEL_MAX)


def pod_hostname(name: str, index: int, jobset: bool) -> str:
    """Pod ``index``'s hostname: an Indexed Job's pods are ``<job>-<index>``, a JobSet's
    ``<jobset>-<replicated job>-<job index>-<index>``."""
    return f"{name}-{REPLICATED_JOB}-0-{index}" if jobset else f"{name}-{index}"


@dataclass(frozen=True)
class ObjectNames:
    name: str  # the Job or JobSet, and the headless Service (the pods' subdomain)
    rank0_host: str  # pod 0's stable name: <its hostname>.<service>
    env_secret: str


def object_names(job_id: str, attempt: int, jobset: bool) -> ObjectNames:
    """The names of an attempt's objects, each one Kubernetes accepts whatever the job id."""
    name = object_name(job_id, attempt)
    return ObjectNames(name, f"{pod_hostname(name, 0, jobset)}.{name}", env_secret_name(job_id))


def submitting_user(plan: LaunchPlan) -> str:
    """The submitting user's login name: the last folder of the run root under ``shared_dir``
    (``<shared_dir>/<user>``), else this process's user."""
    shared = plan.profile.shared_dir
    if shared and posixpath.dirname(plan.run_root.rstrip("/")) == shared.rstrip("/"):
        return posixpath.basename(plan.run_root.rstrip("/"))
    from fsdp_orch.places.private import user_name

    return user_name()


def labels(plan: LaunchPlan, profile: KubernetesProfile) -> dict[str, str]:
    """Every object's labels: the profile's own, then fsdp-orch's (which select the attempt's
    objects and keep one user's jobs apart from another's)."""
    return {**profile.labels, MANAGED_BY: MANAGER, JOB_ID_LABEL: job_label(plan.job_id),
            ATTEMPT_LABEL: str(plan.attempt),
            USER_LABEL: syntax.as_label_value(submitting_user(plan))}


def job_labels(plan: LaunchPlan, profile: KubernetesProfile) -> dict[str, str]:
    """The labels of what belongs to the job, not to one attempt (its Secret, its supervisor)."""
    return {k: v for k, v in labels(plan, profile).items() if k != ATTEMPT_LABEL}


def env_secret_manifest(plan: LaunchPlan, profile: KubernetesProfile,
                        values: dict[str, str]) -> dict[str, Any]:
    """The job's own Secret: one key per variable its env takes by reference."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": env_secret_name(plan.job_id), "namespace": profile.namespace,
                         "labels": job_labels(plan, profile)},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())}}


def selector(plan: LaunchPlan) -> dict[str, str]:
    """The labels that pick the attempt's pods (the Service's selector)."""
    return {JOB_ID_LABEL: job_label(plan.job_id), ATTEMPT_LABEL: str(plan.attempt)}


def pod_env(plan: LaunchPlan, profile: KubernetesProfile,
            names: ObjectNames) -> list[dict[str, Any]]:
    """The container's environment: references only. The plain values are in node.sh (private to
    the user on the run volume; a manifest is readable by whoever may read Jobs)."""
    def ref(env: str, secret: str, key: str) -> dict[str, Any]:
        return {"name": env, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}

    return ([ref(name, names.env_secret, name) for name, _ in plan.secret_env]
            + [ref(e.env, e.secret, e.key) for e in profile.env_from_secrets])


def pod_resources(profile: KubernetesProfile) -> dict[str, Any]:
    """Requests equal to limits (the pod is Guaranteed, evicted last); {} when none is asked."""
    r = profile.resources
    amounts = {"cpu": r.cpu, "memory": r.memory, GPU_RESOURCE: str(r.gpus) if r.gpus else None}
    kept = {key: value for key, value in amounts.items() if value is not None}
    return {"requests": kept, "limits": kept} if kept else {}


def pod_volumes(profile: KubernetesProfile) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for v in profile.volumes:
        if v.persistent_volume_claim is not None:
            claim: dict[str, Any] = {"claimName": v.persistent_volume_claim}
            out.append({"name": v.name, "persistentVolumeClaim":
                        {**claim, "readOnly": True} if v.read_only else claim})
        else:  # Directory: a mistyped path fails to mount, never made empty by the kubelet
            out.append({"name": v.name, "hostPath": {"path": v.host_path, "type": "Directory"}})
    if profile.shm_size:
        out.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                                      "sizeLimit": profile.shm_size}})
    return out


def volume_mounts(profile: KubernetesProfile) -> list[dict[str, Any]]:
    mounts = [{"name": v.name, "mountPath": v.mount_path,
               **({"readOnly": True} if v.read_only else {})} for v in profile.volumes]
    return mounts + ([{"name": SHM_VOLUME, "mountPath": SHM_PATH}] if profile.shm_size else [])


def tolerations(profile: KubernetesProfile) -> list[dict[str, Any]]:
    spelled = {"key": "key", "operator": "operator", "value": "value", "effect": "effect",
               "toleration_seconds": "tolerationSeconds"}
    return [{spelled[k]: v for k, v in t.model_dump().items() if v is not None}
            for t in profile.tolerations]


def security_context(profile: KubernetesProfile) -> dict[str, int]:
    """The pod's user and group: the run folder's owner, whose node.sh checks that the checkpoint
    folder is its own."""
    return {key: value for key, value in (("runAsUser", profile.run_as_user),
                                          ("runAsGroup", profile.run_as_group))
            if value is not None}


@dataclass(frozen=True)
class Manifests:
    """What the templates lay out (``k8s`` in them)."""

    names: ObjectNames
    namespace: str
    jobset: bool
    labels: dict[str, str]
    selector: dict[str, str]
    command: list[str]
    env: list[dict[str, Any]]
    resources: dict[str, Any]
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    tolerations: list[dict[str, Any]]
    security: dict[str, int]
    replicated_job: str = REPLICATED_JOB
    container: str = CONTAINER
    drain_s: int = DRAIN_S


def manifests(plan: LaunchPlan, profile: KubernetesProfile, node_script: str) -> Manifests:
    names = object_names(plan.job_id, plan.attempt, profile.use_jobset)
    return Manifests(names=names, namespace=profile.namespace, jobset=profile.use_jobset,
                     labels=labels(plan, profile), selector=selector(plan),
                     command=["bash", node_script], env=pod_env(plan, profile, names),
                     resources=pod_resources(profile), volumes=pod_volumes(profile),
                     mounts=volume_mounts(profile), tolerations=tolerations(profile),
                     security=security_context(profile))


@dataclass(frozen=True)
class SupervisorManifest:
    """What ``k8s-supervisor.yaml.j2`` lays out (``sup`` in it): the Job of one pod that runs the
    job's supervisor in the cluster, restarted by Kubernetes (``restartPolicy: OnFailure``, a new
    pod on another node if its node goes), each time re-attaching to the attempt that runs. Its
    output goes to the run folder's ``supervisor.log``, as a supervisor's beside the CLI does."""

    name: str
    namespace: str
    labels: dict[str, str]
    command: list[str]
    env: list[dict[str, Any]]
    resources: dict[str, Any]
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    security: dict[str, int]
    service_account: str | None
    backoff_limit: int
    container: str = SUPERVISOR_CONTAINER


def supervisor_manifest(plan: LaunchPlan, profile: KubernetesProfile) -> SupervisorManifest:
    sup = profile.supervisor
    log = posixpath.join(plan.run_dir, "supervisor.log")
    argv = [plan.python, "-m", SUPERVISOR_MODULE, plan.job_id, "--run-dir", plan.run_dir,
            "--in-cluster"]
    env = [{"name": IN_CLUSTER_ENV, "value": "1"},
           {"name": "FSDP_ORCH_HOME", "value": posixpath.join(plan.run_dir, "supervisor-home")}]
    if sup.api_server:
        host, _, port = sup.api_server.removeprefix("https://").rpartition(":")
        env += [{"name": "KUBERNETES_SERVICE_HOST", "value": host.strip("[]")},
                {"name": "KUBERNETES_SERVICE_PORT", "value": port}]
    return SupervisorManifest(
        name=supervisor_job_name(plan.job_id), namespace=profile.namespace,
        labels={**job_labels(plan, profile), ROLE_LABEL: "supervisor"},
        # bash only to send its output to the run folder, private, as a supervisor's here goes
        command=["bash", "-c", 'umask 077; exec "$@" >>"$0" 2>&1', log, *argv], env=env,
        resources={"requests": {"cpu": sup.cpu, "memory": sup.memory},
                   "limits": {"memory": sup.memory}},
        volumes=pod_volumes(profile), mounts=volume_mounts(profile),
        security=security_context(profile), service_account=sup.service_account,
        backoff_limit=sup.restarts)


def yaml_value(value: Any) -> str:
    """``value`` as YAML in flow style: text always double-quoted, with every character beyond
    printable ASCII escaped (so no value can end a line, start a key or change the document),
    numbers and booleans as JSON writes them, lists and mappings in brackets and braces."""
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(str(k))}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise TypeError(f"no YAML for {type(value).__name__}")


def _key(text: str) -> str:
    """A mapping's key: YAML reads a plain one of at most 1024 characters, a longer one only
    after '? '."""
    quoted = _quoted(text)
    return quoted if len(quoted) <= SIMPLE_KEY_MAX else f"? {quoted}"


def _quoted(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        else:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


__all__ = ["ATTEMPT_LABEL", "CONTAINER", "GPU_RESOURCE", "JOB_ID_LABEL",
           "MANAGER", "Manifests", "NAME_MAX", "ObjectNames", "REPLICATED_JOB", "ROLE_LABEL",
           "SupervisorManifest", "USER_LABEL", "env_secret_manifest", "env_secret_name", "id_part",
           "job_label", "job_labels", "labels", "manifests", "object_name", "object_names",
           "pod_hostname", "selector", "submitting_user", "supervisor_job_name",
           "supervisor_manifest", "yaml_value"]
