"""The supervisor's live step file (fsdp_orch.record.live_progress): written privately, read only
when well formed, and folded into a running job's status only for its current attempt and only
ahead of what the event log said."""

from __future__ import annotations

import json
import os

from fsdp_orch.record import event_types
from fsdp_orch.record.fold import fold
from fsdp_orch.record.live_progress import LIVE_FILE, apply_live, read_live, write_live
from fsdp_orch.record.status import JobStatus

T0 = 1_700_000_000.0


def running(*events: event_types.Event) -> JobStatus:
    status = fold([event_types.Submitted(at=T0, job="j1", name="demo", cluster="local",
                                         run_dir="/runs/j1", spec_json="{}"),
                   event_types.AttemptStarted(at=T0 + 1, attempt=0), *events], "j1")
    assert isinstance(status, JobStatus)
    return status


def test_the_file_is_private_and_read_back(tmp_path):
    write_live(str(tmp_path), attempt=0, step=65, loss=2.5, loss_source="runtime",
               progress_at=T0 + 7.0, loss_step=64)
    assert os.stat(tmp_path / LIVE_FILE).st_mode & 0o777 == 0o600
    assert read_live(str(tmp_path)) == {"attempt": 0, "step": 65, "loss": 2.5,
                                        "loss_source": "runtime", "loss_step": 64,
                                        "progress_at": T0 + 7.0, "quiet": None,
                                        "active_at": None}


def test_a_torn_or_odd_file_is_not_read(tmp_path):
    assert read_live(str(tmp_path)) is None
    for text in ('{"attempt": 0, "step": 6', "[]", json.dumps({"attempt": "0", "step": 1,
                                                               "progress_at": 1.0}),
                 json.dumps({"attempt": 0, "step": True, "progress_at": 1.0})):
        (tmp_path / LIVE_FILE).write_text(text)
        assert read_live(str(tmp_path)) is None, text


def test_the_live_step_moves_status_ahead_of_the_throttled_log():
    status = running(event_types.Progress(at=T0 + 2, step=10, progress_at=T0 + 2))
    live = {"attempt": 0, "step": 75, "loss": 1.5, "loss_source": "runtime",
            "progress_at": T0 + 7.0}
    assert apply_live(status, live)
    assert (status.progress_step, status.progress_loss, status.stepped_at) == (75, 1.5, T0 + 7.0)
    assert status.step_seconds[-1] == 5.0 / 65  # the step time follows it too
    assert status.stalled_for_s(T0 + 8.0) is None  # a stepping job is not stalled
    assert not apply_live(status, {**live, "step": 70})  # behind what status has: left alone


def test_another_attempts_or_an_ended_jobs_live_step_is_not_folded():
    status = running(event_types.Progress(at=T0 + 2, step=10, progress_at=T0 + 2))
    assert not apply_live(status, {"attempt": 1, "step": 75, "progress_at": T0 + 7.0})
    ended = running(event_types.StateChanged(at=T0 + 3, state="SUCCEEDED"))
    assert not apply_live(ended, {"attempt": 0, "step": 75, "progress_at": T0 + 7.0})


def test_the_supervisor_refreshes_the_live_step_between_its_looks(tmp_path):
    """Between two looks of the watch loop (1 s apart), ``ProgressEvents.live`` writes rank 0's step
    as it changes, at most every LIVE_EVERY_S: status's STEP trailed the ranks by up to 1.55 s
    when the file was written only at the looks (bench/status_truth.py; now 1.07 s idle)."""
    from fsdp_orch.observe.heartbeats import Heartbeat
    from fsdp_orch.record.live_progress import LIVE_EVERY_S
    from fsdp_orch.supervise.progress_events import ProgressEvents

    now = [100.0]
    events = ProgressEvents(journal=None, clock=lambda: now[0], run_dir=str(tmp_path))  # type: ignore[arg-type]

    def beats(step: int, state: str = "training") -> dict[int, Heartbeat]:
        return {0: Heartbeat(rank=0, attempt=1, step=step, loss=0.5, time=now[0], state=state,
                             pid=7)}

    events.live(beats(0, "starting"))
    assert read_live(str(tmp_path)) is None  # no step taken yet
    events.live(beats(5))
    assert read_live(str(tmp_path))["step"] == 5
    now[0] += LIVE_EVERY_S / 2
    events.live(beats(6))
    assert read_live(str(tmp_path))["step"] == 5  # at most every LIVE_EVERY_S
    now[0] += LIVE_EVERY_S
    events.live(beats(9))
    live = read_live(str(tmp_path))
    assert (live["attempt"], live["step"], live["loss"]) == (1, 9, 0.5)


