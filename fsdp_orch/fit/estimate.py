"""``fsdp-orch fit``'s work: the job and its cluster read, the estimate taken from the cache or
measured (``tracked_run``), its budget (``budget``). The cache holds a measured peak by everything
it depends on: the model's config text (or factory name), the job's FSDP options and fit block, the
ranks, torch's and fsdp-orch's versions."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from fsdp_orch.fit.budget import ALLOCATOR_SLACK, FSDP1_ALLOCATOR_SLACK, Budget, budget
from fsdp_orch.fit.model_source import model_text
from fsdp_orch.fit.setup import FitSetup, fit_setup, unmodelled
from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.observe import command
from fsdp_orch.observe.command import Runner
from fsdp_orch.places.private import make_private_dirs, write_atomically
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.fit.suggestions import Suggestion

CACHE_DIR = "fit-cache"


@dataclass(frozen=True)
class Estimate:
    setup: FitSetup
    measured: dict[str, Any]  # tracked_run.measure's
    budget: Budget
    cached: bool
    base: str = ""  # the job file's folder, which the model's path is relative to
    gpu_memory: int | None = None  # what the verdict is against: bytes a GPU


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
    return estimate_job(job, profile, job_file, home=home, gpu_memory=gpu_memory,
                        use_cache=use_cache, every_layer=every_layer)


def estimate_job(job: JobSpec, profile: ProfileBase, job_file: Path, *, home: Path,
                 gpu_memory: int | None = None, use_cache: bool = True,
                 every_layer: bool = False) -> Estimate:
    """``gpu_memory``: bytes a GPU, in place of the profile's (and of what its cluster says)."""
    setup = fit_setup(job, profile.default_procs_per_node(), str(job_file))
    base = str(job_file.resolve().parent)
    memory, where = cluster_gpu_memory(profile, gpu_memory)
    try:
        measured, cached = measured_for(setup, base, home=home, use_cache=use_cache,
                                        every_layer=every_layer)
    except InputError as exc:  # the fit: block's model: name the job file it is in
        if exc.file:
            raise
        raise InputError(exc.detail, file=str(job_file), field=exc.field) from None
    result = budget_of(setup, measured, memory)
    notes = [*unmodelled(setup, job), *depth_notes(measured)]
    if where:
        notes.append(where)
    if notes:
        result = replace(result, notes=[*result.notes, *notes])
    return Estimate(setup, measured, result, cached, base, memory)


def depth_notes(measured: dict[str, Any]) -> list[str]:
    """The line that says a carried figure is a bound, where the depths measured disagree."""
    layers = measured.get("layers") or {}
    bound = layers.get("bound")
    return [bound] if bound else []


def cluster_gpu_memory(profile: ProfileBase, given: int | None = None,
                       run: Runner = command.run) -> tuple[int | None, str | None]:
    """Each GPU's memory: ``given`` (``--gpu-memory``), else the profile's ``gpu_memory``, else
    what the cluster says (a SLURM partition's GRES); and a line saying where the last came from,
    or why there is none."""
    if given is not None:
        return given, None
    if profile.gpu_memory is not None:
        return profile.gpu_memory, None
    from fsdp_orch.backends.registry import cluster_kind

    return cluster_kind(profile.kind).gpu_memory(profile, run)


def measured_for(setup: FitSetup, base: str, *, home: Path, use_cache: bool = True,
                 every_layer: bool = False) -> tuple[dict[str, Any], bool]:
    """The tracked peak of ``setup`` (``tracked_run.measure``'s), from the cache or measured (and
    cached); and whether it was cached."""
    key = cache_key(setup, model_text(setup.fit.model, base), every_layer)
    cache = home / CACHE_DIR / f"{key}.json"
    measured = _cached(cache) if use_cache else None
    if measured is not None:
        return measured, True
    measured = _measure(setup, base, every_layer)
    make_private_dirs(str(cache.parent))
    write_atomically(cache, json.dumps(measured), mode=0o600)
    return measured, False


def budget_of(setup: FitSetup, measured: dict[str, Any], gpu_memory: int | None) -> Budget:
    """The budget of one measurement for ``setup``: offload, the process groups and QLoRA's
    constants as the setup says (offload changes the budget, never what is measured)."""
    lora = setup.fit.lora
    quant = 0.0
    if lora is not None and lora.quantize == "nf4":
        from fsdp_orch.fit.adapters_math import quant_state_bytes

        quant = quant_state_bytes(measured["weights"], lora.double_quant)
        if lora.quant_constants == "sharded":
            quant /= setup.mesh_shape[-1]  # the ranks each weight is sharded over
    fit = setup.fit
    return budget(measured["peak"], offload=setup.offload_params,
                  procs_per_node=setup.procs_per_node, process_groups=len(setup.mesh_shape),
                  quant_state_bytes=quant, gpu_memory=gpu_memory,
                  optimizer_offload=fit.optimizer_offload,
                  paged_optimizer=fit.optimizer.startswith("paged_"),
                  sharded_bytes=measured.get("sharded_bytes"),
                  slack=FSDP1_ALLOCATOR_SLACK if setup.fsdp_version == 1 else ALLOCATOR_SLACK)


def suggestions_for(found: Estimate, *, home: Path, use_cache: bool = True,
                    every_layer: bool = False) -> list[Suggestion]:
    """What would make the estimated job fit (``suggestions``), each change measured as the job
    was (and cached)."""
    from fsdp_orch.fit.suggestions import suggest

    return suggest(found.setup, found.measured,
                   measure=lambda setup: measured_for(setup, found.base, home=home,
                                                      use_cache=use_cache,
                                                      every_layer=every_layer)[0],
                   budget_of=lambda setup, measured: budget_of(setup, measured,
                                                               found.gpu_memory))


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


__all__ = ["CACHE_DIR", "Estimate", "budget_of", "cache_key", "cluster_gpu_memory", "estimate",
           "estimate_job", "measured_for", "suggestions_for"]
