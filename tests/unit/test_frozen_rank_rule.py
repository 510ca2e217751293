"""A frozen rank is judged in seconds (issue 67, part 3): the hang rule with the process state the
node's relay adds (``decide.frozen_rank``), the culprit's line, and why a verdict is held back,
as ``status`` shows it. Pure: heartbeats and the time come in."""

from __future__ import annotations

from pathlib import Path

from fsdp_orch.cli.status_table import detail_lines
from fsdp_orch.decide.frozen_rank import STOPPED_MIN_S, frozen_ranks, threshold_of
from fsdp_orch.decide.watchdog import HangVerdict, Hold, check_hang, judge, silent_hold
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.stack_parse import Frame, ThreadStack
from fsdp_orch.observe.stacks import StackCapture, StackDump
from fsdp_orch.record.hang_hold import hold_text, read_hold, write_hold
from fsdp_orch.record.live_progress import apply_live, read_live, write_live
from fsdp_orch.record.status import JobStatus
from fsdp_orch.supervise.hang_evidence import explain_hang

DEFAULTS = Watch()  # heartbeat_timeout 300 s, node_timeout 30 s
WINDOW = 2.0  # the adaptive window's floor: a job that steps faster than 0.2 s
T = 1_000.0  # rank 1 froze at step 57, at T


def waiting(rank: int, now: float, step: int = 57) -> Heartbeat:
    """A rank waiting in a collective: its file rewritten, no Python since it entered the wait."""
    return Heartbeat(rank=rank, attempt=0, step=step, loss=1.0, time=now - 0.2, state="training",
                     pid=100 + rank, progress_at=T - 0.1, python_at=T + 0.05)


def frozen(rank: int, state: str = "T", since: float = T + 0.8, step: int = 57,
           pid: int = 4242) -> Heartbeat:
    """A frozen rank: its file last written as it froze (held), its state as the relay read it."""
    return Heartbeat(rank=rank, attempt=0, step=step, loss=1.0, time=T, state="training", pid=pid,
                     progress_at=T - 0.1, python_at=T, held_since=T, proc_state=state,
                     proc_state_since=since)


def held(rank: int) -> Heartbeat:
    """A rank whose file stands still while its process is not frozen (the interpreter held)."""
    return Heartbeat(rank=rank, attempt=0, step=57, loss=1.0, time=T, state="training", pid=4242,
                     progress_at=T - 0.1, python_at=T, held_since=T)


def at(now: float, beats: dict[int, Heartbeat], watch: Watch = DEFAULTS,
       window: float = WINDOW) -> HangVerdict | Hold | None:
    return judge(beats, world_size=len(beats), attempt_started=0.0, now=now, watch=watch,
                 window=window)


def test_a_stopped_rank_whose_peer_waits_is_judged_past_the_minimum_not_the_ceiling():
    now = T + 0.8 + STOPPED_MIN_S - 0.1
    early = at(now, {0: waiting(0, now), 1: frozen(1)})
    assert isinstance(early, Hold) and early.rule == "frozen" and early.rank == 1
    assert early.until == T + 0.8 + STOPPED_MIN_S
    assert early.subject == "rank 1 (pid 4242) stopped (state T: SIGSTOP or a debugger)"
    now = T + 0.8 + STOPPED_MIN_S + 0.1
    verdict = at(now, {0: waiting(0, now), 1: frozen(1)})
    assert isinstance(verdict, HangVerdict) and verdict.suspects[0] == 1
    assert verdict.frozen == {1: "rank 1 (pid 4242) is stopped (state T: SIGSTOP or a debugger) "
                                 "for 5.1s"}
    assert ("rank 1 last reported step 57, its process (pid 4242) stopped (state T: SIGSTOP or a "
            "debugger) for 5.1s") in verdict.evidence


def test_a_stopped_rank_is_first_even_when_a_peer_reported_a_lower_step():
    now = T + 10
    verdict = at(now, {0: waiting(0, now, step=56), 1: frozen(1, step=57)})
    assert isinstance(verdict, HangVerdict) and verdict.suspects == [1, 0]


