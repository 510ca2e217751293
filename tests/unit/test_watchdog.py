"""Hang detection from heartbeats: pure, with the time passed in."""

from __future__ import annotations

from fsdp_orch.decide.watchdog import check_hang, no_signal, scripts_finished_at
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.supervise.torchrun_summary import torchrun_root_cause

WATCH = Watch.model_validate({"heartbeat_timeout": "10s", "startup_timeout": "60s"})


def beat(rank: int, step: int, t: float, state: str = "training") -> Heartbeat:
    return Heartbeat(rank=rank, attempt=0, step=step, loss=1.0, time=t, state=state, pid=1)


def test_startup_gets_the_startup_window():
    beats = {0: beat(0, 0, 5.0, "starting"), 1: beat(1, 0, 5.0, "starting")}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=59.0, watch=WATCH) is None
    verdict = check_hang(beats, world_size=2, attempt_started=0.0, now=61.0, watch=WATCH)
    assert verdict is not None and "startup_timeout" in verdict.evidence
    assert verdict.stalled_for_s == 61.0


def test_no_progress_for_the_heartbeat_timeout_is_a_hang():
    beats = {0: beat(0, 39, 100.0), 1: beat(1, 39, 100.2)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=110.0, watch=WATCH) is None
    first = check_hang(beats, world_size=2, attempt_started=0.0, now=110.1, watch=WATCH)
    assert first is not None and first.ranks == [0]
    verdict = check_hang(beats, world_size=2, attempt_started=0.0, now=110.5, watch=WATCH)
    assert verdict is not None and verdict.ranks == [0, 1]
    assert abs(verdict.stalled_for_s - 10.3) < 1e-9
    assert "step 39" in verdict.evidence


def test_a_rank_that_never_reported_is_late_once_others_progress():
    beats = {0: beat(0, 5, 100.0)}
    verdict = check_hang(beats, world_size=2, attempt_started=50.0, now=100.5, watch=WATCH)
    assert (verdict is not None and verdict.ranks == [1]
            and "never finished a step" in verdict.evidence)


def writing(rank: int, step: int, t: float, state: str = "training", *, python_at: float,
            io_at: float | None = None) -> Heartbeat:
    """A probed heartbeat with the write meter's time."""
    return Heartbeat(rank=rank, attempt=0, step=step, loss=1.0, time=t, state=state, pid=1,
                     python_at=python_at, io_at=io_at)


def test_a_save_that_writes_nothing_for_the_window_while_a_peer_is_stuck_is_a_hang():
    # rank 1 hung at step 30 before the save; rank 0 waits inside the save's collective
    beats = {0: writing(0, 30, 100.2, "saving", python_at=100.3, io_at=100.25),
             1: writing(1, 30, 100.0, python_at=100.0)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=110.2, watch=WATCH) is None
    verdict = check_hang(beats, world_size=2, attempt_started=0.0, now=110.4, watch=WATCH)
    assert verdict is not None and verdict.ranks == [0, 1] and verdict.saving == [0]
    assert "inside a checkpoint save (nothing written for 10.2s)" in verdict.evidence


def test_a_slow_save_that_keeps_writing_is_never_a_hang():
    # both ranks in one native call (a writer thread joined) for a minute, bytes still going out
    for now in (111.0, 130.0, 160.0):
        beats = {0: writing(0, 30, 100.0, "saving", python_at=100.0, io_at=now - 0.5),
                 1: writing(1, 30, 100.0, "saving", python_at=100.0, io_at=now - 0.5)}
        assert check_hang(beats, world_size=2, attempt_started=0.0, now=now, watch=WATCH) is None
    # one rank done writing and waiting for the other, which still writes
    beats = {0: writing(0, 30, 100.0, "saving", python_at=100.0, io_at=101.0),
             1: writing(1, 30, 100.0, "saving", python_at=100.0, io_at=159.6)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=160.0, watch=WATCH) is None
    # an unchanged script's torch.save in the main thread: no saving state, the bytes still count
    beats = {0: writing(0, 30, 100.0, python_at=100.0, io_at=159.6),
             1: writing(1, 30, 100.0, python_at=100.0)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=160.0, watch=WATCH) is None
    # the writes stop: past the window from the last byte, a hang
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=169.7, watch=WATCH) is not None


def test_an_unprobed_save_keeps_the_startup_window_and_done_ranks_are_never_late():
    # heartbeats from a writer without the bootstrap: no probe, no write meter, no way to tell
    saving = {0: beat(0, 50, 100.0, "saving"), 1: beat(1, 50, 100.0, "saving")}
    assert check_hang(saving, world_size=2, attempt_started=0.0, now=150.0, watch=WATCH) is None
    assert check_hang(saving, world_size=2, attempt_started=0.0, now=161.0, watch=WATCH) is not None
    done = {0: beat(0, 300, 100.0, "done"), 1: beat(1, 300, 100.0, "done")}
    assert check_hang(done, world_size=2, attempt_started=0.0, now=10_000.0, watch=WATCH) is None


