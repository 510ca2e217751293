"""The fit check ``submit`` makes before anything is written: a job with a ``fit:`` block, on a
cluster whose GPU memory is known (the profile's ``gpu_memory``, or what the cluster says), is
estimated (cached: fast) and refused when it does not fit, with what would make it fit.
``control.fit_gate`` makes it for the CLI and the Python API alike.

The check never stands in a job's way for reasons of its own: without a GPU memory, without torch
(or transformers, for a Hugging Face config) here, or where the estimate itself fails, it is
skipped and says why in one line (nothing, where the profile has no ``gpu_memory`` and its kind
cannot say one: no GPU was named to fit). A ``fit:`` block that is wrong (a config that is not
there) is bad input, as anywhere else.
"""

from __future__ import annotations

import enum
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path

from fsdp_orch.fit.estimate import Estimate, cluster_gpu_memory, estimate_job, suggestions_for
from fsdp_orch.fit.model_source import config_file
from fsdp_orch.fit.suggestions import Suggestion
from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.observe import command
from fsdp_orch.observe.command import Runner
from fsdp_orch.vocab.errors import FsdpOrchError

SKIPPED_BECAUSE = "fit check skipped: "


class Outcome(enum.Enum):
    UNCHECKED = "unchecked"
    FITS = "fits"
    DOES_NOT_FIT = "does not fit"


@dataclass(frozen=True)
class SubmitCheck:
    outcome: Outcome
    note: str | None = None  # one line for the user: why unchecked, or the verdict
    found: Estimate | None = None
    suggestions: list[Suggestion] | None = None  # with DOES_NOT_FIT


def check_at_submit(job: JobSpec, profile: ProfileBase, job_file: Path, *, home: Path,
                    gpu_memory: int | None = None, run: Runner = command.run) -> SubmitCheck:
    """``gpu_memory``: bytes a GPU (``--gpu-memory``), in place of the profile's and the
    cluster's."""
    if job.fit is None:
        return SubmitCheck(Outcome.UNCHECKED)
    memory, where = cluster_gpu_memory(profile, gpu_memory, run)
    if memory is None:
        # said only where the cluster has GPUs it could not tell the memory of: a profile
        # without gpu_memory on a kind that cannot say it (local) is no news at every submit
        return SubmitCheck(Outcome.UNCHECKED, where and SKIPPED_BECAUSE + where)
    missing = missing_modules(job.fit.model, str(job_file.resolve().parent))
    if missing:
        return SubmitCheck(Outcome.UNCHECKED, SKIPPED_BECAUSE + (
            f"the estimate needs {' and '.join(missing)} here (pip install {' '.join(missing)}"
            + ("; a CPU build of torch is enough)" if "torch" in missing else ")")))
    try:
        found = estimate_job(job, profile, job_file, home=home, gpu_memory=memory)
    except FsdpOrchError:
        raise  # bad input in the fit: block: exit 2, as any other
    except Exception as exc:  # noqa: BLE001 - the estimator's own failure never blocks a job
        said = str(exc).strip().splitlines() or [""]
        return SubmitCheck(Outcome.UNCHECKED, SKIPPED_BECAUSE + (
            f"the estimate failed ({type(exc).__name__}: {said[0][:200]}); "
            "fsdp-orch fit shows it"))
    if where:
        found = replace(found, budget=replace(found.budget, notes=[*found.budget.notes, where]))
    b = found.budget
    if not b.refused:
        how = "cached" if found.cached else f"measured in {found.measured['seconds']:g} s"
        return SubmitCheck(Outcome.FITS, f"fit: {b.peak_gib:.1f} GiB a GPU at its peak, "
                                         f"{b.verdict} ({how})", found)
    return SubmitCheck(Outcome.DOES_NOT_FIT, None, found, suggestions_for(found, home=home))


def missing_modules(model: str, base: str) -> list[str]:
    """What the estimate imports that is not installed here (found without importing it)."""
    needed = ["torch"] + (["transformers"] if config_file(model, base) is not None else [])
    return [name for name in needed if importlib.util.find_spec(name) is None]


__all__ = ["Outcome", "SubmitCheck", "check_at_submit", "missing_modules"]
