"""The supervisor: runs attempts, watches heartbeats and logs, classifies failures, restarts from the
latest complete checkpoint with backoff (clock, sleep and randomness injected).

Kind-agnostic: it sees the cluster only through the attempt launcher and the attempt handles its
kind gives it (``backends.base``).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from fsdp_orch.backends.base import AllocationEnding, AttemptHandle, AttemptLauncher
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.launch.plan import CHECKPOINT_REQUEST_FILE, LAUNCH_CHANGED, host_port
from fsdp_orch.launch.submission import SUBMISSION_FILE, Submission
from fsdp_orch.observe.checkpoint_files import file_sizes, fingerprint
from fsdp_orch.observe.checkpoints import CheckpointInfo
from fsdp_orch.record.events import CANCEL_MARKER
from fsdp_orch.record.journal import Journal, read_status
from fsdp_orch.record.model import RUNTIME_LOSS, JobStatus, finite
from fsdp_orch.supervise.diagnose import Diagnosis, cause_at_exit, died_of_a_signal
from fsdp_orch.supervise.hang_evidence import (
    FlightRecords,
    ask_for_flight_records,
    explain_hang,
    flight_records,
    ras_counts,
    with_flight_recorder,
)
from fsdp_orch.supervise.hang_window import Window, hang_window, moved
from fsdp_orch.supervise.logfollow import COMMUNICATION, LogFollower
from fsdp_orch.supervise.policy import (
    Decision,
    FailureRecord,
    backoff_delay,
    decide,
    hosts_to_exclude,
)
from fsdp_orch.supervise.resume import CheckpointSetting, latest, resume_point, setting_of
from fsdp_orch.supervise.watchdog import check_hang, no_signal, scripts_finished_at
from fsdp_orch.vocab.categories import SIGNAL_ENDINGS
from fsdp_orch.vocab.errors import FsdpOrchError, InputError
from fsdp_orch.vocab.hints import hint_for
from fsdp_orch.vocab.metrics import CHECKPOINT_BLOCK_S
from fsdp_orch.vocab.states import JobState

STOP_GRACE_S = 5.0
# A lost peer is usually the symptom of a rank that died first: after a communication error the
# supervisor gives torchrun this long to report which rank failed first.
SETTLE_S = 5.0
PROGRESS_EVERY_S = 5.0  # progress events: the first step at once, then at most one per this


class AttemptFailed(Exception):
    def __init__(self, diagnosis: Diagnosis, detected_at: float, stalled_for_s: float | None,
                 checkpoint_before: int | None, checkpoint_after: int | None):
        super().__init__(diagnosis.evidence)
        self.diagnosis = diagnosis
        self.detected_at = detected_at
        self.stalled_for_s = stalled_for_s
        self.record = FailureRecord(-1, diagnosis.category, checkpoint_before, checkpoint_after)
        self.lost_hosts: tuple[str, ...] = ()  # what the attempt handle found lost (address:port)


class Cancelled(Exception):
    pass


def node_lost_instead(diagnosis: Diagnosis, handle: AttemptHandle) -> Diagnosis:
    """A peer lost or a process killed may be a node that died: when the kind finds one that stopped
    answering, that is the failure (the survivors' errors only echo it)."""
    if diagnosis.category not in (*COMMUNICATION, "hang", "unknown", "preemption_or_node_lost"):
        return diagnosis
    lost = handle.lost_node()
    if lost is None:
        return diagnosis
    return Diagnosis("preemption_or_node_lost", True, lost)


class StopFlag:
    """Set by SIGTERM/SIGINT to the supervisor: treated as a cancel."""

    def __init__(self) -> None:
        self.set = False

    def install(self) -> None:
        def handler(signum: int, frame: object) -> None:
            self.set = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


@dataclass
class Adopt:
    """Re-attaching: the attempt already running (started by a supervisor that died)."""

    attempt: int
    handle: AttemptHandle
    started_at: float  # when the first supervisor started it (from the job's events)


class Supervisor:
    def __init__(self, journal: Journal, submission: Submission, launcher: AttemptLauncher, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, stop_flag: StopFlag | None = None,
                 backoff_sleep: Callable[[float], None] | None = None,
                 allocation_ending: Callable[[], bool] = lambda: False, local_has_gpu: bool = False,
                 excluded_hosts: list[str] | None = None):
        """``excluded_hosts``: the hosts lost in earlier attempts (from the events, when re-attaching)."""
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
        self.requeued_attempts = 0  # attempts the scheduler took away: they use no restart budget
        self.excluded_hosts = list(excluded_hosts or [])  # later attempts are planned without them
        self.workers: tuple[str, ...] = ()  # the machines the kind found for the latest attempt
        self._last_step: int | None = None  # the progress last recorded for the running attempt
        self._last_loss: float | None = None
        self._progress_at = 0.0  # when it was recorded (the supervisor's clock)
        self._follower: LogFollower | None = None  # the running attempt's: its console loss
        self._window: Window | None = None  # the hang window last recorded for the running attempt
        self._last_ckpt: int | None = None
        self._last_ckpt_seen: tuple[int, str] | None = None  # (step or save mark, path) last recorded
        self._saves: dict[tuple[str, int | None, bytes | None], int] = {}  # files of unknown step, by save
        self._file_look: dict[str, int] = {}  # checkpoint.file: the sizes at the previous poll
        self._hang_detection_off: str | None = None
        self._silent_in: int | None = None  # the attempt in which a node's channel was silent at the last look

    # --- the loop ---------------------------------------------------------------------------

    def run(self, adopt: Adopt | None = None, first_attempt: int = 0) -> JobState:
        """Attempt, decide, back off, attempt again, until an attempt succeeds or the policy gives up."""
        attempt = adopt.attempt if adopt else first_attempt
        restarts = 0  # in this run of the supervisor: the exponent of the backoff
        try:
            while True:
                try:
                    self._run_attempt(attempt, adopt)
                except AttemptFailed as failed:
                    decision = self._decide(attempt, failed)
                    if not decision.restart:
                        reason = (f"{failed.diagnosis.category}: {failed.diagnosis.evidence or 'no evidence'}; "
                                  f"{decision.reason}")
                        self.journal.set_state(JobState.FAILED, reason=reason, now=self.clock())
                        return JobState.FAILED
                    restarts += 1
                    delay = backoff_delay(self.sub.job.restart, restarts, self.rng)
                    now = self.clock()
                    self.journal.restart_scheduled(decision.reason, delay, now=now)
                    # The backoff runs from the verdict: the teardown (stacks taken, ranks stopped) is part of it.
                    self.backoff_sleep(max(0.0, delay - max(0.0, now - failed.detected_at)))
                    if self._cancel_requested():
                        raise Cancelled() from None
                    attempt, adopt = attempt + 1, None
                    continue
                self.journal.set_state(JobState.SUCCEEDED, reason=None, now=self.clock())
                return JobState.SUCCEEDED
        except Cancelled:
            self.journal.set_state(JobState.CANCELLED, reason="cancelled", now=self.clock())
            return JobState.CANCELLED
        except AllocationEnding as ending:
            self._requeued(attempt, ending.evidence)
            if ending.requeue is not None:
                ending.requeue()
            return JobState.RESTARTING

    def _decide(self, attempt: int, failed: AttemptFailed) -> Decision:
        """Record the failure and what is done about it."""
        record = FailureRecord(attempt, failed.record.category, failed.record.checkpoint_before,
                               failed.record.checkpoint_after)
        self.history.append(record)
        category = failed.diagnosis.category
        for host in hosts_to_exclude(category, failed.lost_hosts, self.excluded_hosts):
            self.excluded_hosts.append(host)  # recorded before the decision: a re-attach finds it
            self.journal.host_excluded(attempt=attempt, host=host, now=failed.detected_at, message=(
                f"host {host} was lost in attempt {attempt}: the attempts after it are planned without it"))
        if failed.diagnosis.category == "preemption_or_node_lost" and self.allocation_ending():
            self.journal.add_failure(attempt=attempt, category=failed.diagnosis.category,
                                     evidence=failed.diagnosis.evidence, action="requeue",
                                     hint=failed.diagnosis.hint, stalled_for_s=failed.stalled_for_s,
                                     now=failed.detected_at)
            self.journal.requeued("the scheduler requeued the job", now=self.clock())
            raise AllocationEnding("") from None
        cannot_place = self._cannot_place(attempt + 1) if category == "preemption_or_node_lost" else None
        decision = decide(self.sub.job.restart, self.history, restarts_done=attempt - self.requeued_attempts,
                          cannot_place=cannot_place)
        self.journal.add_failure(attempt=attempt, category=failed.diagnosis.category,
                                 evidence=failed.diagnosis.evidence,
                                 action="restart" if decision.restart else "give_up",
                                 hint=failed.diagnosis.hint, stalled_for_s=failed.stalled_for_s,
                                 now=failed.detected_at)
        return decision

    def _cannot_place(self, attempt: int) -> str | None:
        """Why ``attempt`` could not be planned on the hosts that are left; None when it can."""
        try:
            self.sub.launch_plan(attempt, local_has_gpu=self.local_has_gpu,
                                 excluded_hosts=tuple(self.excluded_hosts), workers=self.workers)
        except InputError as exc:
            return exc.detail
        return None

    def _requeued(self, attempt: int, evidence: str) -> None:
        """The scheduler warned that the allocation ends (its signal before the time limit): record
        it; the next allocation resumes from the latest complete checkpoint."""
        if not evidence:
            return  # recorded by _decide already
        if self._cancel_requested():
            return
        self.journal.add_failure(attempt=attempt, category="preemption_or_node_lost", evidence=evidence,
                                 action="requeue", hint=hint_for("preemption_or_node_lost", evidence),
                                 now=self.clock())
        self.journal.requeued("requeued by the scheduler", now=self.clock())

    def _sleep_unless_cancelled(self, seconds: float) -> None:
        """Backoff, cut short by a cancel (recorded through the injected sleep)."""
        remaining = seconds
        while remaining > 0:
            step = min(remaining, 0.5)
            self.sleep(step)
            remaining -= step
            if self._cancel_requested():
                raise Cancelled()

    # --- one attempt ------------------------------------------------------------------------

    def _run_attempt(self, attempt: int, adopt: Adopt | None) -> None:
        checkpoint_dir = Path(self.sub.checkpoint_dir).expanduser()
        if adopt is None:
            self.workers = self._machines(attempt)
        before = self._checkpoint_step(checkpoint_dir)
        excluded = tuple(self.excluded_hosts)
        if adopt is not None:
            handle = adopt.handle
            started = adopt.started_at
            world = self.sub.launch_plan(attempt, local_has_gpu=self.local_has_gpu,
                                         excluded_hosts=excluded).world_size
        else:
            resume_from, resume_step = self._resume_point(attempt, checkpoint_dir)
            plan, artifacts = self.sub.plan(attempt, resume_from=resume_from, resume_step=resume_step,
                                            rdzv_port=self.launcher.port_for_attempt(attempt),
                                            local_has_gpu=self.local_has_gpu, excluded_hosts=excluded,
                                            workers=self.workers)
            world = plan.world_size
            started = self.clock()
            self.journal.start_attempt(attempt, resume_from=resume_from, resume_step=resume_step, now=started)
            if excluded:
                used = ", ".join(host_port(node.address, node.port) for node in plan.nodes)
                self.journal.add_event(attempt=attempt, kind="fewer_hosts", message=(
                    f"attempt {attempt} runs without {', '.join(excluded)}: on {plan.nnodes} node(s) ({used}; "
                    f"nodes: {self.sub.job.nodes_text}), world size {world} of {self.sub.world_size}"))
            if self._cancel_requested():
                raise Cancelled()
            try:
                handle = self.launcher.launch(plan, artifacts)
            except FsdpOrchError as exc:  # a node the attempt needs cannot be reached (an SSH host)
                self.journal.end_attempt(attempt, None, now=self.clock())
                raise AttemptFailed(Diagnosis("preemption_or_node_lost", True, f"could not launch: {exc}"),
                                    self.clock(), None, before, before) from None
            self.journal.launched(attempt, handle.ref)
        follower = self._follower = LogFollower(handle.log_chunks)
        self._window, self._last_step, self._last_loss = None, None, None

        def stop() -> None:
            handle.stop(STOP_GRACE_S)
            self.journal.end_attempt(attempt, handle.poll(), now=self.clock())

        def fail(diagnosis: Diagnosis, stalled: float | None, detected_at: float | None = None) -> AttemptFailed:
            now = self.clock() if detected_at is None else detected_at
            diagnosis = node_lost_instead(diagnosis, handle)
            stop()
            return AttemptFailed(with_flight_recorder(diagnosis, handle.flight_recorder_dumps()), now, stalled,
                                 before, self._checkpoint_step(checkpoint_dir))

        try:
            self._watch_attempt(attempt, handle, started, checkpoint_dir, before, follower, stop, fail, world)
        except AttemptFailed as failed:
            failed.lost_hosts = handle.lost_hosts()
            raise
        except AllocationEnding as ending:
            if ending.checkpoint_within > 0:
                self._checkpoint_before_the_end(attempt, handle, checkpoint_dir, ending.checkpoint_within)
            raise

    def _machines(self, attempt: int) -> tuple[str, ...]:
        """The kind readies the attempt's machines (a preempted TPU VM made again), saying what it does."""
        def say(message: str) -> None:
            print(f"fsdp-orch supervisor: {message}", flush=True)
            self.journal.add_event(attempt=attempt, kind="machines", message=message)
        try:
            return self.launcher.machines(attempt, say)
        except FsdpOrchError as exc:
            raise AttemptFailed(Diagnosis("preemption_or_node_lost", True, f"no machines to run on: {exc}"),
                                self.clock(), None, self._last_ckpt, self._last_ckpt) from None

    def _checkpoint_before_the_end(self, attempt: int, handle: AttemptHandle, checkpoint_dir: Path,
                                   within: float) -> None:
        """The scheduler warned that the nodes go away: ask the attempt for a checkpoint (a file the
        runtime looks for at each step; FSDP_ORCH_CHECKPOINT_REQUEST) and wait up to ``within``
        seconds for one newer than what is committed now. Scripts without the fsdp-orch runtime
        do not answer; they resume from their own latest checkpoint."""
        if not any(name == "FSDP_ORCH_CHECKPOINT_REQUEST" for name, _ in self.sub.base_plan.env):
            return
        before = self._checkpoint_step(checkpoint_dir)
        asked = self.clock()
        request = Path(self.sub.attempt_dir(attempt)) / CHECKPOINT_REQUEST_FILE
        request.write_text(f"{asked}\n")
        while self.clock() - asked < within and handle.poll() is None:
            step = self._checkpoint_step(checkpoint_dir)
            if step is not None and (before is None or step > before):
                self._record_checkpoint(checkpoint_dir)
                self.journal.add_event(attempt=attempt, kind="checkpoint_on_warning", message=(
                    f"checkpoint of step {step} saved {self.clock() - asked:.1f}s after the scheduler's "
                    "warning, before the requeue"))
                return
            self.sleep(0.5)
        self.journal.add_event(attempt=attempt, kind="checkpoint_on_warning", message=(
            f"no new checkpoint within {within:g}s of the scheduler's warning: the next allocation "
            f"resumes from step {before if before is not None else 0}"))

    def _watch_attempt(self, attempt: int, handle: AttemptHandle, started: float, checkpoint_dir: Path,
                       before: int | None, follower: LogFollower, stop: Callable[[], None],
                       fail: Callable[..., AttemptFailed], world: int) -> None:
        """``world``: the attempt's world size (smaller than the job's when planned on fewer nodes)."""
        watch = self.sub.job.watch
        comm_seen: float | None = None
        first_step_seen = False
        ranks_seen: set[int] = set()
        while True:
            code = handle.poll()
            beats = handle.heartbeats()
            ranks_seen.update(beats)
            window = hang_window(watch, beats)
            if not first_step_seen and any(b.state != "starting" for b in beats.values()):
                first_step_seen = True
                self.journal.first_step(attempt, min(b.progress_time for b in beats.values()
                                                                if b.state != "starting"))
            self._record_progress(beats, window)
            self._record_checkpoint(checkpoint_dir)
            self._record_hang_detection(beats, started, watch)
            finished_at = scripts_finished_at(beats, world)
            if code is not None:
                self.journal.end_attempt(attempt, code, now=self.clock())
                if code == 0:
                    last = handle.heartbeats() or beats  # reports can trail the exit (hosts with own disks)
                    self._check_ranks_started(attempt, ranks_seen | set(last), world, before, checkpoint_dir)
                    follower.poll(final=True)  # the last lines: a progress bar drawn once, at the end
                    self._record_progress(last, hang_window(watch, last), final=True)
                    return
                if finished_at is not None and self._killed_by_a_signal(code, follower):
                    self.journal.add_event(attempt=attempt, kind="teardown_crash", message=(
                        f"every rank finished its script, then the attempt ended with exit code {code} "
                        "while the processes shut down (gloo/NCCL teardown): counted as done"))
                    return
                self._record_progress(beats, window, final=True)  # the attempt's last step, for goodput
                cause = with_flight_recorder(self._cause_at_exit(code, follower), handle.flight_recorder_dumps())
                cause = node_lost_instead(cause, handle)
                handle.stop(STOP_GRACE_S)  # one node's end: the others may still run (a rank cut off from a lost host)
                raise AttemptFailed(cause, self.clock(), None, before, self._checkpoint_step(checkpoint_dir))
            cause = follower.poll()
            if cause is not None and finished_at is not None and cause.category in SIGNAL_ENDINGS:
                cause = None  # every script returned: a signal now is the teardown's, judged at the exit
            if cause is not None:
                self._record_progress(beats, window, final=True)
                if cause.category not in COMMUNICATION:
                    raise fail(cause, None)
                comm_seen = comm_seen if comm_seen is not None else self.clock()
                if self.clock() - comm_seen >= SETTLE_S:
                    raise fail(cause, None)
                self.sleep(min(watch.poll_interval, 0.5))
                continue
            if finished_at is not None and self.clock() - finished_at > watch.startup_timeout:
                stop()
                self.journal.add_event(attempt=attempt, kind="teardown_hang", message=(
                    f"every rank finished its script {self.clock() - finished_at:.0f}s ago but the "
                    f"processes did not exit within startup_timeout ({watch.startup_timeout:g}s); "
                    "stopped them and counted the attempt as done"))
                return
            detected_at = self.clock()
            silent = self._silent_nodes(attempt, handle)
            verdict = None if silent else check_hang(beats, world_size=world, attempt_started=started,
                                                     now=detected_at, watch=watch, window=window.seconds)
            if verdict is not None:
                self._record_progress(beats, window, final=True)
                asked = ask_for_flight_records(Path(self.sub.attempt_dir(attempt)), self.clock)
                capture = handle.capture_stacks(beats)
                records = (flight_records(handle.flight_recorder_dumps, verdict.ranks, asked, self.clock,
                                          self.sleep) if asked is not None else FlightRecords())
                counts = records.counts
                if not counts and self.sub.base_plan.device == "cuda":
                    counts = ras_counts()
                explained = explain_hang(verdict, capture, counts, pending=records.pending)
                if explained.stacks is not None:
                    self.journal.add_event(attempt=attempt, kind="stacks",
                                           message=f"stacks of the hung attempt: {explained.stacks}")
                raise fail(Diagnosis("hang", True, explained.evidence), verdict.stalled_for_s, detected_at)
            if self._cancel_requested():
                stop()
                raise Cancelled()
            # A short window is judged at least 4 times over: a verdict comes within a quarter of it.
            self.sleep(min(watch.poll_interval, window.seconds / 4))

    def _silent_nodes(self, attempt: int, handle: AttemptHandle) -> dict[int, float]:
        """The nodes whose channel is silent (``handle.silent_nodes``): while any is, the hang rule
        waits; such a node is heard again or found lost (``poll``) within the node timeout. Each
        silence is recorded once, as it begins."""
        silent = handle.silent_nodes()
        if silent and self._silent_in != attempt:
            nodes = ", ".join(f"node {n} for {s:.1f}s" for n, s in sorted(silent.items()))
            self.journal.add_event(attempt=attempt, kind="node_silent", message=(
                f"no word from {nodes}: its ranks' heartbeats come through it, so no hang is judged "
                "until it is heard again or found lost"))
        self._silent_in = attempt if silent else None
        return silent

    def _check_ranks_started(self, attempt: int, seen: set[int], world: int, before: int | None,
                             checkpoint_dir: Path) -> None:
        """An attempt of a job that starts torch ranks and exited 0 without a single one (mp.spawn
        of ``torch.cuda.device_count()`` processes on a machine with no GPU) failed: it trained
        nothing. Fewer ranks than planned is said in an event."""
        if not self.sub.job.expects_ranks:
            return
        if seen and len(seen) >= world:
            return
        if seen:
            self.journal.add_event(attempt=attempt, kind="fewer_ranks", message=(
                f"{len(seen)} of the {world} planned ranks started a process group or an optimizer "
                f"step (ranks {', '.join(map(str, sorted(seen)))})"))
            return
        evidence = (f"the attempt exited 0, but none of the {world} ranks it was launched for "
                    f"({self.sub.job.nodes} node(s) x {world // max(1, self.sub.job.nodes)} per node) "
                    "started: no process started a torch process group or took an optimizer step "
                    "(0 ranks appeared)")
        raise AttemptFailed(Diagnosis("no_ranks_started", False, evidence), self.clock(), None, before,
                            self._checkpoint_step(checkpoint_dir))

    def _resume_point(self, attempt: int, checkpoint_dir: Path) -> tuple[str | None, int | None]:
        """The checkpoint the attempt starts from (the latest complete one), after moving aside the
        partial ones newer than it (HF's ``get_last_checkpoint`` takes the highest number, complete
        or not) and, before a restart from scratch, the files that no layout reads (resume.py)."""
        cp = self.sub.job.checkpoint
        point = resume_point(self._checkpoint_setting, self.launcher.checkpoints, attempt,
                             resume=attempt > 0 or cp.resume == "auto", sleep=self.sleep)
        for kind, message in point.events:
            self.journal.add_event(attempt=attempt, kind=kind, message=message)
        info = point.info  # never, or an explicit path the runtime reads from FSDP_ORCH_RESUME: None
        if info is None:
            return None, None
        return str(info.path), info.step if info.step_known else None

    @cached_property
    def _checkpoint_setting(self) -> CheckpointSetting:
        plan, cp = self.sub.base_plan, self.sub.job.checkpoint
        return setting_of(plan.checkpoint_dir, plan.checkpoint_file, cp.step_key, plan.workdir,
                          guarded=bool(cp.resume_args or cp.dir or cp.file))

    def _record_hang_detection(self, beats: dict, started: float, watch: Watch) -> None:  # type: ignore[type-arg]
        """``status`` says when hang detection is off for lack of any signal, and why."""
        why = no_signal(beats, attempt_started=started, now=self.clock(), watch=watch)
        if why is not None and self._hang_detection_off != why:
            self._hang_detection_off = why
            self.journal.hang_detection(why)
        elif beats and self._hang_detection_off is not None:
            self._hang_detection_off = None
            self.journal.hang_detection(None)

    @staticmethod
    def _killed_by_a_signal(code: int, follower: LogFollower) -> bool:
        """The attempt (or, under torchrun, its first failed rank) died of a signal (SIGABRT,
        SIGSEGV), with no error in the logs beyond a lost peer or the signal: how a gloo teardown
        crash looks."""
        return died_of_a_signal(code, follower.poll(final=True), follower.root_cause_rank())

    @staticmethod
    def _cause_at_exit(code: int, follower: LogFollower) -> Diagnosis:
        """The logs' root cause, unless torchrun says another rank failed first, or a rank's SIGKILL
        is reported, and the logs only show its peers losing it; then that rank's ending is the cause
        (``diagnose.cause_at_exit``)."""
        cause = follower.poll(final=True)
        return cause_at_exit(code, cause, follower.root_cause_rank(), follower.cause_rank(),
                             follower.tail.values())

    # --- bookkeeping ------------------------------------------------------------------------

    def _cancel_requested(self) -> bool:
        if self.stop_flag.set:
            return True
        return (self.sub.run_dir / CANCEL_MARKER).exists()

    def _record_progress(self, beats: dict, window: Window, final: bool = False) -> None:  # type: ignore[type-arg]
        """Rank 0's step and the latest loss (the runtime's in its heartbeat, else the one its console
        printed last), when either changed; and the hang window in force."""
        if not beats:
            return
        lead = beats.get(0) or next(iter(beats.values()))
        if lead.state == "starting":
            return
        self._record_window(lead.attempt, window)
        loss, source = finite(lead.loss), RUNTIME_LOSS
        if loss is None and self._follower is not None and self._follower.loss is not None:
            loss, source = finite(self._follower.loss[0]), self._follower.loss[1]
        if lead.step == self._last_step and loss == self._last_loss:
            return
        if not final and self._last_step is not None and self.clock() - self._progress_at < PROGRESS_EVERY_S:
            return  # the event log is on the shared filesystem: a line per PROGRESS_EVERY_S at most
        self._last_step, self._last_loss, self._progress_at = lead.step, loss, self.clock()
        blocked = lead.metrics.get(CHECKPOINT_BLOCK_S)
        self.journal.progress(lead.step, loss, lead.progress_time, loss_source=source,
                              checkpoint_s=float(blocked) if isinstance(blocked, (int, float)) else None)

    def _record_window(self, attempt: int, window: Window) -> None:
        """The hang window in force once the attempt steps, recorded when it first applies, when its
        mode changes (warm-up to adaptive) and when it moves by more than a fifth (the adaptive
        window follows the ranks' step times)."""
        if not moved(self._window, window):
            return
        self._window = window
        self.journal.hang_window(attempt, window.seconds, window.mode)

    def _latest_checkpoint(self) -> CheckpointInfo | None:
        """The latest complete checkpoint; a ``checkpoint.file`` counts once its size is the same as
        at the previous poll."""
        setting = self._checkpoint_setting
        storage = self.launcher.checkpoints
        if setting.layout is None:
            return latest(setting, storage)
        info = latest(setting, storage, self._file_look or None)  # the first poll: one look
        self._file_look = file_sizes(setting.layout, storage)
        return info

    def _checkpoint_step(self, checkpoint_dir: Path) -> int | None:
        """The latest complete checkpoint's step, or for a file of unknown step -N for the Nth save of
        it seen (the restart policy compares these to tell a crash loop); while the storage cannot be
        reached (the first host of hosts with their own disks, lost or preempted), the latest one seen."""
        try:
            info = self._latest_checkpoint()
        except FsdpOrchError:
            return self._last_ckpt
        return self._mark(info)

    def _mark(self, info: CheckpointInfo | None) -> int | None:
        if info is None:
            return None
        if info.step_known:
            return info.step
        key = (str(info.path), *fingerprint(str(info.path), self.launcher.checkpoints))
        return -self._saves.setdefault(key, len(self._saves) + 1)

    def _record_checkpoint(self, checkpoint_dir: Path) -> None:
        try:
            info = self._latest_checkpoint()
        except FsdpOrchError:
            return
        mark = self._mark(info)
        if info is None or mark is None:
            return
        step = info.step if info.step_known else None
        if (mark, str(info.path)) != self._last_ckpt_seen:
            self._last_ckpt_seen = (mark, str(info.path))
            self._last_ckpt = mark
            self.journal.checkpoint(step, path=str(info.path), step_note=info.step_note)


def run_supervisor(job_id: str, run_dir: str | None = None, reattach: bool = False,
                   in_allocation: bool = False) -> int:
    """Entry point of ``python -m fsdp_orch.supervise.supervisor JOB_ID [--run-dir DIR]
    [--reattach | --in-allocation]``.
    ``in_allocation``: run by a scheduler's batch script (SLURM), which owns the signals; a requeued
    job goes on with its next attempt. It reads and writes only the job's run folder (events,
    heartbeats, logs), never the index database."""
    import fcntl

    from fsdp_orch.backends.registry import cluster_kind
    from fsdp_orch.places import secrets
    from fsdp_orch.places.builtin import home, local_has_gpu
    from fsdp_orch.places.private import open_private
    from fsdp_orch.record.events import EventWriter

    run_dir = Path(run_dir) if run_dir else home() / "runs" / job_id
    if not (run_dir / SUBMISSION_FILE).is_file():
        print(f"fsdp-orch supervisor: no job {job_id} in {run_dir.parent}", flush=True)
        return 2
    # One supervisor per job: the lock lives as long as this process.
    lock = os.fdopen(open_private(str(run_dir / "supervisor.lock"), os.O_WRONLY | os.O_APPEND), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"fsdp-orch supervisor: job {job_id} already has a supervisor", flush=True)
        return 0
    kind = cluster_kind(Submission.kind_name(run_dir))
    submission = Submission.load(run_dir, kind)
    view = read_status(str(run_dir), job_id) or JobStatus(job_id, "", "", "", str(run_dir), 0.0)
    if view.ended:
        secrets.forget(job_id, "env")
        return 0
    journal = Journal(EventWriter(run_dir, "supervisor"), job_id)
    if view.supervisor_pid != os.getpid():  # a kind that starts it here records it already (its pid)
        journal.supervisor_started()
    stop_flag = StopFlag()
    if not in_allocation:
        stop_flag.install()
    launcher = kind.attempt_launcher(submission)
    has_gpu = local_has_gpu()  # this machine's: what every attempt this supervisor starts is planned with
    supervisor = Supervisor(journal, submission, launcher, stop_flag=stop_flag,
                            allocation_ending=kind.allocation_ending, local_has_gpu=has_gpu,
                            excluded_hosts=view.excluded_hosts)
    adopt = None
    attempts = view.attempt_records
    first_attempt = max(attempts) + 1 if attempts else 0
    if in_allocation:
        requeued = {f.attempt for f in view.failures if f.action == "requeue"}
        unfinished = [n for n, a in attempts.items() if a.ended_at is None]
        if unfinished:  # the previous allocation ended under it: requeued (time limit, preemption)
            last = max(unfinished)
            if last not in requeued:
                evidence = "the allocation ended during the attempt (requeued)"
                journal.add_failure(attempt=last, category="preemption_or_node_lost", evidence=evidence,
                                    action="requeue", hint=hint_for("preemption_or_node_lost", evidence))
                requeued.add(last)
            journal.end_attempt(last, None)
        supervisor.requeued_attempts = len(requeued)
        print(f"fsdp-orch supervisor: job {job_id} in its allocation, attempt {first_attempt}", flush=True)
    elif reattach:
        if view.state == JobState.RUNNING.value and attempts:
            attempt = max(attempts)
            adopt = Adopt(attempt, launcher.adopt(attempt, view.backend_ref), attempts[attempt].started_at)
            print(f"fsdp-orch supervisor: re-attached to job {job_id} attempt {attempt}", flush=True)
        else:  # died before launching, or while backing off: the next attempt starts now
            print(f"fsdp-orch supervisor: resuming job {job_id} at attempt {first_attempt}", flush=True)
    else:
        first_attempt = 0
    # What the launch changes of the job's settings, as planned here; each said once per job.
    attempt = adopt.attempt if adopt else first_attempt
    said = {n.message for n in view.notices if n.kind == LAUNCH_CHANGED}
    for notice in submission.launch_plan(attempt, local_has_gpu=has_gpu).notices:
        if notice not in said:
            journal.add_event(attempt=attempt, kind=LAUNCH_CHANGED, message=notice)
    state = JobState.FAILED
    try:
        state = supervisor.run(adopt, first_attempt)
    except SystemExit:
        journal.set_state(JobState.FAILED, reason="supervisor exited")
        raise
    except BaseException as exc:
        journal.set_state(JobState.FAILED, reason=f"supervisor error: {exc!r}")
        raise
    finally:
        if state != JobState.RESTARTING:  # ended: no supervisor will need the values again
            secrets.forget(job_id, "env")
    print(f"fsdp-orch supervisor: job {job_id} ended {state.value}", flush=True)
    return 0


if __name__ == "__main__":

    import argparse

    os.umask(0o077)  # the run folder's files (events, logs, heartbeats) are this user's alone

    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name if __spec__ else 'supervisor'}")
    parser.add_argument("job_id")
    parser.add_argument("--run-dir", help="the job's run folder (default: $FSDP_ORCH_HOME/runs/JOB_ID)")
    parser.add_argument("--reattach", action="store_true")
    parser.add_argument("--in-allocation", action="store_true")
    args = parser.parse_args()
    raise SystemExit(run_supervisor(args.job_id, run_dir=args.run_dir, reattach=args.reattach,
                                    in_allocation=args.in_allocation))