def test_the_window_rules_when_it_is_longer_than_the_minimum():
    assert threshold_of("T", 12.0, DEFAULTS) == 12.0
    assert threshold_of("t", 2.0, DEFAULTS) == STOPPED_MIN_S
    assert threshold_of("D", 2.0, DEFAULTS) == 30.0  # watch.node_timeout
    assert threshold_of("Z", 2.0, DEFAULTS) is None  # finished: never frozen
    now = T + 12.5  # past the window, stopped for 11.7 s of its 12
    assert isinstance(at(now, {0: waiting(0, now), 1: frozen(1)}, window=12.0), Hold)
    now = T + 13
    assert isinstance(at(now, {0: waiting(0, now), 1: frozen(1)}, window=12.0), HangVerdict)


def test_a_peer_that_is_busy_holds_the_verdict_back():
    now = T + 20
    busy = Heartbeat(rank=0, attempt=0, step=57, loss=1.0, time=now - 0.2, state="training",
                     pid=100, progress_at=T - 0.1, python_at=now - 0.3)  # evaluating
    hold = at(now, {0: busy, 1: frozen(1)})
    assert isinstance(hold, Hold) and hold.rule == "in_python" and hold.rank == 0
    assert check_hang({0: busy, 1: frozen(1)}, world_size=2, attempt_started=0.0, now=now,
                      watch=DEFAULTS, window=WINDOW) is None


def test_every_rank_stopped_is_a_pause_of_the_whole_job_held_to_the_ceiling():
    beats = {0: frozen(0, pid=4241), 1: frozen(1)}
    hold = at(T + 200, beats)
    assert isinstance(hold, Hold) and hold.rule == "paused"
    assert hold.until == T + 300 and "ceiling" in hold.rule_text
    assert frozen_ranks(beats, 2, T + 200, WINDOW, DEFAULTS) == {}
    assert isinstance(at(T + 300.5, beats), HangVerdict)  # the ceiling, as before


def test_a_brief_uninterruptible_sleep_is_not_judged_a_long_one_is():
    now = T + 20  # a slow write under memory reclaim: D for 19 s, no byte moved
    hold = at(now, {0: waiting(0, now), 1: frozen(1, "D")})
    assert isinstance(hold, Hold) and hold.rule == "frozen" and hold.until == T + 0.8 + 30
    now = T + 31
    verdict = at(now, {0: waiting(0, now), 1: frozen(1, "D")})
    assert isinstance(verdict, HangVerdict)
    assert "in uninterruptible sleep (state D" in verdict.frozen[1]


def test_a_done_rank_with_a_state_is_never_frozen():
    now = T + 20
    done = Heartbeat(rank=1, attempt=0, step=200, loss=1.0, time=T, state="done", pid=4242,
                     progress_at=T, proc_state="T", proc_state_since=T)
    assert frozen_ranks({0: waiting(0, now), 1: done}, 2, now, WINDOW, DEFAULTS) == {}


def test_a_held_rank_that_is_not_frozen_waits_for_the_ceiling_and_says_so():
    now = T + 40
    hold = at(now, {0: waiting(0, now), 1: held(1)})
    assert isinstance(hold, Hold) and hold.rule == "held" and hold.rank == 1
    assert (hold.subject, hold.since, hold.until) == ("no heartbeat from rank 1", T, T + 300)
    assert hold.rule_text == "held to the 300s ceiling (watch.heartbeat_timeout)"


def test_no_hold_while_no_rank_is_past_its_window():
    now = T + 1.0
    assert at(now, {0: waiting(0, now), 1: held(1)}) is None


def test_a_save_that_writes_holds_the_verdict_and_says_so():
    now = T + 40
    saving = Heartbeat(rank=0, attempt=0, step=57, loss=1.0, time=now - 0.2, state="saving",
                       pid=100, progress_at=T - 0.1, python_at=T, io_at=now - 0.4)
    hold = at(now, {0: saving, 1: waiting(1, now)})
    assert isinstance(hold, Hold) and hold.rule == "writing"
    assert hold.subject == "rank 0 in a save that writes" and hold.until == now - 0.4 + WINDOW
    assert hold.why == "a save making progress, however slow"


