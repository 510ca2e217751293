"""The fit check between planning a submission and recording it, as the CLI's ``submit`` and the
Python API's both make it (``fit.at_submit`` estimates): a job that does not fit raises
``JobDoesNotFit`` before anything is written; else the lines to tell the user, and the planned
submission carrying the estimate (recorded with the job, shown by ``status``). Each surface only
says it in its own way: the CLI on stderr, the API on the ``Job`` handle's ``notes``.

A job without a ``fit:`` block costs nothing here: neither the estimate nor torch is imported."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from fsdp_orch.vocab.errors import InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.control.planning import PlannedSubmission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.fit.estimate import Estimate
    from fsdp_orch.fit.suggestions import Suggestion


class JobDoesNotFit(InputError):
    """The job's estimated peak a GPU is above its GPUs' memory: not submitted, nothing written
    (the CLI's exit 2). ``peak_gib`` and ``gpu_memory_gib``: a GPU's, in GiB; ``suggestions``: what
    would make it fit, those that fit first (each with ``change``, ``set``, ``sets``, ``peak_gib``,
    ``fits``, ``verdict``; ``as_json()`` as ``fit --json`` writes it); ``estimate``: the whole
    estimate (``estimate.budget.rows``: the peak by category)."""

    def __init__(self, request: SubmitRequest, found: Estimate, suggestions: list[Suggestion]):
        self.estimate = found
        self.suggestions = suggestions
        self.peak_gib = found.budget.peak_gib
        self.gpu_memory_gib = found.budget.gpu_memory_gib
        words = request.words
        super().__init__(
            f"not submitted: the job does not fit the GPUs of {request.cluster} "
            f"({found.budget.verdict}); change it {words.fit_changes}, or submit with "
            f"{words.no_fit_check}", file=str(request.job_file), field="fit")


@dataclass(frozen=True)
class Gated:
    planned: PlannedSubmission  # with the estimate, where there was one
    notes: list[str]  # a line each: the verdict, why there is none, a GPU memory that did nothing


def fit_gated(request: SubmitRequest, planned: PlannedSubmission, *, home: Path) -> Gated:
    """``planned`` checked against its cluster's GPUs (``request.gpu_memory``: in place of what
    the profile and the cluster say). Raises ``JobDoesNotFit``, or InputError for a wrong ``fit:``
    block; ``home``: where the estimate's cache is."""
    job = planned.submission.job
    if not request.fit_check:
        return Gated(planned, [])
    if job.fit is None:
        unused = request.gpu_memory is not None
        return Gated(planned, [f"{request.words.gpu_memory} has no effect: the job has no fit: "
                               "block (nothing to estimate)"] if unused else [])
    from fsdp_orch.fit.at_submit import Outcome, check_at_submit

    check = check_at_submit(job, planned.submission.profile, request.job_file, home=home,
                            gpu_memory=request.gpu_memory_bytes)
    found = check.found
    if check.outcome is Outcome.DOES_NOT_FIT and found is not None:
        raise JobDoesNotFit(request, found, check.suggestions or [])
    notes = [check.note] if check.note else []
    if found is None:
        return Gated(planned, notes)
    b = found.budget
    estimate = (round(b.peak_gib, 3), round(sum(b.rows.values()), 3), b.gpu_memory_gib)
    return Gated(replace(planned, fit_estimate=estimate), notes)


__all__ = ["Gated", "JobDoesNotFit", "fit_gated"]