def test_adaptive_window_follows_the_ranks_step_summaries_bounded_below():
    watch = Watch.model_validate({"adaptive_multiplier": 10, "adaptive_min": "3s",
                                  "heartbeat_timeout": "5m"})
    slow = {"n": 10, "p50": 0.4, "p95": 0.5, "max": 0.6}  # 10 x 0.5 s = 5 s
    beats = {r: Heartbeat(rank=r, attempt=0, step=11, loss=1.0, time=5.5, state="training", pid=1,
                          step_s=slow)
             for r in (0, 1)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=10.4, watch=watch) is None
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=10.6, watch=watch) is not None
    fast = {r: Heartbeat(rank=r, attempt=0, step=11, loss=1.0, time=5.5, state="training", pid=1,
                         step_s={"n": 10, "p50": 0.01, "p95": 0.01, "max": 0.02}) for r in (0, 1)}
    # never below 3 s
    assert check_hang(fast, world_size=2, attempt_started=0.0, now=8.4, watch=watch) is None
    assert check_hang(fast, world_size=2, attempt_started=0.0, now=8.6, watch=watch) is not None


def test_torchrun_root_cause_block_is_parsed():
    summary = """Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 13182)  (SIGTERM)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_12:43:48
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 13183)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 13183
======================================================="""
    assert torchrun_root_cause(summary.splitlines()) == (3, 1, -9)
    assert torchrun_root_cause(["nothing here"]) is None


def probed(rank: int, step: int, progress: float, python: float,
           state: str = "training") -> Heartbeat:
    """A heartbeat from the bootstrap: written recently, with the main-thread probe's time."""
    return Heartbeat(rank=rank, attempt=0, step=step, loss=None, time=python + 0.5, state=state,
                     pid=1, progress_at=progress, python_at=python)


def test_ranks_stuck_in_native_calls_past_the_window_are_hung_first_stopper_first():
    beats = {0: probed(0, 30, 100.0, 100.4), 1: probed(1, 30, 100.0, 100.1)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=110.0, watch=WATCH) is None
    verdict = check_hang(beats, world_size=2, attempt_started=0.0, now=110.5, watch=WATCH)
    assert verdict is not None and verdict.ranks == [0, 1]
    assert verdict.suspects == [1, 0]  # rank 1 stopped running Python first
    assert "main thread in one native call" in verdict.evidence


def test_a_rank_busy_in_python_is_not_hung_and_its_waiting_peers_are_not_either():
    # rank 0 evaluates in Python for 3x the window; rank 1 waits for it in a collective.
    beats = {0: probed(0, 30, 100.0, 129.8), 1: probed(1, 30, 100.0, 100.0)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=130.0, watch=WATCH) is None
    beats[0] = probed(0, 30, 100.0, 131.0)  # evaluation done, both in the next collective
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=141.5, watch=WATCH) is not None


def test_the_tick_after_a_long_evaluation_is_not_a_hang():
    # Seen in CI: rank 0 has just finished a 12 s evaluation and stepped; rank 1, released from its
    # wait in the same instant, has not rewritten its heartbeat yet (every 0.5 s).
    beats = {0: probed(0, 11, 149.996, 150.0), 1: probed(1, 10, 137.9, 137.9)}
    assert check_hang(beats, world_size=2, attempt_started=0.0, now=150.0, watch=WATCH) is None
    # Had rank 0 stopped there too, both are past the window a window later: a hang.
    verdict = check_hang(beats, world_size=2, attempt_started=0.0, now=160.5, watch=WATCH)
    assert verdict is not None and verdict.ranks == [0, 1]


def test_startup_busy_in_python_is_not_hung_but_stuck_natively_is():
    loading = {0: probed(0, 0, 5.0, 70.0, "starting"), 1: probed(1, 0, 5.0, 5.0, "starting")}
    assert check_hang(loading, world_size=2, attempt_started=0.0, now=70.5, watch=WATCH) is None
    stuck = {0: probed(0, 0, 5.0, 6.0, "starting"), 1: probed(1, 0, 5.0, 5.0, "starting")}
    assert check_hang(stuck, world_size=2, attempt_started=0.0, now=61.0, watch=WATCH) is None
    verdict = check_hang(stuck, world_size=2, attempt_started=0.0, now=66.5, watch=WATCH)
    assert verdict is not None and "startup_timeout" in verdict.evidence