def test_a_job_whose_ranks_save_or_shut_down_is_not_stalled():
    """r13 of the suite sampled ``RUNNING (stalled 3.0s)`` at the demo's last step while its ranks
    shut down: a rank that returned from its script, or one saving, is progress the step does not
    show. After a save the stall counts from its end, not from the last step."""
    from fsdp_orch.cli.status_table import format_jobs

    status = running(event_types.Progress(at=T0 + 2, step=150, progress_at=T0 + 2),
                     event_types.HangWindow(at=T0 + 2, window_s=6.0, mode="adaptive"))
    assert status.stalled_for_s(T0 + 10) == 8.0  # the control: no word from the ranks
    live = {"attempt": 0, "step": 150, "progress_at": T0 + 2, "quiet": "finishing",
            "active_at": T0 + 3}
    assert apply_live(status, live)
    assert status.stalled_for_s(T0 + 60) is None
    assert "RUNNING (finishing)" in format_jobs([status], now=T0 + 60)

    saving = running(event_types.Progress(at=T0 + 2, step=100, progress_at=T0 + 2),
                     event_types.HangWindow(at=T0 + 2, window_s=6.0, mode="adaptive"))
    assert apply_live(saving, {"attempt": 0, "step": 100, "progress_at": T0 + 2,
                               "quiet": "saving", "active_at": T0 + 2.5})
    assert saving.stalled_for_s(T0 + 30) is None
    assert "RUNNING (saving)" in format_jobs([saving], now=T0 + 30)
    assert apply_live(saving, {"attempt": 0, "step": 100, "progress_at": T0 + 2,
                               "quiet": None, "active_at": T0 + 30})  # the save ended at T0+30
    assert saving.stalled_for_s(T0 + 31) is None
    assert saving.stalled_for_s(T0 + 40) == 10.0
    assert not apply_live(saving, {"attempt": 0, "step": 100, "progress_at": T0 + 2,
                                   "quiet": None, "active_at": T0 + 30})  # nothing new


def test_the_supervisor_writes_a_returned_rank_at_once(tmp_path):
    """The live file is throttled to LIVE_EVERY_S for steps, not for a rank that returned from its
    script: status must not call the teardown a stall for want of a write."""
    from fsdp_orch.observe.heartbeats import Heartbeat
    from fsdp_orch.supervise.progress_events import ProgressEvents

    now = [100.0]
    events = ProgressEvents(journal=None, clock=lambda: now[0], run_dir=str(tmp_path))  # type: ignore[arg-type]

    def beat(rank: int, state: str, at: float) -> Heartbeat:
        return Heartbeat(rank=rank, attempt=0, step=150, loss=0.5, time=at, state=state, pid=7,
                         progress_at=at)

    events.live({0: beat(0, "training", 99.0), 1: beat(1, "training", 99.0)})
    now[0] += 0.1
    events.live({0: beat(0, "training", 99.0), 1: beat(1, "done", 100.1)})
    live = read_live(str(tmp_path))
    assert (live["step"], live["quiet"], live["active_at"]) == (150, "finishing", 100.1)


class _Lines:
    """A log follower's loss lines, handed over as the supervisor takes them."""

    def __init__(self) -> None:
        self.points: list[tuple[float, str, int | None]] = []
        self.loss = None

    def take_loss_points(self) -> list[tuple[float, str, int | None]]:
        points, self.points = self.points, []
        return points


def _steps_shown(tmp_path, resumed_at, looks):  # type: ignore[no-untyped-def]
    """The live step after each look: (rank 0's counted step, the step of a line read with it[,
    rank 0's state])."""
    from fsdp_orch.observe.heartbeats import Heartbeat
    from fsdp_orch.record.live_progress import LIVE_EVERY_S
    from fsdp_orch.supervise.progress_events import ProgressEvents

    now = [100.0]
    lines = _Lines()
    events = ProgressEvents(journal=None, clock=lambda: now[0], run_dir=str(tmp_path))  # type: ignore[arg-type]
    events.begin(lines, resumed_at=resumed_at)  # type: ignore[arg-type]
    shown = []
    for counted, named, *state in looks:
        if named is not None:
            lines.points.append((0.5, "print", named))
        now[0] += LIVE_EVERY_S
        events.live({0: Heartbeat(rank=0, attempt=1, step=counted, loss=None, time=now[0],
                                  state=state[0] if state else "training", pid=7)})
        shown.append(read_live(str(tmp_path))["step"])
    return shown


def test_a_line_read_before_its_steps_heartbeat_does_not_carry_the_step_past_the_end(tmp_path):
    """Resumed by the supervisor from step 40, the ranks count from 40: the script's last line
    ("step 60/60") reached the supervisor while rank 0's heartbeat still said 57 (the node agent
    sends the console as it grows, a summary once a second). The step shown stays 60 when the
    heartbeat catches up; it read 61 and 43 in two clean-clone CI runs."""
    assert _steps_shown(tmp_path, 40, [(57, 60), (60, None)]) == [60, 60]


def test_a_script_that_resumed_on_its_own_is_shown_at_its_own_step(tmp_path):
    """No checkpoint the supervisor knows: the bootstrap counts from 0 and the script's lines
    (from step 100 on) say how far ahead its own count is. Between lines the step follows rank 0's
    count, never past the script's own (rank 0 may have stepped on since a line was printed: 110
    at a count of 12 is a lead of 98 at least), and it ends at the script's last step."""
    looks = [(10, 110), (12, None), (20, 120), (25, None), (30, 130), (40, 140), (40, 140, "done")]
    assert _steps_shown(tmp_path, None, looks) == [110, 110, 120, 123, 130, 140, 140]


def test_lines_read_before_their_steps_heartbeats_do_not_carry_a_run_past_its_end(tmp_path):
    """Not resumed by the supervisor: each line ("step 10/25", "step 20/25", "step 25/25") reached
    it while rank 0's heartbeat still said the step before. The lead read beside them is 1 each
    time, but rank 0's next count (and its final one) shows none: a 25-step run ends at 25 (it
    ended at 26 in the official CI of 9e3513b)."""
    looks = [(9, 10), (10, None), (19, 20), (21, None), (24, 25), (25, None, "done")]
    assert _steps_shown(tmp_path, None, looks)[-1] == 25
    assert max(_steps_shown(tmp_path, None, looks)) == 25
