"""``fsdp-orch fit``'s work: the job and its cluster read, the estimate taken from the cache or
measured (``tracked_run``), its budget (``budget``). The cache holds a measured peak by everything
it depends on: the model's config text (or factory name), the job's FSDP options and fit block, the
ranks, torch's and fsdp-orch's versions."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from fsdp_orch.fit.budget import Budget, budget
from fsdp_orch.fit.model_source import model_text
from fsdp_orch.fit.setup import FitSetup, fit_setup
from fsdp_orch.places.private import make_private_dirs, write_atomically
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.version import __version__

CACHE_DIR = "fit-cache"


@dataclass(frozen=True)
class Estimate:
    setup: FitSetup
    measured: dict[str, Any]  # tracked_run.measure's
    budget: Budget
    cached: bool


def cache_key(setup: FitSetup, text: str, every_layer: bool = False) -> str:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    blob = json.dumps({"setup": setup.key(), "model": text, "every_layer": every_layer,
                       "torch": torch_version,
                       "fsdp_orch": __version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def estimate(job_file: Path, cluster: str, *, overrides: list[str], home: Path,
             gpu_memory: int | None = None, use_cache: bool = True,
             every_layer: bool = False) -> Estimate:
    from fsdp_orch.backends.registry import load_profile
    from fsdp_orch.jobspec.loading import load_job

    job, _ = load_job(job_file, overrides)
    profile, _ = load_profile(cluster)
    setup = fit_setup(job, profile.default_procs_per_node(), str(job_file))
    base = str(job_file.resolve().parent)
    key = cache_key(setup, model_text(setup.fit.model, base), every_layer)
    cache = home / CACHE_DIR / f"{key}.json"
    measured, cached = (_cached(cache) if use_cache else None), True
    if measured is None:
        measured, cached = _measure(setup, base, every_layer), False
        make_private_dirs(str(cache.parent))
        write_atomically(cache, json.dumps(measured), mode=0o600)
    lora = setup.fit.lora
    quant = 0.0
    if lora is not None and lora.quantize == "nf4":
        from fsdp_orch.fit.adapters_math import quant_state_bytes

        quant = quant_state_bytes(measured["weights"], lora.double_quant)
    result = budget(measured["peak"], offload=setup.offload_params,
                    procs_per_node=setup.procs_per_node,
                    process_groups=len(setup.mesh_shape), quant_state_bytes=quant,
                    gpu_memory=gpu_memory if gpu_memory is not None else profile.gpu_memory)
    return Estimate(setup, measured, result, cached)


def _cached(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_uid != os.getuid():
            return None  # only this user's own cache is read
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("peak"), dict) else None


def _measure(setup: FitSetup, base: str, every_layer: bool) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("fit runs the model under torch's FakeTensorMode: it needs torch "
                         "(>= 2.9) where it runs (pip install torch; a CPU build is enough, "
                         "no GPU is used)", field="fit") from None
    from fsdp_orch.fit.tracked_run import measure

    return measure(setup, base, whole=every_layer)


__all__ = ["CACHE_DIR", "Estimate", "cache_key", "estimate"]