def test_no_heartbeat_at_all_is_no_signal_never_a_hang():
    assert check_hang({}, world_size=2, attempt_started=0.0, now=10_000.0, watch=WATCH) is None
    assert no_signal({}, attempt_started=0.0, now=59.0, watch=WATCH) is None
    why = no_signal({}, attempt_started=0.0, now=61.0, watch=WATCH)
    assert why is not None and "startup_timeout (60s)" in why
    assert no_signal({0: beat(0, 1, 50.0)}, attempt_started=0.0, now=61.0, watch=WATCH) is None


def test_during_start_up_a_rank_with_no_heartbeat_yet_is_no_signal_not_a_hang():
    # rank 0 waits in the rendezvous (a native call); rank 1 is still importing: nothing from it
    # yet.
    waiting = {0: probed(0, 0, 1.0, 1.0, "starting")}
    assert check_hang(waiting, world_size=2, attempt_started=0.0, now=500.0, watch=WATCH) is None


def test_scripts_are_finished_only_when_every_rank_said_done():
    done = {0: beat(0, 30, 100.0, "done"), 1: beat(1, 30, 101.5, "done")}
    assert scripts_finished_at(done, 2) == 101.5
    assert scripts_finished_at({0: done[0]}, 2) is None  # rank 1 has not finished
    assert scripts_finished_at({**done, 1: beat(1, 30, 101.5)}, 2) is None


def test_an_xla_process_compiling_past_the_window_is_not_a_hang_until_its_cpu_stops():
    # step 2's graph compiles: the main thread in one native call (torch_xla.sync) for 40 s
    for now in (111.0, 140.0):
        beats = {0: Heartbeat(rank=0, attempt=0, step=1, loss=1.0, time=now - 0.4, state="training",
                              pid=1, progress_at=100.0, python_at=100.0, compute_at=now - 0.5)}
        assert check_hang(beats, world_size=1, attempt_started=0.0, now=now, watch=WATCH) is None
    # the CPU went quiet 10.5 s ago (a host waiting in the graph's collectives, or a sleep): a hang
    beats = {0: Heartbeat(rank=0, attempt=0, step=1, loss=1.0, time=150.0, state="training", pid=1,
                          progress_at=100.0, python_at=100.0, compute_at=139.5)}
    verdict = check_hang(beats, world_size=1, attempt_started=0.0, now=150.0, watch=WATCH)
    assert verdict is not None and verdict.ranks == [0]


def test_a_verdict_over_thousands_of_ranks_names_them_as_runs():
    from fsdp_orch.decide.watchdog import rank_list

    assert rank_list([3, 1, 2]) == "3, 1, 2"
    assert rank_list([r for r in range(8192) if r != 4095]) == "0-4094, 4096-8191 (8191 ranks)"
    assert rank_list(list(range(0, 80, 2))).endswith("... (24 more runs) (40 ranks)")


def test_a_rank_whose_heartbeat_is_not_rewritten_is_no_signal_until_the_ceiling():
    # Seen in CI: rank 0 holds the interpreter in one native call (a page fault stalled under memory
    # pressure, a C call that keeps the GIL): its watcher cannot rewrite the file, its python_at
    # ages like a hung rank's, and rank 1 waits for it in a collective. Its node's relay says since
    # when.
    def held(rank: int, since: float | None) -> Heartbeat:
        return Heartbeat(rank=rank, attempt=0, step=30, loss=1.0, time=since or 100.0,
                         state="training",
                         pid=1, progress_at=100.0, python_at=since or 100.0, held_since=since)

    beats = {0: held(0, 104.0), 1: probed(1, 30, 100.0, 100.0)}
    # past the window (10 s): rank 1 waits natively, rank 0 is held
    for now in (110.5, 112.0, 113.9):
        assert check_hang(beats, world_size=2, attempt_started=0.0, now=now, watch=WATCH) is None
    # held past heartbeat_timeout (10 s): judged, and the evidence says the interpreter was held
    verdict = check_hang(beats, world_size=2, attempt_started=0.0, now=114.5, watch=WATCH)
    assert verdict is not None and verdict.ranks == [0, 1]
    first = {0: held(0, 99.0), 1: probed(1, 30, 100.0, 100.0)}  # rank 0 stopped first: it leads
    verdict = check_hang(first, world_size=2, attempt_started=0.0, now=110.5, watch=WATCH)
    assert verdict is not None and verdict.suspects == [0, 1]
    assert "rank 0 last reported step 30, main thread in one native call for 11.5s, its " \
           "heartbeat not rewritten for 11.5s (the interpreter held)" in verdict.evidence, \
        verdict.evidence
    # the same rank without the relay's word (its file merely unchanged): judged after the window
    plain = {0: held(0, None), 1: probed(1, 30, 100.0, 100.0)}
    assert check_hang(plain, world_size=2, attempt_started=0.0, now=110.5, watch=WATCH) is not None
