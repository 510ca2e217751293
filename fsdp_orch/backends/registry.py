"""The cluster kinds by name: the one place that lists them. Each kind's module is imported only
when a job or profile of that kind is met (``status`` stays fast)."""

from __future__ import annotations

import importlib
from pathlib import Path

from fsdp_orch.backends.base import ClusterKind
from fsdp_orch.jobspec.profiles import ProfileBase, ProfileRef, find_profile
from fsdp_orch.jobspec.validation import validate_doc
from fsdp_orch.jobspec.yamlio import load_file
from fsdp_orch.vocab.errors import InputError

# kind name -> the module whose ``KIND`` implements it
KIND_MODULES = {
    "local": "fsdp_orch.backends.local",
    "slurm": "fsdp_orch.backends.slurm.kind",
    "ssh": "fsdp_orch.backends.ssh",
    "tpu-vm": "fsdp_orch.backends.tpu_vm.kind",
}
KINDS = tuple(KIND_MODULES)


def cluster_kind(name: str) -> ClusterKind:
    module = KIND_MODULES.get(name)
    if module is None:
        raise InputError(f"unknown cluster kind {name!r}; expected one of {', '.join(KINDS)}", field="kind")
    kind: ClusterKind = importlib.import_module(module).KIND
    return kind


def profile_models() -> dict[str, type[ProfileBase]]:
    return {name: cluster_kind(name).profile_model for name in KINDS}


def parse_profile(path: Path) -> ProfileBase:
    """A profile file, validated with the model of the kind it names."""
    doc = load_file(path, "cluster profile")
    name = doc.data.get("kind")
    if not isinstance(name, str) or name not in KIND_MODULES:
        raise InputError(f"expected one of {', '.join(KINDS)}; got {name!r}", file=doc.file,
                         field="kind", line=doc.line_of(("kind",)))
    return validate_doc(cluster_kind(name).profile_model, doc, doc.data_with_text(("env",)))


def load_profile(name_or_path: str, cwd: Path | None = None) -> tuple[ProfileBase, ProfileRef]:
    """A profile by name (project, then home, then built-in) or by path to a YAML file."""
    ref = find_profile(name_or_path, cwd)
    return parse_profile(ref.path), ref
