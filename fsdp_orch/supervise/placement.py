"""Where the next attempt runs, for the supervisor: the machines the kind readies for it, whether
it can be planned on the hosts that are left, and the job sent back through the scheduler's queue
(without the hosts left out, or because the allocation ends)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fsdp_orch.backends.base import AllocationEnding, AttemptLauncher
from fsdp_orch.launch.submission import AttemptInputs, Submission
from fsdp_orch.record.journal import Journal
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.outcomes import Failed
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.errors import FsdpOrchError, InputError
from fsdp_orch.vocab.hints import hint_for

log = logging.getLogger(__name__)
NODE_LOST = FailureCategory.PREEMPTION_OR_NODE_LOST


def machines(launcher: AttemptLauncher, journal: Journal, attempt: int, *,
             clock: Callable[[], float], last: int | None) -> tuple[str, ...] | Failed:
    """The kind readies the attempt's machines (a preempted TPU VM made again), saying what it
    does; a failure to, the attempt's (``last``: the latest complete checkpoint's mark)."""
    def say(message: str) -> None:
        log.info(f"fsdp-orch supervisor: {message}")
        journal.add_event(attempt=attempt, kind="machines", message=message)
    try:
        return launcher.machines(attempt, say)
    except FsdpOrchError as exc:
        return Failed(Diagnosis(NODE_LOST, True, f"no machines to run on: {exc}"), clock(), None,
                      last, last)


def cannot_place(sub: Submission, attempt: int, *, local_has_gpu: bool,
                 excluded_hosts: tuple[str, ...], workers: tuple[str, ...]) -> str | None:
    """Why ``attempt`` could not be planned on the hosts that are left; None when it can."""
    try:
        sub.plan_for(attempt, AttemptInputs(local_has_gpu=local_has_gpu,
                                            excluded_hosts=excluded_hosts, workers=workers))
    except InputError as exc:
        return exc.detail
    return None


def requeue_without(launcher: AttemptLauncher, journal: Journal, attempt: int, why: str, *,
                    left_out: tuple[str, ...], record: Callable[[str], None],
                    clock: Callable[[], float]) -> str:
    """No spare left where the job runs: where the kind can, the job goes back through the
    queue without the hosts left out, and this supervisor ends (AllocationEnding: the next
    allocation's resumes from the latest complete checkpoint). Returns why the next attempt
    cannot be placed, for the policy, where the kind cannot, or the scheduler refused.
    ``record``: records the failure with its action."""
    requeue = launcher.requeue_without(left_out)
    if requeue is None:
        return why
    try:
        ref = requeue()
    except FsdpOrchError as exc:
        return f"{why}; submitting the job again without {', '.join(left_out)} failed: {exc}"
    record("requeue")
    journal.add_event(attempt=attempt, kind="requeued_without", message=(
        f"{why}: submitted again as {ref}, without {', '.join(left_out)}"))
    journal.requeued(f"no spare node left: back through the queue without "
                     f"{', '.join(left_out)}", now=clock())
    journal.scheduled(ref, now=clock())
    raise AllocationEnding("") from None


def requeued(journal: Journal, attempt: int, evidence: str, *,
             cancel_requested: Callable[[], bool], clock: Callable[[], float]) -> None:
    """The scheduler warned that the allocation ends (its signal before the time limit): record
    it; the next allocation resumes from the latest complete checkpoint. No ``evidence``: recorded
    at the decision already."""
    if not evidence or cancel_requested():
        return
    journal.add_failure(attempt=attempt, category=NODE_LOST, evidence=evidence, action="requeue",
                        hint=hint_for(NODE_LOST, evidence), now=clock())
    journal.requeued("requeued by the scheduler", now=clock())


__all__ = ["cannot_place", "machines", "requeue_without", "requeued"]
