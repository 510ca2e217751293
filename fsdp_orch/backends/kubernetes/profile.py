"""The Kubernetes kind's profile (``kind: kubernetes``): where the API server is, what each pod
runs (image, resources, volumes) and where it may run (node selector, tolerations, affinity).
Every name is checked as Kubernetes would (``syntax``), so a bad one fails here, with the file and
field, not at the API server. Secrets are referenced, never written: a Kubernetes Secret by name
and key (``env_from_secrets``), or the job's ``{from_env:}``/``{from_file:}`` values, which the
manifests read from the job's own Secret (``manifest.env_secret_name``)."""

from __future__ import annotations

import posixpath
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fsdp_orch.backends.kubernetes import syntax
from fsdp_orch.jobspec.limits import MAX_PROCS_PER_NODE, MAX_SECONDS_SETTING, at_most
from fsdp_orch.jobspec.profiles import ProfileBase, host_address, no_control
from fsdp_orch.jobspec.validation import StrictModel, env_name_problem

# The labels fsdp-orch puts on every object it makes (manifest.labels): a profile's own labels may
# not take them, nor the prefixes Kubernetes keeps for itself (app.kubernetes.io/ is the users').
MANAGED_BY = "app.kubernetes.io/managed-by"
OWN_PREFIX = "fsdp-orch"
_KUBERNETES_PREFIXES = ("kubernetes.io", "k8s.io")
_AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
MIN_MEMORY = Decimal(2**20)  # below 1Mi, "64m" (milli) was meant as 64Mi
MAX_UID = 2**31 - 1
SHM_VOLUME = "fsdp-orch-shm"  # the memory-backed /dev/shm of ``shm_size``
SHM_PATH = "/dev/shm"


def _path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"expected an absolute path; got {value!r}")
    return posixpath.normpath(no_control(value, "a path"))


