"""The cluster kinds by name: the one place that lists them. Each kind's module is imported only
when a job or profile of that kind is met (``status`` stays fast). ``register`` adds a kind (a
module path, or the kind itself) without editing this file; ``unregister`` takes it away again."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fsdp_orch.backends.base import ClusterKind
from fsdp_orch.jobspec.profiles import ProfileBase, ProfileRef, find_profile
from fsdp_orch.jobspec.validation import validate_doc
from fsdp_orch.jobspec.yamlio import load_file
from fsdp_orch.vocab.errors import InputError

# The built-in kinds: kind name -> the module whose ``KIND`` implements it
KIND_MODULES = {
    "local": "fsdp_orch.backends.local",
    "slurm": "fsdp_orch.backends.slurm.kind",
    "ssh": "fsdp_orch.backends.ssh",
    "tpu-vm": "fsdp_orch.backends.tpu_vm.kind",
    "kubernetes": "fsdp_orch.backends.kubernetes.kind",
}
KINDS = tuple(KIND_MODULES)  # the built-in kinds' names; kind_names() has the registered ones too

# Every kind known now, by name: a module path (imported on first use) or the kind itself.
_KINDS: dict[str, str | ClusterKind[Any]] = dict(KIND_MODULES)


def kind_names() -> tuple[str, ...]:
    """The names of the built-in kinds and of those registered since."""
    return tuple(_KINDS)


def register(name: str, kind: str | ClusterKind[Any]) -> None:
    """Add a cluster kind: ``kind`` is the module whose ``KIND`` implements it (imported on first
    use) or the kind object. A name already taken is a ValueError (``unregister`` it first)."""
    if name in _KINDS:
        raise ValueError(f"cluster kind {name!r} is already registered")
    if not isinstance(kind, str) and kind.name != name:
        raise ValueError(f"cluster kind {kind.name!r} registered as {name!r}; "
                         "expected the same name")
    _KINDS[name] = kind


def unregister(name: str) -> None:
    """Take away a kind ``register`` added; the built-in kinds stay."""
    if name in KIND_MODULES:
        raise ValueError(f"cluster kind {name!r} is built in; "
                         "only registered kinds can be unregistered")
    if _KINDS.pop(name, None) is None:
        raise ValueError(f"cluster kind {name!r} is not registered")


@contextmanager
def registered(name: str, kind: str | ClusterKind[Any]) -> Iterator[None]:
    """``register`` for the duration of a ``with`` block (tests, plugins tried out)."""
    register(name, kind)
    try:
        yield
    finally:
        unregister(name)


def cluster_kind(name: str) -> ClusterKind[Any]:
    found = _KINDS.get(name)
    if found is None:
        raise InputError(f"unknown cluster kind {name!r}; "
                         f"expected one of {', '.join(kind_names())}",
                         field="kind")
    if not isinstance(found, str):
        return found
    kind: ClusterKind[Any] = importlib.import_module(found).KIND
    return kind


def profile_models() -> dict[str, type[ProfileBase]]:
    return {name: cluster_kind(name).profile_model for name in kind_names()}


def parse_profile(path: Path) -> ProfileBase:
    """A profile file, validated with the model of the kind it names."""
    doc = load_file(path, "cluster profile")
    name = doc.data.get("kind")
    if not isinstance(name, str) or name not in _KINDS:
        raise InputError(f"expected one of {', '.join(kind_names())}; got {name!r}", file=doc.file,
                         field="kind", line=doc.line_of(("kind",)))
    return validate_doc(cluster_kind(name).profile_model, doc, doc.data_with_text(("env",)))


def load_profile(name_or_path: str, cwd: Path | None = None) -> tuple[ProfileBase, ProfileRef]:
    """A profile by name (project, then home, then built-in) or by path to a YAML file."""
    ref = find_profile(name_or_path, cwd)
    return parse_profile(ref.path), ref
