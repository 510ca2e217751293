"""The supervisor's loop: runs attempts, has each watched to its end (``attempt_watch``), decides on
a failure (``decide.policy``) and restarts from the latest complete checkpoint with backoff (clock,
sleep and randomness injected); where the next attempt runs is ``placement``, the process around
it (a lock per job, re-attach, secrets) ``process``. Kind-agnostic: it sees the cluster only
through the attempt launcher and the attempt handles its kind gives it (``backends.base``)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace

from fsdp_orch.backends.base import AllocationEnding, AttemptHandle, AttemptLauncher
from fsdp_orch.checkpoints.final_outputs import FinalOutputs, final_outputs
from fsdp_orch.checkpoints.suspect import blamed_crash, reference_at
from fsdp_orch.decide.after_failure import Route, needs_allocation_check, needs_placement, route
from fsdp_orch.decide.policy import (
    Decision,
    FailureRecord,
    as_progress,
    backoff_delay,
    backoff_step,
    decide,
    hosts_to_exclude,
    new_checkpoint,
)
from fsdp_orch.launch.plan_inputs import host_port
from fsdp_orch.launch.submission import AttemptInputs, Submission
from fsdp_orch.record import save_cadence
from fsdp_orch.record.events import CANCEL_MARKER
from fsdp_orch.record.journal import Journal, read_status
from fsdp_orch.record.loss_points import read_points
from fsdp_orch.record.status import JobStatus
from fsdp_orch.supervise import placement
from fsdp_orch.supervise.attempt_archive import archive_attempt
from fsdp_orch.supervise.attempt_watch import AttemptWatch
from fsdp_orch.supervise.checkpoint_tracker import CheckpointTracker
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.metrics_textfile import MetricsTextfile
from fsdp_orch.supervise.outcomes import (
    Adopt,
    Cancelled,
    CancelledError,
    Failed,
    Outcome,
    Succeeded,
    TornDown,
)
from fsdp_orch.supervise.progress_events import ProgressEvents
from fsdp_orch.supervise.resume_watch import AttemptLosses, watched
from fsdp_orch.supervise.stop_flag import StopFlag
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.errors import FsdpOrchError
from fsdp_orch.vocab.save_interval import observed_mtbf
from fsdp_orch.vocab.states import FINISHED_UNKNOWN, TRAINING_COMPLETE, JobState

STRAGGLER_REPLACED = FailureCategory.STRAGGLER_REPLACED.value
log = logging.getLogger(__name__)


class Supervisor:
    def __init__(self, journal: Journal, submission: Submission, launcher: AttemptLauncher, *,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, stop_flag: StopFlag | None = None,
                 backoff_sleep: Callable[[float], None] | None = None,
                 allocation_ending: Callable[[], bool] = lambda: False, local_has_gpu: bool = False,
                 excluded_hosts: list[str] | None = None):
        """``excluded_hosts``: the hosts lost in earlier attempts
        (from the events, when re-attaching)."""
        self.journal = journal
        self.sub = submission
        self.launcher = launcher
        self.clock = clock
        self.sleep = sleep
        self.backoff_sleep = backoff_sleep or self._sleep_unless_cancelled
        self.rng = rng or random.Random()
        self.stop_flag = stop_flag or StopFlag()
        self.allocation_ending = allocation_ending
        self.local_has_gpu = local_has_gpu
        self.job_id = submission.job_id
        self.history: list[FailureRecord] = []
        self.steps_reached: int | None = None  # the highest step any attempt of this run reached
        self._folded: JobStatus | None = None  # the job's events, folded at the last restart
        self.requeued_attempts = 0  # attempts the scheduler took away: they use no restart budget
        self.excluded_hosts = list(excluded_hosts or [])  # later attempts are planned without them
        self.workers: tuple[str, ...] = ()  # the machines the kind found for the latest attempt
        self.progress = ProgressEvents(journal, clock, str(submission.run_dir))
        self.checkpoints = CheckpointTracker(journal, submission, lambda: launcher.checkpoints,
                                             clock=clock, sleep=sleep)
        self._losses: AttemptLosses | None = None  # the launched attempt's, judged (resume_watch)
        self.metrics_file = MetricsTextfile.from_environ(
            str(submission.run_dir), self.job_id, clock,
            tell=lambda message: journal.add_event(attempt=None, kind="metrics_not_written",
                                                   message=message))

    # --- the loop ---------------------------------------------------------------------------

    def run(self, adopt: Adopt | None = None, first_attempt: int = 0) -> JobState:
        """Attempt, decide, back off, attempt again, until an attempt
        succeeds or the policy gives up."""
        attempt = adopt.attempt if adopt else first_attempt
        try:
            while True:
                outcome = self._judged(attempt, self._run_attempt(attempt, adopt))
                if isinstance(outcome, Cancelled):
                    raise CancelledError()
                if not isinstance(outcome, Failed):
                    self._end(JobState.SUCCEEDED, None)
                    return JobState.SUCCEEDED
                ending = self._training_complete(attempt, outcome)
                if ending is not None:
                    return ending
                decision = self._decide(attempt, outcome)
                if not decision.restart:
                    reason = (f"{outcome.diagnosis.category}: "
                              f"{outcome.diagnosis.evidence or 'no evidence'}; {decision.reason}")
                    self._end(JobState.FAILED, reason)
                    return JobState.FAILED
                # the ended attempt's logs, trimmed to their evidence and compressed
                archive_attempt(self.sub.run_dir, attempt)
                # the delay grows only over failures in a row without progress
                delay = backoff_delay(self.sub.job.restart, backoff_step(self.history), self.rng)
                now = self.clock()
                self.journal.restart_scheduled(decision.reason, delay, now=now)
                # what the script's save cadence costs at the failure rate seen, once per job
                self._folded = read_status(str(self.sub.run_dir), self.job_id)
                save_cadence.tell(self.journal, self._folded, attempt)
                # The backoff runs from the verdict: the teardown
                # (stacks taken, ranks stopped) is part of it.
                self.backoff_sleep(max(0.0, delay - max(0.0, now - outcome.detected_at)))
                if self._cancel_requested():
                    raise CancelledError()
                attempt, adopt = attempt + 1, None
        except CancelledError:
            self._end(JobState.CANCELLED, "cancelled")
            return JobState.CANCELLED
        except AllocationEnding as ending:
            placement.requeued(self.journal, attempt, ending.evidence,
                               cancel_requested=self._cancel_requested,
                               clock=self.clock)
            if ending.requeue is not None:
                ending.requeue()
            return JobState.RESTARTING
        finally:
            if self.metrics_file is not None:
                self.metrics_file.write()  # the job's end (or this supervisor's), as recorded

    def _end(self, state: JobState, reason: str | None,
             outputs: FinalOutputs | None = None) -> None:
        """Record the job's end, once the kind stopped what it keeps between attempts: whoever
        reads the end finds nothing of the job left running. ``outputs``: what the script wrote
        after its last checkpoint, when its ranks were stopped after it."""
        try:
            self.launcher.job_ending()
        except Exception as exc:  # noqa: BLE001 - the end is recorded all the same
            log.warning(f"fsdp-orch supervisor: stopping what the job kept between attempts: {exc}")
        self.journal.set_state(state, reason=reason, now=self.clock(),
                               finished=None if outputs is None else outputs.finished,
                               missing=None if outputs is None else list(outputs.missing))

    def _training_complete(self, attempt: int, failed: Failed) -> JobState | None:
        """A failure after the job's last checkpoint was saved: a restart would train past the end
        (a Trainer resumed at ``max_steps`` takes one more step and writes its final model again).
        The job is not restarted, and an event says why and what failed. It ends SUCCEEDED when
        the script's final outputs are there or nothing tells what they are (``finished``:
        "unknown"), INCOMPLETE when they are missing (a Trainer's final model); None: restart."""
        why = self.checkpoints.final_one(failed.returned_step)
        if why is None:
            return None
        try:
            info = self.checkpoints.latest()
            outputs = (FinalOutputs(FINISHED_UNKNOWN) if info is None
                       else final_outputs(info, self.checkpoints.storage))
        except FsdpOrchError:
            outputs = FinalOutputs(FINISHED_UNKNOWN)
        diagnosis = failed.diagnosis
        self.journal.add_event(attempt=attempt, kind=TRAINING_COMPLETE, message=(
            f"not restarted after {diagnosis.category} ({diagnosis.evidence or 'no evidence'}): "
            f"{why}, so the training is complete; {outputs.text()}"))
        state = JobState.INCOMPLETE if outputs.finished is False else JobState.SUCCEEDED
        reason = (f"{diagnosis.category} after the last checkpoint: {outputs.text()}"
                  if state is JobState.INCOMPLETE else None)
        self._end(state, reason, outputs)
        return state

    def _decide(self, attempt: int, failed: Failed) -> Decision:
        """Record the failure and what is done about it."""
        reached = self.progress.reached
        failed, fell_back = self._blame_resume(attempt, failed, reached)
        self.history.append(as_progress(failed.record(attempt, self.steps_reached, reached),
                                        self.checkpoints.floor, fell_back))
        if reached is not None:
            self.steps_reached = max(reached, self.steps_reached or reached)
        category = failed.diagnosis.category
        for host in hosts_to_exclude(category, failed.lost_hosts, self.excluded_hosts):
            self.excluded_hosts.append(host)  # recorded before the decision: a re-attach finds it
            how = ("was a straggler, replaced" if category == STRAGGLER_REPLACED else "was lost")
            self.journal.host_excluded(attempt=attempt, host=host, now=failed.detected_at, message=(
                f"host {host} {how} in attempt {attempt}: "
                "the attempts after it are planned without it"))
        ending = needs_allocation_check(category) and self.allocation_ending()
        cannot_place = (placement.cannot_place(
            self.sub, attempt + 1, local_has_gpu=self.local_has_gpu,
            excluded_hosts=tuple(self.excluded_hosts), workers=self.workers)
            if needs_placement(category, ending) else None)
        way = route(category, allocation_ending=ending, cannot_place=cannot_place,
                    hosts_left_out=bool(self.excluded_hosts), taken=failed.taken)
        if way is Route.REQUEUE:
            self._record_failure(attempt, failed, "requeue")
            self.journal.requeued("the scheduler requeued the job", now=self.clock())
            raise AllocationEnding("") from None
        if way is Route.REQUEUE_WITHOUT:
            assert cannot_place is not None
            cannot_place = placement.requeue_without(
                self.launcher, self.journal, attempt, cannot_place,
                left_out=tuple(self.excluded_hosts),
                record=lambda action: self._record_failure(attempt, failed, action),
                clock=self.clock)
        if way is Route.LEAVE_OUT:
            self.requeued_attempts += 1
            self._record_failure(attempt, failed, "restart")
            return Decision(True, "the straggler's node is left out")
        if way is Route.TAKEN:  # recorded as a requeue: the budget shown leaves it out
            self.requeued_attempts += 1
            self._record_failure(attempt, failed, "requeue")
            return Decision(True, f"the cluster took attempt {attempt}'s nodes ({category}): a new "
                                  "attempt, no restart budget used")
        decision = decide(self.sub.job.restart, self.history,
                          restarts_done=attempt - self.requeued_attempts, cannot_place=cannot_place)
        self._record_failure(attempt, failed, "restart" if decision.restart else "give_up")
        if fell_back:  # set aside at the verdict already, for a loss judged as the attempt ran
            self._set_aside(attempt, failed.diagnosis.category, failed.diagnosis.evidence)
        return decision

    def _judged(self, attempt: int, outcome: Outcome) -> Outcome:
        """An attempt whose losses were judged wrong (``resume_watch``) failed, however it ended:
        a short script can run to its end before the verdict's poll stops it."""
        losses = self._losses
        verdict = losses.verdict if losses is not None and losses.attempt == attempt else None
        if verdict is None or not isinstance(outcome, (Succeeded, TornDown)):
            return outcome
        if verdict.suspect:  # before the job's last checkpoint is looked for
            self._set_aside(attempt, verdict.category, verdict.evidence)
        resumed = self.checkpoints.resume_step(attempt)
        return Failed(Diagnosis(verdict.category, True, verdict.evidence), self.clock(), None,
                      resumed, self.checkpoints.step())

    def _blame_resume(self, attempt: int, failed: Failed,
                      reached: int | None) -> tuple[Failed, bool]:
        """The failure as the attempt's losses judged it (a NaN loss, a loss that jumped after the
        resume: the attempt was stopped for it), and whether it is the fault of the checkpoint the
        attempt resumed from (``checkpoints.suspect``): then the next attempt resumes from the one
        before it."""
        losses = self._losses
        verdict = losses.verdict if losses is not None and losses.attempt == attempt else None
        if verdict is not None:
            failed = replace(failed, diagnosis=Diagnosis(verdict.category, True, verdict.evidence))
            return failed, verdict.suspect
        return failed, blamed_crash(
            failed.diagnosis.category, self.checkpoints.resume_step(attempt), reached,
            new_checkpoint(failed.checkpoint_before, failed.checkpoint_after))

    def _record_failure(self, attempt: int, failed: Failed, action: str) -> None:
        diagnosis = failed.diagnosis
        self.journal.add_failure(attempt=attempt, category=diagnosis.category,
                                 evidence=diagnosis.evidence, action=action, hint=diagnosis.hint,
                                 stalled_for_s=failed.stalled_for_s, now=failed.detected_at,
                                 progressed=self.history[-1].progressed if self.history else None)

    def _sleep_unless_cancelled(self, seconds: float) -> None:
        """Backoff, cut short by a cancel (recorded through the injected sleep)."""
        remaining = seconds
        while remaining > 0:
            step = min(remaining, 0.5)
            self.sleep(step)
            remaining -= step
            if self._cancel_requested():
                raise CancelledError()

    def _cancel_requested(self) -> bool:
        if self.stop_flag.set:
            return True
        return (self.sub.run_dir / CANCEL_MARKER).exists()

    # --- one attempt ------------------------------------------------------------------------

    def _run_attempt(self, attempt: int, adopt: Adopt | None) -> Outcome:
        """Launch the attempt (or adopt the running one) and watch it to its end."""
        self.progress.reached = None  # what the attempt before reached is not this one's
        if adopt is None:
            machines = placement.machines(self.launcher, self.journal, attempt,
                                          clock=self.clock, last=self.checkpoints.last)
            if isinstance(machines, Failed):
                return machines
            self.workers = machines
        before = self.checkpoints.step()
        if adopt is not None:
            handle, started = adopt.handle, adopt.started_at
            world = self.sub.plan_for(attempt, AttemptInputs(
                local_has_gpu=self.local_has_gpu,
                excluded_hosts=tuple(self.excluded_hosts))).world_size
        else:
            launched = self._launch(attempt, before)
            if not isinstance(launched, tuple):
                return launched
            handle, started, world = launched
        watch = AttemptWatch(self.journal, self.sub, handle, attempt=attempt, started=started,
                             world=world, before=before, progress=self.progress,
                             checkpoints=self.checkpoints, cancel_requested=self._cancel_requested,
                             clock=self.clock, sleep=self.sleep, adopted=adopt,
                             replaceable=self.launcher.leaves_out_nodes(),
                             looked=self.metrics_file.look if self.metrics_file else None)
        try:
            return watch.run()
        except AllocationEnding as ending:
            if ending.checkpoint_within > 0:
                self.checkpoints.before_the_end(attempt, handle, ending.checkpoint_within)
            raise
        finally:
            self.progress.end_attempt()
            handle.close()

    def _launch(self, attempt: int,
                before: int | None) -> tuple[AttemptHandle, float, int] | Outcome:
        """The attempt planned from its resume point and launched:
        its handle, start and world size."""
        excluded = tuple(self.excluded_hosts)
        resume_from, resume_step = self.checkpoints.resume_point(attempt)
        # the job's time between failures so far, for the runtime's checkpoint.interval: auto (a
        # straggler's planned replacement is no failure); None before the first failure
        # (folded once a restart: at its decision, or here for a re-attached supervisor's first)
        seen, self._folded = self._folded, None
        if seen is None and attempt > 0:
            seen = read_status(str(self.sub.run_dir), self.job_id)
        mtbf_s = None if seen is None else observed_mtbf(
            min((r.started_at for r in seen.attempt_records.values()), default=None),
            self.clock(), sum(f.category != STRAGGLER_REPLACED for f in seen.failures))
        planned = self.sub.planned_attempt(attempt, AttemptInputs(
            resume_from=resume_from, resume_step=resume_step,
            rdzv_port=self.launcher.port_for_attempt(attempt), local_has_gpu=self.local_has_gpu,
            excluded_hosts=excluded, workers=self.workers, mtbf_s=mtbf_s))
        plan = planned.plan
        started = self.clock()
        self.journal.start_attempt(attempt, resume_from=resume_from, resume_step=resume_step,
                                   now=started)
        if excluded:
            used = ", ".join(plan.node_names or tuple(host_port(node.address, node.port)
                                                      for node in plan.nodes))
            self.journal.add_event(attempt=attempt, kind="fewer_hosts", message=(
                f"attempt {attempt} runs without {', '.join(excluded)}: "
                f"on {plan.nnodes} node(s) ({used}; nodes: {self.sub.job.nodes_text}), "
                f"world size {plan.world_size} of {self.sub.world_size}"))
        if self._cancel_requested():
            return Cancelled()
        try:
            handle = self.launcher.launch(plan, planned.artifacts)
        except FsdpOrchError as exc:  # a node the attempt needs cannot be reached (an SSH host)
            self.journal.end_attempt(attempt, None, now=self.clock())
            # a host that does not answer is lost, as one that stops answering mid-run is: the
            # next attempt is planned without it (an SSH host listed beyond the nodes takes over)
            lost = getattr(exc, "lost_host", None)
            return Failed(Diagnosis(FailureCategory.PREEMPTION_OR_NODE_LOST, True,
                                    f"could not launch: {exc}"), self.clock(), None, before, before,
                          lost_hosts=(lost,) if isinstance(lost, str) else ())
        self.journal.launched(attempt, handle.ref)
        return self._watch_losses(attempt, handle), started, plan.world_size

    def _watch_losses(self, attempt: int, handle: AttemptHandle) -> AttemptHandle:
        """The attempt's handle, with its logged losses judged as its watch reads them
        (``resume_watch``), against those logged when the checkpoint it resumed from was saved."""
        resumed = self.checkpoints.resume_step(attempt)
        reference = (None if resumed is None
                     else reference_at(read_points(str(self.sub.run_dir)), resumed))
        handle, self._losses = watched(
            handle, self.journal, attempt, resumed, reference,
            lambda path, why, to: self.checkpoints.set_aside_by_runtime(attempt, path, why, to),
            lambda verdict: self._set_aside(attempt, verdict.category, verdict.evidence)
            if verdict.suspect else None)
        return handle

    def _set_aside(self, attempt: int, category: str, evidence: str | None) -> None:
        self.checkpoints.set_aside_suspect(attempt, (
            f"attempt {attempt} failed with {category} right after resuming from it: "
            f"{(evidence or 'no evidence')[:300]}"))


if __name__ == "__main__":
    import argparse
    import os

    from fsdp_orch.supervise.process import run_supervisor
    from fsdp_orch.vocab import process_log

    os.umask(0o077)  # the run folder's files (events, logs, heartbeats) are this user's alone

    parser = argparse.ArgumentParser(
        prog=f"python -m {__spec__.name if __spec__ else 'supervisor'}")
    parser.add_argument("job_id")
    parser.add_argument("--run-dir",
                        help="the job's run folder (default: $FSDP_ORCH_HOME/runs/JOB_ID)")
    parser.add_argument("--reattach", action="store_true")
    parser.add_argument("--in-allocation", action="store_true")
    parser.add_argument("--in-cluster", action="store_true")
    args = parser.parse_args()
    process_log.setup("stdout")  # supervisor.log, or the allocation's output
    raise SystemExit(run_supervisor(Supervisor, args.job_id, run_dir=args.run_dir,
                                    reattach=args.reattach, in_allocation=args.in_allocation,
                                    in_cluster=args.in_cluster))