def _some_path(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a file's path; got an empty one")
    return no_control(value, "a path")


def _some_text(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a name; got an empty one")
    return no_control(value, "a name")


def _cpu(value: str) -> str:
    if syntax.quantity(value) <= 0:
        raise ValueError(f"expected a CPU quantity above 0 like 8 or 500m; got {value!r}")
    return value.strip()


def _memory(value: str) -> str:
    amount = syntax.quantity(value)
    if amount < MIN_MEMORY:
        raise ValueError(f"expected a memory quantity of at least 1Mi like 64Gi (m is milli: "
                         f"{value!r} is {amount} bytes); got {value!r}")
    return value.strip()


Label = Annotated[str, AfterValidator(syntax.dns_label)]
Subdomain = Annotated[str, AfterValidator(syntax.dns_subdomain)]
AbsPath = Annotated[str, AfterValidator(_path)]
SomePath = Annotated[str, AfterValidator(_some_path)]
SomeText = Annotated[str, AfterValidator(_some_text)]
LabelValue = Annotated[str, AfterValidator(syntax.label_value)]
Cpu = Annotated[str,
                BeforeValidator(syntax.quantity_text, json_schema_input_type=str | int | float),
                AfterValidator(_cpu)]
Memory = Annotated[str, BeforeValidator(syntax.quantity_text, json_schema_input_type=str | int),
                   AfterValidator(_memory)]
Seconds = Annotated[int, at_most(MAX_SECONDS_SETTING)]


class KubernetesResources(StrictModel):
    """What each pod asks for, as requests equal to limits (Guaranteed: evicted last)."""

    cpu: Cpu | None = None
    memory: Memory | None = None
    gpus: Annotated[int, at_most(MAX_PROCS_PER_NODE)] = Field(default=0, ge=0)


class KubernetesVolume(StrictModel):
    """A volume mounted in every pod at ``mount_path``: a PersistentVolumeClaim or a host path."""

    name: Label
    mount_path: AbsPath
    persistent_volume_claim: Subdomain | None = None
    host_path: AbsPath | None = None
    read_only: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> KubernetesVolume:
        if (self.persistent_volume_claim is None) == (self.host_path is None):
            raise ValueError("expected exactly one of persistent_volume_claim: <claim name> or "
                             f"host_path: <folder> for volume {self.name!r}")
        return self


class KubernetesToleration(StrictModel):
    """A taint the pods tolerate (``tolerations`` of the pod spec, in snake case)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: Seconds | None = Field(default=None, ge=0)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return None if value is None else syntax.label_key(value)

    @model_validator(mode="after")
    def _consistent(self) -> KubernetesToleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("expected no value with operator: Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("expected operator: Exists for a toleration without a key "
                             "(it tolerates every taint)")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("expected effect: NoExecute with toleration_seconds")
        return self


class KubernetesSecretEnv(StrictModel):
    """An environment variable every pod reads from a Kubernetes Secret (``secretKeyRef``)."""

    env: str
    secret: Subdomain
    key: Annotated[str, AfterValidator(syntax.secret_key)]

    @field_validator("env")
    @classmethod
    def _env(cls, value: str) -> str:
        problem = env_name_problem(value)
        if problem:
            raise ValueError(problem)
        if value.startswith("FSDP_ORCH_"):
            raise ValueError(f"expected a variable that is not fsdp-orch's own; got {value}")
        return value


def _api_server(value: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(no_control(value.strip(), "a URL"))
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "https" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ValueError(f"expected the API server as https://HOST:PORT; got {value!r}")
    return f"https://{parts.netloc}"


class KubernetesSupervisor(StrictModel):
    """Where the job's supervisor runs: ``here``, beside the CLI on the submitting machine (the
    default), or ``cluster``: a pod of its own, made by a Job of its own that Kubernetes restarts
    (the new pod re-attaches to the attempt that runs), for a job that must outlive the
    submitting machine."""

    runs: Literal["here", "cluster"] = "here"
    # The pod's account (``cluster``): bound to the Role of docs/kubernetes.md, whose token the
    # supervisor reaches the API server with.
    service_account: Subdomain | None = None
    cpu: Cpu = "100m"  # requested, not a limit: the supervisor is idle but at a failure
    memory: Memory = "1Gi"  # requested and its limit
    restarts: Annotated[int, at_most(1000)] = Field(default=20, ge=0)  # the Job's backoffLimit
    # https://HOST:PORT where the pod reaches the API server, for a cluster whose `kubernetes`
    # Service the pods cannot (no kube-proxy); None: the Service, as every pod does.
    api_server: Annotated[str, AfterValidator(_api_server)] | None = None

    @model_validator(mode="after")
    def _account(self) -> KubernetesSupervisor:
        if self.runs == "cluster" and self.service_account is None:
            raise ValueError("expected supervisor.service_account with runs: cluster: the "
                             "supervisor's pod reaches the API server with that account's token "
                             "(bind it to the Role of docs/kubernetes.md)")
        return self


def _check_labels(value: dict[str, str], what: str) -> dict[str, str]:
    for key, text in value.items():
        syntax.label_key(key)
        try:
            syntax.label_value(text)
        except ValueError as exc:
            raise ValueError(f"{what} {key!r}: {exc}") from None
    return value


def reserved_label(key: str) -> bool:
    """A label key fsdp-orch or Kubernetes itself sets (a profile's ``labels`` may not)."""
    prefix = key.rpartition("/")[0]
    return (key == MANAGED_BY or prefix == OWN_PREFIX or prefix in _KUBERNETES_PREFIXES
            or (prefix.endswith(tuple("." + p for p in _KUBERNETES_PREFIXES))
                and prefix != "app.kubernetes.io"))


def _check_mapping(node: Any, where: str) -> None:
    """A mapping passed through to the manifest holds only what JSON can say, without control
    characters (it is written into the YAML as it is)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: expected text keys; got {key!r}")
            _check_mapping(value, f"{where}.{key}")
    elif isinstance(node, list):
        for n, value in enumerate(node):
            _check_mapping(value, f"{where}.{n}")
    elif isinstance(node, str):
        no_control(node, f"{where} as text")
    elif node is not None and not isinstance(node, (bool, int, float)):
        raise ValueError(f"{where}: expected text, a number, a list or a mapping; got {node!r}")


class KubernetesProfile(ProfileBase):
    kind: Literal["kubernetes"]
    # The API server: a kubeconfig file (None: $KUBECONFIG, else ~/.kube/config) and its context
    # (None: its current-context).
    kubeconfig: SomePath | None = None
    context: SomeText | None = None
    namespace: Label = "default"
    # What each pod runs: the image holds the profile's python with fsdp-orch[runtime].
    image: Annotated[str, AfterValidator(syntax.image_reference)]
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    image_pull_secrets: list[Subdomain] = Field(default_factory=list)
    resources: KubernetesResources = Field(default_factory=KubernetesResources)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[KubernetesToleration] = Field(default_factory=list)
    affinity: dict[str, Any] = Field(default_factory=dict)
    volumes: list[KubernetesVolume] = Field(default_factory=list)
    # A memory-backed /dev/shm of this size (a container's own is 64Mi: NCCL between the GPUs of a
    # pod and the DataLoader's workers need more); it counts against resources.memory.
    shm_size: Memory | None = None
    # The volume that holds the run folders: shared_dir (required) is in it, at the same path in
    # the pods as on the machine the supervisor runs on (each attempt's node.sh is read from it).
    run_volume: Label
    # Where the job's relative paths start in the pods (the code in the image); None: the job
    # file's folder, which one of the volumes must then hold at the same path.
    workdir: AbsPath | None = None
    service_account: Subdomain | None = None
    priority_class: Subdomain | None = None
    host_network: bool = False
    run_as_user: Annotated[int, at_most(MAX_UID)] | None = Field(default=None, ge=0)
    run_as_group: Annotated[int, at_most(MAX_UID)] | None = Field(default=None, ge=0)
    env_from_secrets: list[KubernetesSecretEnv] = Field(default_factory=list)
    procs_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] | None = Field(default=None, gt=0)
    device: Literal["cpu", "cuda"] | None = None  # None: cuda when resources.gpus, else cpu
    # Node 0's address for the rendezvous; None: its stable name through the headless Service.
    rdzv_host: str | None = None
    # What the pods' node agents connect to; None: the address of the supervisor's machine.
    supervisor_address: str | None = None
    use_jobset: bool = False
    supervisor: KubernetesSupervisor = Field(default_factory=KubernetesSupervisor)
    unschedulable_timeout: Seconds = Field(default=300, gt=0)
    labels: dict[str, str] = Field(default_factory=dict)
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "accelerate", "python")

    @field_validator("shared_dir")
    @classmethod
    def _shared_dir_needed(cls, value: str | None) -> str | None:
        if value is None:
            raise ValueError("expected the folder on run_volume that holds the run folders, as "
                             "the supervisor's machine and the pods both see it (the pods read "
                             "each attempt's node.sh there); got none")
        return value

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_labels(value, "node selector")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in _check_labels(value, "label"):
            if reserved_label(key):
                raise ValueError(f"label {key!r} is reserved (fsdp-orch sets {MANAGED_BY} and "
                                 f"{OWN_PREFIX}/*; Kubernetes keeps kubernetes.io/ and k8s.io/); "
                                 "expected another key")
        return value

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, part in value.items():
            if key not in _AFFINITY_KEYS or not isinstance(part, dict):
                got = f"key {key!r}" if key not in _AFFINITY_KEYS else f"{key}: {part!r}"[:80]
                raise ValueError("expected a pod affinity: a mapping of "
                                 f"{', '.join(_AFFINITY_KEYS)} to mappings, as Kubernetes spells "
                                 f"them; got {got}")
            _check_mapping(part, key)
        return value

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, value: list[KubernetesVolume]) -> list[KubernetesVolume]:
        for attr in ("name", "mount_path"):
            seen = [getattr(v, attr) for v in value]
            twice = sorted({x for x in seen if seen.count(x) > 1})
            if twice:
                raise ValueError(f"expected each volume's {attr} once; got {twice[0]!r} twice")
        for v in value:
            if v.name == SHM_VOLUME or v.mount_path == SHM_PATH:
                raise ValueError(f"expected another name and mount_path than {SHM_VOLUME} and "
                                 f"{SHM_PATH} (shm_size mounts those); got volume {v.name!r}")
        return value

    @field_validator("run_volume")
    @classmethod
    def _run_volume(cls, value: str, info: ValidationInfo) -> str:
        if "volumes" not in info.data:
            return value  # the volumes were refused: that error says it
        volumes: list[KubernetesVolume] = info.data["volumes"]
        found = next((v for v in volumes if v.name == value), None)
        names = ", ".join(v.name for v in volumes) or "none"
        if found is None:
            raise ValueError(f"expected the name of one of volumes (the one that holds the run "
                             f"folders; volumes: {names}); got {value!r}")
        if found.read_only:
            raise ValueError(f"expected a writable volume for the run folders; got {value!r}, "
                             "which is read_only")
        shared = info.data.get("shared_dir")
        if shared and not within(shared, found.mount_path):
            raise ValueError(f"expected shared_dir on volume {value!r}, under its mount_path "
                             f"{found.mount_path}; got shared_dir {shared}")
        return value

    @field_validator("env_from_secrets")
    @classmethod
    def _secret_env(cls, value: list[KubernetesSecretEnv],
                    info: ValidationInfo) -> list[KubernetesSecretEnv]:
        names = [entry.env for entry in value]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"expected each variable once; got {name} twice")
            if name in (info.data.get("env") or {}):
                raise ValueError(f"expected each variable in env or env_from_secrets; got {name} "
                                 "in both")
        return value

    @field_validator("rdzv_host", "supervisor_address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return None if value is None else host_address(value)

    @property
    def supervisor_in_cluster(self) -> bool:
        return self.supervisor.runs == "cluster"

    def default_procs_per_node(self) -> int:
        return self.procs_per_node or self.resources.gpus or 1

    def device_name(self) -> str:
        return self.device or ("cuda" if self.resources.gpus else "cpu")

    def volume_of(self, path: str) -> KubernetesVolume | None:
        """The volume whose mount holds ``path`` (the innermost), or None."""
        holding = [v for v in self.volumes if within(path, v.mount_path)]
        return max(holding, key=lambda v: len(v.mount_path), default=None)


def within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or inside it (both absolute, normalised here)."""
    path, folder = posixpath.normpath(path), posixpath.normpath(folder)
    return folder == "/" or path == folder or path.startswith(folder + "/")


__all__ = ["KubernetesProfile", "KubernetesResources", "KubernetesSecretEnv",
           "KubernetesSupervisor", "KubernetesToleration", "KubernetesVolume", "MANAGED_BY",
           "OWN_PREFIX", "SHM_PATH", "SHM_VOLUME", "reserved_label", "within"]
