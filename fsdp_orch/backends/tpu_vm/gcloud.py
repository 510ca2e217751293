"""Cloud TPU VMs through the gcloud CLI, pure: the argv of every command fsdp-orch runs (``render``
shows the same ones), what ``describe --format=json`` says,
and what to do about a TPU VM's state."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Literal

TPU_VM = ("gcloud", "compute", "tpus", "tpu-vm")
NOT_FOUND = "NOT_FOUND"  # our state for a TPU VM that does not exist (gcloud's error code says so)

# The API's states (google.cloud.tpu.v2 Node.State) by what an attempt can do about them.
USABLE = frozenset({"READY"})
ON_ITS_WAY = frozenset({"CREATING", "STARTING", "RESTARTING", "REPAIRING", "UNHIDING"})
GONE = frozenset({"PREEMPTED", "TERMINATED"})  # only a delete and a create bring it back
GOING = frozenset({"DELETING"})
STOPPED_BY_SOMEONE = frozenset({"STOPPED", "STOPPING", "SUSPENDED", "SUSPENDING", "HIDING",
                                "HIDDEN"})


def _where(profile: Any) -> list[str]:
    return [f"--zone={profile.zone}",
            *([f"--project={profile.project}"] if profile.project else [])]


def describe_argv(profile: Any) -> list[str]:
    return [*TPU_VM, "describe", profile.tpu_name, *_where(profile), "--format=json"]


def create_argv(profile: Any) -> list[str]:
    return [*TPU_VM, "create", profile.tpu_name, *_where(profile),
            f"--accelerator-type={profile.accelerator_type}",
            f"--version={profile.runtime_version}", *(["--spot"] if profile.spot else [])]


def delete_argv(profile: Any) -> list[str]:
    return [*TPU_VM, "delete", profile.tpu_name, *_where(profile), "--quiet"]


def prepare_command(profile: Any) -> str:
    """What runs once on every worker of a TPU VM fsdp-orch has not used yet (a new one after a
    preemption): the job's folder made, then the profile's ``prepare`` lines, stopping at the first
    that fails."""
    return "; ".join(["set -e", f"mkdir -p -- {shlex.quote(profile.remote_workdir)}",
                      *profile.prepare])


def prepare_argv(profile: Any) -> list[str]:
    """``ssh --worker=all``: also what makes gcloud put the user's key on the workers (the SSH
    connections fsdp-orch opens next use that key)."""
    return [*TPU_VM, "ssh", profile.tpu_name, *_where(profile), "--worker=all",
            f"--command={prepare_command(profile)}"]


@dataclass(frozen=True)
class TpuVmState:
    """What ``describe`` says of a TPU VM (``NOT_FOUND``: there is none)."""

    name: str
    state: str
    health: str | None = None
    health_description: str | None = None
    vm_id: str | None = None
    accelerator_type: str | None = None
    internal_addresses: tuple[str, ...] = ()  # networkEndpoints[].ipAddress, by worker
    external_addresses: tuple[str | None, ...] = ()  # networkEndpoints[].accessConfig.externalIp
    spot: bool = False  # schedulingConfig.spot or .preemptible

    def addresses(self, which: Literal["internal", "external"]) -> tuple[str, ...]:
        if which == "internal":
            return self.internal_addresses
        return tuple(a or "" for a in self.external_addresses)

    def summary(self) -> str:
        """One line: ``TPU VM NAME is PREEMPTED (health UNHEALTHY_MAINTENANCE: ...)``."""
        if self.state == NOT_FOUND:
            return f"TPU VM {self.name} does not exist"
        health = (f" (health {self.health}"
                  f"{': ' + self.health_description if self.health_description else ''})"
                  if self.health and self.health != "HEALTHY" else "")
        return f"TPU VM {self.name} is {self.state}{health}"


def parse_describe(name: str, text: str) -> TpuVmState:
    """``gcloud ... describe --format=json``'s output; ValueError when it is not that."""
    try:
        node = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"gcloud describe printed no JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(node, dict) or "state" not in node:
        raise ValueError(f"gcloud describe printed no TPU VM (no 'state'): {text[:200]!r}")
    endpoints = [e for e in node.get("networkEndpoints") or [] if isinstance(e, dict)]
    scheduling = node.get("schedulingConfig") or {}
    return TpuVmState(
        name=name, state=str(node["state"]), health=node.get("health"),
        health_description=node.get("healthDescription"),
        vm_id=str(node["id"]) if node.get("id") else None,
        accelerator_type=node.get("acceleratorType"),
        internal_addresses=tuple(str(e.get("ipAddress", "")) for e in endpoints),
        external_addresses=tuple((e.get("accessConfig") or {}).get("externalIp")
                                 for e in endpoints),
        spot=bool(scheduling.get("spot") or scheduling.get("preemptible")))


def is_not_found(stderr: str) -> bool:
    """gcloud's error for a TPU VM that does not exist
    (``NOT_FOUND: Resource ... was not found``)."""
    return "NOT_FOUND" in stderr or "was not found" in stderr


Action = Literal["use", "wait", "delete", "create", "fail"]


def next_action(vm: TpuVmState, owns_vm: bool) -> tuple[Action, str]:
    """What to do to have a READY TPU VM, and why. With ``owns_vm`` fsdp-orch creates a missing one
    and deletes a preempted one first (a PREEMPTED TPU VM must be deleted before one of the same
    name can be created); without, it waits for whoever owns it, or fails."""
    if vm.state in USABLE:
        return "use", vm.summary()
    if vm.state in ON_ITS_WAY or vm.state in GOING:
        return "wait", f"{vm.summary()}: waiting"
    if vm.state in GONE:
        if owns_vm:
            return "delete", f"{vm.summary()}: deleting it, to create it again"
        return "wait", (f"{vm.summary()}: waiting for it to come back (owns_vm is false, "
                        "so fsdp-orch does not delete and create it)")
    if vm.state == NOT_FOUND:
        if owns_vm:
            return "create", f"{vm.summary()}: creating it"
        return "fail", (f"{vm.summary()}; create it, or set owns_vm: true in the profile to let "
                        "fsdp-orch create it")
    if vm.state in STOPPED_BY_SOMEONE:
        return "fail", (f"{vm.summary()}: someone stopped it; start it again "
                        "(gcloud compute tpus tpu-vm start)")
    return "wait", f"{vm.summary()} (a state fsdp-orch does not know): waiting"
