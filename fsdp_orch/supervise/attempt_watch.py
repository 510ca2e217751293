"""One attempt watched to its end, as torchelastic's agent monitors its workers: observe (the exit
status, the heartbeats, the logs), record (progress, checkpoints, the hang window), decide, and
return how it ended as a value (``outcomes``). What ends the attempt stops it first."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.launch.plan import attempt_dir_of
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.attempt_files import RANKS_FILE
from fsdp_orch.observe.stacks import StackCapture, default_library_roots
from fsdp_orch.places.private import write_private
from fsdp_orch.record.event_types import STRAGGLER
from fsdp_orch.record.hang_hold import HOLD_EVERY_S, write_hold
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.live_progress import LIVE_EVERY_S
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
from fsdp_orch.supervise.hang_window import Window, hang_window
from fsdp_orch.supervise.logfollow import COMMUNICATION, LogFollower
from fsdp_orch.supervise.outcomes import Adopt, Cancelled, Failed, Outcome, Succeeded, TornDown
from fsdp_orch.supervise.progress_events import ProgressEvents
from fsdp_orch.supervise.stragglers import Straggler, StragglerWatch
from fsdp_orch.supervise.teardown import (
    TEARDOWN_WINDOW_S,
    PastTheEnd,
    past_the_end,
    returned_step,
    teardown_place,
)
from fsdp_orch.supervise.watchdog import (
    HangVerdict,
    Hold,
    judge,
    scripts_finished_at,
    silent_hold,
)
from fsdp_orch.vocab.categories import SIGNAL_ENDINGS, FailureCategory

STOP_GRACE_S = 5.0
# A lost peer is usually the symptom of a rank that died first: after a communication error the
# supervisor gives torchrun this long to report which rank failed first.
SETTLE_S = 5.0
REFUSED_CONNECTIONS = "refused_connections"  # the notice of strangers at the node channel
NODE_TMP_TAKEN = "node_tmp_taken"  # a node's /tmp/fsdp-orch-<uid> was someone else's
STRANGERS_NOTICE_S = 30.0
PAUSE_WORTH_SAYING_S = 5.0  # a node silent this long and heard again: said (node_heard_again)


def node_lost_instead(diagnosis: Diagnosis, handle: AttemptHandle) -> Diagnosis:
    """A peer lost or a process killed may be a node that died: when the kind finds one that stopped
    answering, that is the failure (the survivors' errors only echo it)."""
    if diagnosis.category not in (*COMMUNICATION, "hang", "unknown", "preemption_or_node_lost"):
        return diagnosis
    lost = handle.lost_node()
    if lost is None:
        return diagnosis
    return Diagnosis("preemption_or_node_lost", True, lost)


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
        self._silent: dict[int, float] = {}  # the nodes silent at the last look, for how long
        self._strangers_noted, self._strangers_noted_at = 0, float("-inf")
        self._nodes_noted: set[int] = set()
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
        self._placed = False  # ranks.json written
        # why the hang rule holds its verdict back, as last written for status (None: nothing
        # held), and when
        self._hold: Hold | None = None
        self._hold_written_at = float("-inf")
        progress.begin(self.follower)

    def run(self) -> Outcome:
        outcome = self._watch()
        if isinstance(outcome, Failed):
            return replace(outcome, lost_hosts=outcome.lost_hosts or self.handle.lost_hosts())
        return outcome

    def _watch(self) -> Outcome:
        watch = self.sub.job.watch
        settling_since: float | None = None
        first_step_seen = self._stepped
        ranks_seen: set[int] = set()
        while True:
            if self.looked is not None:
                self.looked(self.attempt)
            code = self.handle.poll()
            beats = self.handle.heartbeats()
            ranks_seen.update(beats)
            window = hang_window(watch, beats)
            if not first_step_seen and any(b.state != "starting" for b in beats.values()):
                first_step_seen = True
                self.journal.first_step(self.attempt, min(b.progress_time for b in beats.values()
                                                          if b.state != "starting"))
            self.progress.progress(beats, window)
            self.checkpoints.record()
            if beats or self.clock() >= self._reconnecting_until:
                self.progress.hang_detection(beats, self.started, watch)
            self._note_strangers()
            self._note_nodes()
            self._note_straggler(beats)
            self._note_placement(beats)
            finished_at = scripts_finished_at(beats, self.world)
            self._returned_step = returned_step(beats) or self._returned_step
            if code is None and finished_at is None and self._replace_now():
                return self._replace_straggler()
            if code is not None:
                return self._at_exit(code, beats, ranks_seen, finished_at)
            cause = self.follower.poll()
            if cause is not None and finished_at is not None and cause.category in SIGNAL_ENDINGS:
                # every script returned: a signal now is the teardown's, judged at the exit
                cause = None
            if cause is not None:
                self.progress.progress(beats, window, final=True)
                # A lost peer is often the symptom of a rank that died first; a rank's signal may
                # come after its script returned, with the "done" of every rank still on its way
                # from the node agents (a 20-step job's abort at exit was judged a crash under
                # load): both settle until the exit, at most SETTLE_S.
                if cause.category not in COMMUNICATION | SIGNAL_ENDINGS:
                    return self._fail(cause, None)
                settling_since = settling_since if settling_since is not None else self.clock()
                if self.clock() - settling_since >= SETTLE_S:
                    return self._fail(cause, None)
                self.sleep(min(watch.poll_interval, 0.5))
                continue
            if finished_at is not None and self.clock() - finished_at > watch.startup_timeout:
                return self._teardown_hang(finished_at)
            detected_at = self.clock()
            silent = self._silent_nodes()
            found = None if silent else judge(
                beats, world_size=self.world, attempt_started=self.started, now=detected_at,
                watch=watch, window=window.seconds)
            verdict = found if isinstance(found, HangVerdict) else None
            self._record_hold(silent_hold(silent, detected_at, watch) if silent
                              else found if isinstance(found, Hold) else None, detected_at)
            past = past_the_end(beats, self.world, detected_at, watch)
            if past is not None and (verdict is not None
                                     or detected_at - past.since > TEARDOWN_WINDOW_S):
                torn = self._stuck_after_the_end(past, beats, window)
                if torn is not None:
                    return torn
            if verdict is not None:
                return self._hang(verdict, beats, window, detected_at)
            if self.cancel_requested():
                self._stop()
                return Cancelled()
            # A short window is judged at least 4 times over:
            # a verdict comes within a quarter of it.
            self._sleep_keeping_the_step_live(min(watch.poll_interval, window.seconds / 4))

    def _record_hold(self, hold: Hold | None, now: float) -> None:
        """Why the verdict is held back (``record.hang_hold``), for ``status``: written as the rule
        or its subject changes, and every HOLD_EVERY_S while only its deadline moves."""
        before = self._hold
        if hold == before:
            return
        same_rule = (hold is not None and before is not None
                     and (hold.rule, hold.rank, hold.subject, hold.since)
                     == (before.rule, before.rank, before.subject, before.since))
        if same_rule and now - self._hold_written_at < HOLD_EVERY_S:
            return
        self._hold, self._hold_written_at = hold, now
        write_hold(str(self.sub.run_dir), self.attempt, None if hold is None else hold.to_json())

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

    def _stop(self) -> None:
        self.handle.stop(STOP_GRACE_S)
        self.journal.end_attempt(self.attempt, self.handle.poll(), now=self.clock())

    def _fail(self, diagnosis: Diagnosis, stalled: float | None,
              detected_at: float | None = None) -> Failed:
        now = self.clock() if detected_at is None else detected_at
        diagnosis = node_lost_instead(diagnosis, self.handle)
        self._stop()
        return Failed(with_flight_recorder(diagnosis, self.handle.flight_recorder_dumps()), now,
                      stalled, self.before, self.checkpoints.step(),
                      returned_step=self._returned_step)

    def _at_exit(self, code: int, beats: dict, ranks_seen: set[int],  # type: ignore[type-arg]
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
        cause = node_lost_instead(cause, self.handle)
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

    def _stuck_after_the_end(self, past: PastTheEnd, beats: dict,  # type: ignore[type-arg]
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

    def _hang(self, verdict: HangVerdict, beats: dict, window: Window,  # type: ignore[type-arg]
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
        return self._fail(Diagnosis("hang", True, explained.evidence), verdict.stalled_for_s,
                          detected_at)

    def _note_straggler(self, beats: dict) -> None:  # type: ignore[type-arg]
        """A rank the others keep waiting for, named once (``supervise.stragglers``); under
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

    def _note_placement(self, beats: dict) -> None:  # type: ignore[type-arg]
        """Which node each rank runs on, once all are known, in the attempt's ``ranks.json``
        (``logs --rank``): torchrun's c10d rendezvous need not give node N ranks N*procs..."""
        if self._placed or len(beats) < self.world or any(b.node is None for b in beats.values()):
            return
        self._placed = True
        placed = {str(rank): beat.node for rank, beat in sorted(beats.items())}
        try:  # the supervisor's own view of the run folder (SSH hosts' own disks have theirs)
            write_private(os.path.join(attempt_dir_of(str(self.sub.run_dir), self.attempt),
                                       RANKS_FILE), json.dumps({"nodes": placed}) + "\n")
        except OSError:
            pass  # logs --rank then takes the launcher's order

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

    def _note_nodes(self) -> None:
        """Each node's note from its launch script, once (``node_tmp_taken``)."""
        for node, note in sorted(self.handle.node_notes().items()):
            if node not in self._nodes_noted:
                self._nodes_noted.add(node)
                self.journal.add_event(attempt=self.attempt, kind=NODE_TMP_TAKEN,
                                       message=f"node {node}: node-local folder taken: {note}")

    def _note_strangers(self) -> None:
        """A notice when connections that never said the token were refused since the last one:
        counts only, at most one a STRANGERS_NOTICE_S (a flood is one line, not a thousand)."""
        refused = self.handle.refused_connections()
        total = sum(refused.values())
        now = self.clock()
        if total <= self._strangers_noted or now - self._strangers_noted_at < STRANGERS_NOTICE_S:
            return
        counts = ", ".join(f"{n} {why}" for why, n in refused.items() if n)
        self.journal.add_event(attempt=self.attempt, kind=REFUSED_CONNECTIONS, message=(
            f"{total} connection(s) to the node channel refused so far, none of them having said "
            f"this attempt's token ({counts}); what they sent was dropped unread"))
        self._strangers_noted, self._strangers_noted_at = total, now

    def _silent_nodes(self) -> dict[int, float]:
        """The nodes whose channel is silent (``handle.silent_nodes``): while any is, the hang rule
        waits; such a node is heard again or found lost (``poll``) within the node timeout. Each
        silence is recorded once, as it begins."""
        silent = self.handle.silent_nodes()
        if silent and not self._silent:
            nodes = ", ".join(f"node {n} for {s:.1f}s" for n, s in sorted(silent.items()))
            self.journal.add_event(attempt=self.attempt, kind="node_silent", message=(
                f"no word from {nodes}: its ranks' heartbeats come through it, "
                "so no hang is judged until it is heard again or found lost"))
        for node in sorted(n for n in set(self._silent) - set(silent)
                           if self._silent[n] >= PAUSE_WORTH_SAYING_S):
            # heard again before the node timeout: paused (a VM pause, a live migration, a stall
            # of the host), not lost
            self.journal.add_event(attempt=self.attempt, kind="node_heard_again", message=(
                f"node {node} heard again after about {self._silent[node]:.0f}s of silence, within "
                f"the node timeout ({self.sub.job.watch.node_timeout:g}s): paused, not lost"))
        self._silent = dict(silent)
        return silent

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
        return Failed(Diagnosis("no_ranks_started", False, evidence), self.clock(), None,
                      self.before, self.checkpoints.step())
