"""What the supervisor records of a running attempt's progress, throttled: rank 0's step and loss,
the hang window in force, and whether hang detection is off for lack of any signal.

The step is the one the script reached: rank 0's counted optimizer steps, moved on by as much as
the script's own loss lines (``step 180 loss 0.41``) are ahead of them (a script that resumed on its
own from a save fsdp-orch does not know counts from its save, the bootstrap from 0). A line often
reaches the supervisor before the heartbeat of its step (the node agent sends the console as it
grows, a summary of the ranks once a second): the lead read beside it is then too large, and one
made a finished 60-step run end at step 61, a 40-step one at 43 and a 25-step one at 26 (clean-clone
CIs). So a line's lead is settled against rank 0's next changed count, or its final one, which
were taken after the line was printed: a lead never above the script's own, and exact at the end
when the script prints its last step. Before a line is settled its raw lead stands in. Where this
supervisor resumed the attempt from a checkpoint of known step, the count starts there and no lead
is taken. Each loss goes with its own step: the one its line names, else rank 0's when it was read,
as in ``losses.jsonl``. An attempt whose ranks returned from their script without a step says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fsdp_orch.decide.hang_window import Window, moved
from fsdp_orch.decide.watchdog import no_signal
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.record.event_types import RUNTIME_LOSS, finite
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.live_progress import LIVE_EVERY_S, write_live
from fsdp_orch.record.loss_points import LossLog
from fsdp_orch.supervise.logfollow import LogFollower
from fsdp_orch.vocab.metrics import CHECKPOINT_BLOCK_S
from fsdp_orch.vocab.states import HeartbeatState

# the notice of an attempt whose ranks returned from their script without a step
NO_STEPS_TRAINED = "no_steps_trained"
PROGRESS_EVERY_S = 5.0  # progress events: the first step at once, then at most one per this
DEVICE_PEAK_GROWTH = 1.01  # a device peak is recorded again once it grew by more than 1%


class ProgressEvents:
    """One per supervisor; ``begin`` at each attempt."""

    def __init__(self, journal: Journal, clock: Callable[[], float], run_dir: str | None = None):
        """``run_dir``: where the live step goes (``record.live_progress``); None: nowhere."""
        self.journal = journal
        self.clock = clock
        self.run_dir = run_dir
        # (attempt, step, quiet, active_at) last written to the live file
        self._live: tuple[int, int, str | None, float] | None = None
        self._live_at = float("-inf")
        self._last_step: int | None = None  # the progress last recorded for the running attempt
        self._last_loss: float | None = None
        self._progress_at = 0.0  # when it was recorded (the supervisor's clock)
        self._follower: LogFollower | None = None  # the running attempt's: its console loss
        self._window: Window | None = None  # the hang window last recorded for the running attempt
        self._hang_detection_off: str | None = None
        self.losses = LossLog(run_dir, clock)  # every loss logged, for the report's curve
        self._lead_seen: tuple[int, int] | None = None  # rank 0's (attempt, step) last seen
        self._device_peak = 0  # the running attempt's device peak last recorded (bytes)
        self.reached: int | None = None  # the highest step rank 0 reported in the running attempt
        # the running attempt's latest console loss: (its step, loss, format); None: none yet
        self._printed: tuple[int, float, str] | None = None
        # how far the script's own step is ahead of rank 0's counted steps: the most settled (each
        # never above it), else the least raw one (a line read beside a lagging heartbeat shows
        # more); the lines not settled yet, (the step each named, rank 0's count when it was read);
        # and the step the latest line named
        self._settled: int | None = None
        self._raw: int | None = None
        self._unsettled: list[tuple[int, int]] = []
        self._named: int | None = None
        self._lead_last: Any = None  # rank 0's heartbeat at the last look
        self._attempt: int | None = None  # the running attempt, once a rank reported
        self._trained = False  # a rank took a step in the running attempt
        self._returned = False  # a rank returned from its script in the running attempt
        self._counts_from_resume = False  # the ranks count from the resumed checkpoint's step

    def begin(self, follower: LogFollower, resumed_at: int | None = None) -> None:
        """``resumed_at``: the step of the checkpoint this supervisor resumed the attempt from,
        where known (the ranks count from it); None: from a save it does not know, or none."""
        self._follower, self._lead_seen = follower, None
        self._counts_from_resume = resumed_at is not None
        self._window, self._last_step, self._last_loss = None, None, None
        self._device_peak = 0
        self.reached = None
        self._printed, self._named, self._lead_last = None, None, None
        self._settled, self._raw, self._unsettled = None, None, []
        self._attempt, self._trained, self._returned = None, False, False

    def end_attempt(self) -> None:
        """The attempt's last printed losses (its logs' last lines are read at its end) into the
        loss log, the log written, and the step and loss they show recorded; a notice when its
        ranks returned from their script without a step."""
        if self._lead_seen is not None:
            self._log_printed(*self._lead_seen)
        self.losses.flush(final=True)
        lead = self._lead_last
        if lead is not None:
            step = self._step(lead)
            loss, source, loss_step = self._loss(lead, step)
            if (step, loss) != (self._last_step, self._last_loss):
                self._last_step, self._last_loss = step, loss
                self.journal.progress(step, loss, lead.progress_time, loss_source=source,
                                      loss_step=loss_step)
        if self._attempt is not None and self._returned and not self._trained:
            self.journal.add_event(attempt=self._attempt, kind=NO_STEPS_TRAINED, message=(
                f"attempt {self._attempt} trained no step: its ranks returned from their script "
                "without an optimizer step (a script that resumes on its own, at its last step, "
                "from saves fsdp-orch does not know trains nothing; submit --fresh moves only the "
                "checkpoints of checkpoint.dir)"))

    def progress(self, beats: dict, window: Window,  # type: ignore[type-arg]
                 final: bool = False) -> None:
        """Rank 0's step and the latest loss (the runtime's in its heartbeat, else the one its
        console printed last), when either changed; and the hang window in force."""
        lead = self._lead(beats)
        if lead is None:
            return
        if isinstance(lead.step, int):
            self.reached = lead.step if self.reached is None else max(self.reached, lead.step)
        self._record_window(lead.attempt, window)
        self._record_device_peak(lead.attempt, beats)
        self._log_losses(lead)
        step = self._step(lead)
        loss, source, loss_step = self._loss(lead, step)
        self._write_live(lead, step, (loss, source, loss_step), final, beats)
        self.losses.flush(final)
        if step == self._last_step and loss == self._last_loss:
            return
        if (not final and self._last_step is not None
                and self.clock() - self._progress_at < PROGRESS_EVERY_S):
            return  # the event log is on the shared filesystem: a line per PROGRESS_EVERY_S at most
        self._last_step, self._last_loss, self._progress_at = step, loss, self.clock()
        blocked = lead.metrics.get(CHECKPOINT_BLOCK_S)
        self.journal.progress(step, loss, lead.progress_time, loss_source=source,
                              checkpoint_s=(float(blocked) if isinstance(blocked, (int, float))
                                            else None), loss_step=loss_step)

    def live(self, beats: dict) -> None:  # type: ignore[type-arg]
        """Only the live file, between two of the loop's looks: ``status`` reads the step from it,
        and the loop looks once per ``watch.poll_interval`` (1 s)."""
        lead = self._lead(beats)
        if lead is not None:
            self._log_losses(lead)
            step = self._step(lead)
            self._write_live(lead, step, self._loss(lead, step), final=False, beats=beats)

    def _log_losses(self, lead: Any) -> None:
        """Each loss the script printed since the last look, at the step its line names (else
        rank 0's now); the runtime's heartbeat loss where the console shows none."""
        self._lead_seen = (lead.attempt, lead.step)
        printed = self._log_printed(lead.attempt, lead.step)
        if not printed and (self._follower is None or self._follower.loss is None):
            self.losses.point(lead.attempt, lead.step, finite(lead.loss), RUNTIME_LOSS)

    def _log_printed(self, attempt: int, step_now: int) -> bool:
        """Each console loss read since the last look into the loss log, at the step its line
        names (else ``step_now``, rank 0's counted step); the latest kept as the attempt's, and
        how far the script's own count is ahead of rank 0's."""
        printed = self._follower.take_loss_points() if self._follower is not None else []
        for loss, source, step in printed:
            at = self._step_at(step_now) if step is None else step
            self.losses.point(attempt, at, loss, source)
            if step is not None:
                if not self._counts_from_resume:
                    raw = max(0, step - step_now)
                    self._raw = raw if self._raw is None else min(self._raw, raw)
                    self._unsettled.append((step, step_now))
                self._named = step
            if finite(loss) is not None:
                self._printed = (at, float(loss), source)
        return bool(printed)

    def _lead(self, beats: dict) -> Any:  # type: ignore[type-arg]
        """Rank 0's heartbeat (else the first one), once it has stepped (or returned from its
        script after a step); else None. Notes whether the attempt's ranks stepped or returned."""
        if not beats:
            return None
        states = {beat.state for beat in beats.values()}
        self._attempt = next(iter(beats.values())).attempt
        # an attempt that ran all its steps between two looks is seen only done, with its steps
        self._trained = self._trained or HeartbeatState.TRAINING in states \
            or HeartbeatState.SAVING in states or any(
                beat.state == HeartbeatState.DONE and isinstance(beat.step, int) and beat.step > 0
                for beat in beats.values())
        self._returned = self._returned or HeartbeatState.DONE in states
        lead = beats.get(0) or next(iter(beats.values()))
        if lead.state == HeartbeatState.STARTING or (lead.state == HeartbeatState.DONE
                                                     and not self._trained):
            return None
        self._lead_last = lead
        return lead

    def _step(self, lead: Any) -> int:
        self._settle(int(lead.step), final=lead.state == HeartbeatState.DONE)
        return self._step_at(int(lead.step))

    def _settle(self, counted: int, final: bool) -> None:
        """The leads of the lines read before rank 0's count moved past the one read beside them
        (or reached its final value): ``counted`` was taken after each was printed."""
        waiting = []
        for named, read_beside in self._unsettled:
            if final or counted != read_beside:
                lead = max(0, named - counted)
                self._settled = lead if self._settled is None else max(self._settled, lead)
            else:
                waiting.append((named, read_beside))
        self._unsettled = waiting

    def _step_at(self, counted: int) -> int:
        """The step the script reached: rank 0's ``counted``, moved on by its own count's lead,
        and never behind the step its latest loss line named."""
        ahead = self._settled if self._settled is not None else self._raw
        return max(counted + (ahead or 0), self._named or 0)

    def _loss(self, lead: Any, step: int) -> tuple[float | None, str, int | None]:
        """The runtime's loss in the heartbeat (at ``step``), else the one the console printed
        last, each with the step it belongs to."""
        loss = finite(lead.loss)
        if loss is not None:
            return loss, RUNTIME_LOSS, step
        if self._printed is not None:
            at, printed, source = self._printed
            return printed, source, at
        return None, RUNTIME_LOSS, None

    def _write_live(self, lead: Any, step: int,
                    loss: tuple[float | None, str, int | None], final: bool,
                    beats: dict) -> None:  # type: ignore[type-arg]
        """The step into the live file as it or any rank's progress changes, at most every
        LIVE_EVERY_S; at once when the ranks begin or end a save or return from their script."""
        now = self.clock()
        quiet = quiet_state(beats)
        seen = (lead.attempt, step, quiet, max(b.progress_time for b in beats.values()))
        if self.run_dir is None or self._live == seen:
            return
        told = self._live is not None and self._live[2] == quiet
        if not final and told and now - self._live_at < LIVE_EVERY_S:
            return
        self._live, self._live_at = seen, now
        write_live(self.run_dir, attempt=lead.attempt, step=step, loss=loss[0],
                   loss_source=loss[1], progress_at=lead.progress_time, quiet=quiet,
                   active_at=seen[3], loss_step=loss[2])

    def _record_window(self, attempt: int, window: Window) -> None:
        """The hang window in force once the attempt steps, recorded when it first applies, when its
        mode changes (warm-up to adaptive) and when it moves by more than a fifth (the adaptive
        window follows the ranks' step times)."""
        if not moved(self._window, window):
            return
        self._window = window
        self.journal.hang_window(attempt, window.seconds, window.mode)

    def _record_device_peak(self, attempt: int, beats: dict) -> None:  # type: ignore[type-arg]
        """The most accelerator memory any rank held in tensors (``device_peak``), recorded when
        it first shows and when it grows by more than DEVICE_PEAK_GROWTH."""
        peak, rank = max(((b.device_peak or 0, r) for r, b in beats.items()), default=(0, 0))
        if peak > self._device_peak * DEVICE_PEAK_GROWTH:
            self._device_peak = peak
            self.journal.device_peak(attempt, rank, peak)

    def hang_detection(self, beats: dict, started: float,  # type: ignore[type-arg]
                       watch: Watch) -> None:
        """``status`` says when hang detection is off for lack of any signal, and why."""
        why = no_signal(beats, attempt_started=started, now=self.clock(), watch=watch)
        if why is not None and self._hang_detection_off != why:
            self._hang_detection_off = why
            self.journal.hang_detection(why)
        elif beats and self._hang_detection_off is not None:
            self._hang_detection_off = None
            self.journal.hang_detection(None)


def quiet_state(beats: dict) -> str | None:  # type: ignore[type-arg]
    """Why the attempt takes no step and none is due: "finishing" once a rank has returned from
    its script (its heartbeat says done), "saving" while a rank saves; else None."""
    states = {beat.state for beat in beats.values()}
    return ("finishing" if HeartbeatState.DONE in states
            else "saving" if HeartbeatState.SAVING in states else None)