def test_a_rank_that_wrote_outside_a_save_holds_the_verdict_without_calling_it_a_save():
    """A rank's own per-step output, as the demo's rank 0 writes while its peer is stopped: I/O
    progress holds the verdict back for a window, and status does not say a save is running."""
    now = T + 40
    stepping = Heartbeat(rank=0, attempt=0, step=80, loss=1.0, time=now - 0.2, state="training",
                         pid=100, progress_at=T - 0.1, python_at=T, io_at=now - 0.4)
    hold = at(now, {0: stepping, 1: waiting(1, now)})
    assert isinstance(hold, Hold) and hold.rule == "writing"
    assert hold.subject == "rank 0 wrote" and "save" not in hold.why, hold


def test_a_silent_node_holds_until_heard_again_or_lost():
    hold = silent_hold({0: 4.0}, T, DEFAULTS)
    assert (hold.rule, hold.since, hold.until) == ("node_silent", T - 4.0, T - 4.0 + 30)


def dump(rank: int, *frames: Frame) -> StackDump:
    return StackDump(rank, 100 + rank, (ThreadStack(1, "MainThread", True, tuple(frames)),),
                     "py-spy", None, "")


TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def test_the_evidence_leads_with_the_frozen_rank_and_what_its_peers_wait_in():
    now = T + 6
    verdict = at(now, {0: waiting(0, now), 1: frozen(1)})
    assert isinstance(verdict, HangVerdict)
    # rank 1 was stopped inside a collective itself: still the culprit
    capture = StackCapture({0: dump(0, Frame("all_reduce", TORCH, 2800),
                                    Frame("main", "/job/train.py", 80)),
                            1: dump(1, Frame("all_reduce", TORCH, 2800),
                                    Frame("main", "/job/train.py", 80))}, "/run/stacks")
    explained = explain_hang(verdict, capture, library_roots=("/venv/lib/python3.11",))
    assert explained.evidence.startswith(
        "rank 1 (pid 4242) is stopped (state T: SIGSTOP or a debugger) for 5.2s while rank 0 "
        "waits in all_reduce at train.py:80 main; no progress for"), explained.evidence
    assert explained.order == [1, 0]
    bare = explain_hang(verdict, StackCapture({}, None, "no node agent answered with stacks"))
    assert bare.evidence.startswith("rank 1 (pid 4242) is stopped (state T: SIGSTOP or a "
                                    "debugger) for 5.2s while rank 0 waits; no progress for")


def test_status_shows_the_rule_that_holds_the_verdict_and_until_when(tmp_path: Path):
    run_dir = str(tmp_path)
    now = T + 40
    hold = at(now, {0: waiting(0, now), 1: held(1)})
    assert isinstance(hold, Hold)
    write_live(run_dir, attempt=0, step=57, loss=1.0, loss_source="runtime", progress_at=T - 0.1)
    write_hold(run_dir, 0, hold.to_json())
    assert read_hold(run_dir) == {"attempt": 0, "hold": hold.to_json()}
    status = JobStatus(id="j1", name="demo", cluster="local", kind="local", state="RUNNING",
                       attempts=1, restarts=0, created_at=T - 100, run_dir=run_dir,
                       stepped_at=T - 0.1, progress_step=57, progress_attempt=0, hang_window_s=2.13,
                       hang_window_mode="adaptive")
    assert apply_live(status, read_live(run_dir))
    text = ("no heartbeat from rank 1 since 00:16:40Z: held to the 300s ceiling "
            "(watch.heartbeat_timeout) (no signal is not hung: its interpreter is held, busy or "
            "stuck); no verdict before 00:21:40Z")
    assert status.hang_held == text
    [stall] = [line for line in detail_lines(status, now=now) if line.startswith("stalled")]
    assert stall == (f"stalled: no step for 40s; hang window in force: 2.13s (adaptive); "
                     f"held back: {text}")
    write_hold(run_dir, 0, None)  # progress again: nothing held
    assert apply_live(status, read_live(run_dir)) and status.hang_held is None
    write_hold(run_dir, 1, hold.to_json())  # another attempt's is not this one's
    assert hold_text(read_hold(run_dir), 0) is None
