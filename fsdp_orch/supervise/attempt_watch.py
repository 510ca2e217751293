"""One attempt watched to its end, as torchelastic's agent monitors its workers: observe (the exit
status, the heartbeats, the logs), record (progress, checkpoints, the hang window), decide, and
return how it ended as a value (``outcomes``). What ends the attempt stops it first."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.decide.hang_window import Window, hang_window
from fsdp_orch.decide.look import Look, Next, Step, next_step
from fsdp_orch.decide.lost_node import lost_node_instead, may_be_a_lost_node
from fsdp_orch.decide.stragglers import Straggler, StragglerWatch
from fsdp_orch.decide.teardown import (
    PastTheEnd,
    past_the_end,
    returned_step,
    teardown_place,
)
from fsdp_orch.decide.watchdog import (
    HangVerdict,
    Hold,
    judge,
    scripts_finished_at,
    silent_hold,
)
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.heartbeats import Heartbeat, returned_without_a_step
from fsdp_orch.observe.stacks import StackCapture
from fsdp_orch.observe.user_frame import default_library_roots
from fsdp_orch.record.event_types import STRAGGLER
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.live_progress import LIVE_EVERY_S
from fsdp_orch.supervise.attempt_notices import AttemptNotices
from fsdp_orch.supervise.checkpoint_tracker import CheckpointTracker
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.exit_cause import cause_at_exit, died_of_a_signal
from fsdp_orch.supervise.hang_evidence import (
    FlightRecords,
    ask_for_flight_records,
    explain_hang,
    flight_records,
    ras_counts,
    with_flight_recorder,
)
from fsdp_orch.supervise.logfollow import LogFollower
from fsdp_orch.supervise.outcomes import Adopt, Cancelled, Failed, Outcome, Succeeded, TornDown
from fsdp_orch.supervise.progress_events import ProgressEvents
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.states import HeartbeatState

STOP_GRACE_S = 5.0


# the steps that come after the hang rule was asked (no exit, no cause, no teardown hang)
JUDGED = frozenset({Step.READ_STUCK_STACKS, Step.HANG, Step.CANCEL, Step.WAIT})


class AttemptWatch:
    """``world``: the attempt's world size (smaller than the job's when planned on fewer nodes);
    ``before``: the latest complete checkpoint's mark when it started."""

    def __init__(self, journal: Journal, submission: Submission, handle: AttemptHandle, *,
                 attempt: int, started: float, world: int, before: int | None,
                 progress: ProgressEvents, checkpoints: CheckpointTracker,
                 cancel_requested: Callable[[], bool], clock: Callable[[], float],
                 sleep: Callable[[float], None], adopted: Adopt | None = None,
                 replaceable: bool = False, looked: Callable[[int], None] | None = None):
        """``looked``: called at each of the loop's looks (the metrics textfile's pace)."""
        self.journal = journal
        self.sub = submission
        self.handle = handle
        self.attempt = attempt
        self.started = started
        self.world = world
        self.before = before
        self.progress = progress
        self.checkpoints = checkpoints
        self.cancel_requested = cancel_requested
        self.clock = clock
        self.sleep = sleep
        self.looked = looked
        self.follower = LogFollower(handle.log_chunks)
        self.notices = AttemptNotices(journal, submission, handle, attempt=attempt, world=world,
                                      clock=clock)
        # Re-attached to a running attempt: its first step may be on record already, and its
        # nodes' channels reconnect to this supervisor only now (no signal yet is no news).
        self._stepped = adopted is not None and adopted.first_step_at is not None
        self._reconnecting_until = (clock() + submission.job.watch.node_timeout
                                    if adopted is not None else 0.0)
        self._returned_step: int | None = None  # the step all ranks had when one returned
        self._past_read: float | None = None  # the ``since`` of the last stuck ranks' stacks read
        self._stragglers = (StragglerWatch(submission.job.procs_per_node)
                            if submission.job.watch.stragglers != "off" else None)
        # watch.stragglers: replace, where the kind can run the next attempt without a node
        self._replaceable = replaceable and submission.job.watch.stragglers == "replace"
        # the straggler, the checkpoint when it was named, and what the planning leaves out for it
        self._to_replace: tuple[Straggler, int | None, str] | None = None
        progress.begin(self.follower, resumed_at=checkpoints.resume_step(attempt))

    def run(self) -> Outcome:
        outcome = self._watch()
        if isinstance(outcome, Failed):
            return replace(outcome, lost_hosts=outcome.lost_hosts or self.handle.lost_hosts())
        return outcome

    def _watch(self) -> Outcome:
        """Look, let ``decide.look.next_step`` say what the look leads to, act on it."""
        watch = self.sub.job.watch
        settling_since: float | None = None
        first_step_seen = self._stepped
        ranks_seen: set[int] = set()
        while True:
            if self.looked is not None:
                self.looked(self.attempt)
            code = self.handle.poll()
            beats = self.handle.heartbeats()
            idle = returned_without_a_step(beats)  # counted at an exit 0 alone (_at_exit)
            if idle:
                beats = {rank: beat for rank, beat in beats.items() if rank not in idle}
            ranks_seen.update(beats)
            window = hang_window(watch, beats)
            started = [b for b in beats.values() if b.state != HeartbeatState.STARTING]
            if not first_step_seen and started:
                first_step_seen = True
                self.journal.first_step(self.attempt, min(b.progress_time for b in started))
            self.progress.progress(beats, window)
            self.checkpoints.record()
            if beats or self.clock() >= self._reconnecting_until:
                self.progress.hang_detection(beats, self.started, watch)
            self.notices.strangers()
            self.notices.nodes()
            self.notices.waiting()
            self.notices.apart(beats)
            self._note_straggler(beats)
            self.notices.placement(beats)
            finished_at = scripts_finished_at(beats, self.world)
            self._returned_step = returned_step(beats) or self._returned_step
            now = self.clock()
            silent = self.handle.silent_nodes()
            found = None if silent else judge(
                beats, world_size=self.world, attempt_started=self.started, now=now,
                watch=watch, window=window.seconds)
            engine = self._engine_cause()
            look = Look(now=now, exit_code=None if engine is not None else code,
                        finished_at=finished_at,
                        cause=engine or (self.follower.poll() if code is None else None),
                        settling_since=settling_since,
                        replace_straggler=code is None and self._replace_now(),
                        verdict=found if isinstance(found, HangVerdict) else None,
                        past=past_the_end(beats, self.world, now, watch),
                        cancel_requested=self.cancel_requested(), window_s=window.seconds)
            step = next_step(look, watch)
            if step.step in JUDGED:  # the hang rule was asked: what holds it back, for status
                self.notices.silence(silent)
                self.notices.hold(silent_hold(silent, now, watch) if silent
                                  else found if isinstance(found, Hold) else None, now)
            if step.step is Step.READ_STUCK_STACKS:
                assert look.past is not None
                torn = self._stuck_after_the_end(look.past, beats, window)
                if torn is not None:
                    return torn
                step = next_step(replace(look, past=None), watch)  # the hang rule judges
            if step.step is Step.SETTLE:
                self.progress.progress(beats, window, final=True)
                settling_since = settling_since if settling_since is not None else now
                self.sleep(step.wait_s)
                continue
            if step.step is Step.WAIT:
                self._sleep_keeping_the_step_live(step.wait_s)
                continue
            return self._act(step, look, beats, ranks_seen, window)

    def _act(self, step: Next, look: Look, beats: dict[int, Heartbeat], ranks_seen: set[int],
             window: Window) -> Outcome:
        """What a step that ends the attempt does."""
        if step.step is Step.REPLACE_STRAGGLER:
            return self._replace_straggler()
        if step.step is Step.EXITED:
            assert look.exit_code is not None
            return self._at_exit(look.exit_code, beats, ranks_seen, look.finished_at)
        if step.step is Step.FAIL:
            assert isinstance(step.cause, Diagnosis)
            self.progress.progress(beats, window, final=True)
            return self._fail(step.cause, None)
        if step.step is Step.TEARDOWN_HANG:
            assert look.finished_at is not None
            return self._teardown_hang(look.finished_at)
        if step.step is Step.HANG:
            assert look.verdict is not None
            return self._hang(look.verdict, beats, window, look.now)
        self._stop()  # Step.CANCEL
        return Cancelled()

    def _sleep_keeping_the_step_live(self, seconds: float) -> None:
        """Sleep ``seconds`` in pieces of at most LIVE_EVERY_S, refreshing the live step between
        them: ``status`` showed a step up to the loop's poll interval plus the agents' look old
        (1.55 s measured); the loop still judges at its own pace. No clock read: an injected sleep
        need not move it."""
        pieces = max(1, math.ceil(seconds / LIVE_EVERY_S - 1e-9))
        for piece in range(pieces):
            self.sleep(seconds / pieces)
            if piece < pieces - 1:
                self.progress.live(self.handle.heartbeats())

    def _engine_cause(self) -> Diagnosis | None:
        """What the cluster's engine says ends the attempt (a pod evicted, an image not pulled:
        ``AttemptObservation.ended_by``), as the failure's cause; None where it says nothing."""
        ended = self.handle.ended_by()
        return None if ended is None else Diagnosis(ended.category, ended.retryable,
                                                    ended.evidence)

    def _lost_node_instead(self, diagnosis: Diagnosis) -> Diagnosis:
        """``decide.lost_node``'s rule, asking the kind for a lost node only where it applies."""
        if not may_be_a_lost_node(diagnosis.category):
            return diagnosis
        lost = lost_node_instead(diagnosis.category, self.handle.lost_node())
        return diagnosis if lost is None else Diagnosis(lost.category, True, lost.evidence)

    def _stop(self) -> None:
        self.handle.stop(STOP_GRACE_S)
        self.journal.end_attempt(self.attempt, self.handle.poll(), now=self.clock())

    def _fail(self, diagnosis: Diagnosis, stalled: float | None,
              detected_at: float | None = None) -> Failed:
        now = self.clock() if detected_at is None else detected_at
        diagnosis = self._lost_node_instead(diagnosis)
        taken = self._taken(diagnosis)  # before the stop, which the engine sees as more deletions
        self._stop()
        return Failed(with_flight_recorder(diagnosis, self.handle.flight_recorder_dumps()), now,
                      stalled, self.before, self.checkpoints.step(),
                      returned_step=self._returned_step, taken=taken)

    def _taken(self, diagnosis: Diagnosis) -> bool:
        """Whether ``diagnosis`` is the engine's word that the cluster took the attempt's nodes
        (``EngineEnding.taken``: an eviction, a drain, a pod deleted)."""
        ended = self.handle.ended_by()
        return (ended is not None and ended.taken and ended.category == diagnosis.category
                and ended.evidence == diagnosis.evidence)

    def _at_exit(self, code: int, beats: dict[int, Heartbeat], ranks_seen: set[int],
                 finished_at: float | None) -> Outcome:
        watch = self.sub.job.watch
        self.journal.end_attempt(self.attempt, code, now=self.clock())
        if code == 0:
            # reports can trail the exit (hosts with own disks)
            last = self.handle.heartbeats() or beats
            no_ranks = self._no_ranks_started(ranks_seen | set(last))
            if no_ranks is not None:
                return no_ranks
            self.follower.poll(final=True)  # the last lines: a progress bar drawn once, at the end
            self.progress.progress(last, hang_window(watch, last), final=True)
            return Succeeded()
        if finished_at is not None and died_of_a_signal(code, self.follower.poll(final=True),
                                                        self.follower.root_cause_rank()):
            # The first failed rank died of a signal (SIGABRT, SIGSEGV) with no error in the logs
            # beyond a lost peer or the signal: how a gloo teardown crash looks.
            self.journal.add_event(attempt=self.attempt, kind="teardown_crash", message=(
                f"every rank finished its script, then the attempt ended with exit code {code} "
                "while the processes shut down (gloo/NCCL teardown): counted as done"))
            return TornDown("teardown_crash")
        # the last step, for goodput
        self.progress.progress(beats, hang_window(watch, beats), final=True)
        cause = with_flight_recorder(self._cause_at_exit(code), self.handle.flight_recorder_dumps())
        cause = self._lost_node_instead(cause)
        # one node's end: the others may still run (a rank cut off from a lost host)
        self.handle.stop(STOP_GRACE_S)
        return Failed(cause, self.clock(), None, self.before, self.checkpoints.step(),
                      returned_step=self._returned_step)

    def _cause_at_exit(self, code: int) -> Diagnosis:
        """The logs' root cause, unless torchrun says another rank failed first, or a rank's SIGKILL
        is reported, and the logs only show its peers losing it;
        then that rank's ending is the cause (``exit_cause.cause_at_exit``)."""
        cause = self.follower.poll(final=True)
        return cause_at_exit(code, cause, self.follower.root_cause_rank(),
                             self.follower.cause_rank(), self.follower.tail.values())

    def _teardown_hang(self, finished_at: float) -> TornDown:
        self._stop()
        self.journal.add_event(attempt=self.attempt, kind="teardown_hang", message=(
            f"every rank finished its script {self.clock() - finished_at:.0f}s ago but the "
            "processes did not exit within startup_timeout "
            f"({self.sub.job.watch.startup_timeout:g}s); stopped them "
            "and counted the attempt as done"))
        return TornDown("teardown_hang")

    def _stuck_after_the_end(self, past: PastTheEnd, beats: dict[int, Heartbeat],
                             window: Window) -> TornDown | None:
        """Ranks at the job's last step that have not returned while a peer has: their stacks,
        read once for each ``since``, decide. All at the script's top level or in teardown, in no
        collective: stopped, and the attempt counts as done (``teardown_hang``)."""
        if self._past_read == past.since:
            return None
        self._past_read = past.since
        capture: StackCapture = self.handle.capture_stacks({r: beats[r] for r in past.stuck})
        roots = default_library_roots()
        places = {}
        for rank in past.stuck:
            dump = capture.dumps.get(rank)
            place = teardown_place(dump.threads, roots) if dump is not None else None
            if place is None:
                return None  # in a collective, in its own code, or no stack: the hang rule judges
            places[rank] = place
        stuck_for = self.clock() - past.since
        self.progress.progress(beats, window, final=True)
        self._stop()
        returned = ", ".join(map(str, past.returned))
        where = "; ".join(f"rank {rank} stuck at {place}" for rank, place in places.items())
        self.journal.add_event(attempt=self.attempt, kind="teardown_hang", message=(
            f"rank {returned} returned from its script after step {past.step}, which every rank "
            f"reached; {where}, in no collective, {stuck_for:.0f}s after the last progress: "
            f"stopped it and counted the attempt as done (stacks: {capture.folder})"))
        return TornDown("teardown_hang")

    def _hang(self, verdict: HangVerdict, beats: dict[int, Heartbeat], window: Window,
              detected_at: float) -> Failed:
        """The hang rule's verdict, explained: the stacks,
        the flight recorder's collectives, the culprit."""
        self.progress.progress(beats, window, final=True)
        asked = ask_for_flight_records(Path(self.sub.attempt_dir(self.attempt)), self.clock)
        capture = self.handle.capture_stacks(beats)
        records = (flight_records(self.handle.flight_recorder_dumps, verdict.ranks, asked,
                                  self.clock, self.sleep) if asked is not None else FlightRecords())
        counts = records.counts
        if not counts and self.sub.base_plan.device == "cuda":
            counts = ras_counts()
        explained = explain_hang(verdict, capture, counts, pending=records.pending)
        if explained.stacks is not None:
            self.journal.add_event(attempt=self.attempt, kind="stacks",
                                   message=f"stacks of the hung attempt: {explained.stacks}")
        return self._fail(Diagnosis(FailureCategory.HANG, True, explained.evidence),
                          verdict.stalled_for_s, detected_at)

    def _note_straggler(self, beats: dict[int, Heartbeat]) -> None:
        """A rank the others keep waiting for, named once (``decide.stragglers``); under
        ``replace``, its node is left out at the next complete checkpoint."""
        if self._stragglers is None:
            return
        found = self._stragglers.look(beats)
        if found is None:
            return
        message = found.message()
        if self.sub.job.watch.stragglers == "replace":
            left_out = self.handle.left_out_name(found.node, found.host)
            if self._replaceable and left_out and self._to_replace is None:
                self._to_replace = (found, self.checkpoints.step(), left_out)
                message += f"; its node {left_out} is left out at the next checkpoint"
            elif self._to_replace is None:
                message += ("; watch.stragglers is replace, but this cluster has no spare node to "
                            "run without it (SLURM's spare_nodes, or SSH hosts listed beyond the "
                            "job's nodes): named only")
        self.journal.add_event(attempt=self.attempt, kind=STRAGGLER, message=message)

    def _replace_now(self) -> bool:
        """A straggler is to be replaced and a checkpoint newer than its naming is complete."""
        if self._to_replace is None:
            return False
        step = self.checkpoints.step()
        return step is not None and (self._to_replace[1] is None or step > self._to_replace[1])

    def _replace_straggler(self) -> Failed:
        """End the attempt at the checkpoint just completed; the next one runs without the
        straggler's node (``Failed.lost_hosts``)."""
        assert self._to_replace is not None
        straggler, _, left_out = self._to_replace
        evidence = (f"straggler {straggler.message()}: replaced at the checkpoint of step "
                    f"{self.checkpoints.step()} (watch.stragglers: replace)")
        self._stop()
        return Failed(Diagnosis(FailureCategory.STRAGGLER_REPLACED.value, True, evidence),
                      self.clock(), None, self.before, self.checkpoints.step(),
                      returned_step=self._returned_step, lost_hosts=(left_out,))

    def _no_ranks_started(self, seen: set[int]) -> Failed | None:
        """An attempt of a job that starts torch ranks and exited 0 without a single one (mp.spawn
        of ``torch.cuda.device_count()`` processes on a machine with no GPU) failed: it trained
        nothing. Fewer ranks than planned is said in an event."""
        if not self.sub.job.expects_ranks or (seen and len(seen) >= self.world):
            return None
        if seen:
            self.journal.add_event(attempt=self.attempt, kind="fewer_ranks", message=(
                f"{len(seen)} of the {self.world} planned ranks started a process group or an "
                f"optimizer step (ranks {', '.join(map(str, sorted(seen)))})"))
            return None
        evidence = (f"the attempt exited 0, but none of the {self.world} ranks it was launched for "
                    f"({self.sub.job.nodes} node(s) x {self.world // max(1, self.sub.job.nodes)} "
                    "per node) started: no process started a torch process group or took an "
                    "optimizer step (0 ranks appeared)")
        return Failed(Diagnosis(FailureCategory.NO_RANKS_STARTED, False, evidence), self.clock(),
                      None, self.before, self.checkpoints.step())
