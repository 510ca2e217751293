"""Map an ``accelerate config`` YAML (as written by ``accelerate config``) into job spec fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdp_orch.jobspec.fsdp_options import fsdp_name
from fsdp_orch.jobspec.validation import FieldOrigin
from fsdp_orch.jobspec.yamlio import YamlDoc, load_file
from fsdp_orch.vocab.errors import InputError

_DISTRIBUTED_WITH_FSDP = {"FSDP", "XLA", "TPU"}
# accelerate's FullyShardedDataParallelPlugin: a config without fsdp_version means FSDP1.
ACCELERATE_DEFAULT_FSDP_VERSION = 1


def accelerate_to_spec(config: dict[str, Any], file: str) -> dict[str, Any]:
    """The job-spec fields an accelerate config implies (only those it sets)."""
    return _implied(config, file)[0]


def _implied(config: dict[str, Any],
             file: str) -> tuple[dict[str, Any], dict[tuple[str, ...], tuple[str, ...]]]:
    """(spec fields, spec path -> the accelerate config path it came from)."""
    out: dict[str, Any] = {}
    sources: dict[tuple[str, ...], tuple[str, ...]] = {}
    fsdp = config.get("fsdp_config") or {}
    if not isinstance(fsdp, dict):
        raise InputError("expected a mapping", file=file, field="fsdp_config")
    dist = str(config.get("distributed_type", "")).upper()
    if fsdp or dist in _DISTRIBUTED_WITH_FSDP:
        out["fsdp"] = dict(fsdp)
        for key in fsdp:
            sources[("fsdp", fsdp_name(str(key)))] = ("fsdp_config", str(key))
        if not any(fsdp_name(str(k)) == "version" for k in fsdp):
            out["fsdp"]["version"] = ACCELERATE_DEFAULT_FSDP_VERSION
            sources[("fsdp", "version")] = ("fsdp_config",)
    mixed = config.get("mixed_precision")
    if mixed is not None:
        out.setdefault("fsdp", {})["mixed_precision"] = mixed
        sources[("fsdp", "mixed_precision")] = ("mixed_precision",)
    machines = config.get("num_machines")
    processes = config.get("num_processes")
    if isinstance(machines, int) and not isinstance(machines, bool) and machines > 0:
        out["nodes"] = machines
        sources[("nodes",)] = ("num_machines",)
    if isinstance(processes, int) and not isinstance(processes, bool) and processes > 0:
        nodes = out.get("nodes", 1)
        if processes % nodes:
            raise InputError(f"num_processes ({processes}) is not a "
                             f"multiple of num_machines ({nodes})",
                             file=file, field="num_processes")
        out["procs_per_node"] = processes // nodes
        sources[("procs_per_node",)] = ("num_processes",)
    if dist in ("XLA", "TPU"):
        out.setdefault("fsdp", {})["xla"] = True
        sources[("fsdp", "xla")] = ("distributed_type",)
    return out, sources


def merge_accelerate_config(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Job fields written in job.yaml win over those implied by the accelerate config."""
    return merge_accelerate_doc(data, load_file(path, "accelerate config"))[0]


def merge_accelerate_doc(data: dict[str, Any], doc: YamlDoc
                         ) -> tuple[dict[str, Any], dict[tuple[str, ...], FieldOrigin]]:
    """Like :func:`merge_accelerate_config`, plus where each field
    taken from ``doc`` was written."""
    implied, sources = _implied(doc.data, doc.file)
    merged = dict(data)
    merged["accelerate_config"] = doc.file
    taken: set[tuple[str, ...]] = set()
    for key, value in implied.items():
        if key == "fsdp":
            own = data.get("fsdp") or {}
            if not isinstance(own, dict):
                continue
            own_names = {fsdp_name(str(k)) for k in own}
            base = {k: v for k, v in value.items() if fsdp_name(k) not in own_names}
            merged["fsdp"] = {**base, **own}
            taken.update(("fsdp", fsdp_name(k)) for k in base)
        elif key not in data:
            merged[key] = value
            taken.add((key,))
    origins = {}
    for spec_path in taken:
        where = sources.get(spec_path, ())
        origins[spec_path] = FieldOrigin(doc.file, doc.line_of(where), ".".join(where) or None)
    return merged, origins
