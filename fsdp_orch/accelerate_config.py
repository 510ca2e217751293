"""Map an ``accelerate config`` YAML (as written by ``accelerate config``) into job spec fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_orch.errors import InputError
from fsdp_orch.yamlio import load_file

_DISTRIBUTED_WITH_FSDP = {"FSDP", "XLA", "TPU"}


def accelerate_to_spec(config: dict[str, Any], file: str) -> dict[str, Any]:
    """The job-spec fields an accelerate config implies (only those it sets)."""
    out: dict[str, Any] = {}
    fsdp = config.get("fsdp_config") or {}
    if not isinstance(fsdp, dict):
        raise InputError("expected a mapping", file=file, field="fsdp_config")
    dist = str(config.get("distributed_type", "")).upper()
    if fsdp or dist in _DISTRIBUTED_WITH_FSDP:
        out["fsdp"] = dict(fsdp)
    mixed = config.get("mixed_precision")
    if mixed is not None:
        out.setdefault("fsdp", {})["mixed_precision"] = mixed
    machines = config.get("num_machines")
    processes = config.get("num_processes")
    if isinstance(machines, int) and machines > 0:
        out["nodes"] = machines
    if isinstance(processes, int) and processes > 0:
        nodes = out.get("nodes", 1)
        if processes % nodes:
            raise InputError(f"num_processes ({processes}) is not a multiple of num_machines ({nodes})",
                             file=file, field="num_processes")
        out["procs_per_node"] = processes // nodes
    if dist in ("XLA", "TPU"):
        out.setdefault("fsdp", {})["xla"] = True
    return out


def merge_accelerate_config(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Job fields written in job.yaml win over those implied by the accelerate config."""
    doc = load_file(path, "accelerate config")
    implied = accelerate_to_spec(doc.data, doc.file)
    merged = dict(data)
    merged.pop("accelerate_config", None)
    merged["accelerate_config"] = str(path)
    for key, value in implied.items():
        if key == "fsdp":
            own = data.get("fsdp") or {}
            if not isinstance(own, dict):
                continue
            own_names = {k.removeprefix("fsdp_") for k in own}
            base = {k: v for k, v in value.items() if k.removeprefix("fsdp_") not in own_names}
            merged["fsdp"] = {**base, **own}
        elif key not in data:
            merged[key] = value
    return merged
