"""Injected faults (FSDP_ORCH_FAULT) behave as the supervisor's tests need them to, under real
torchrun with 2 CPU ranks. kill and checkpoint_crash are exercised in test_runtime_checkpoint."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time

import pytest

from fsdp_orch.observe.heartbeats import read_heartbeats

pytestmark = pytest.mark.slow


def wait_for(predicate, timeout: float, what: str, show=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{show()}")


def test_hang_leaves_the_other_rank_stuck_in_a_collective(torchrun):
    run = torchrun.start(torchrun.prepare([*torchrun.small, "--steps", "50"],
                                          fault="hang:step=3:rank=1"))
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(run.proc.stderr), daemon=True)
    reader.start()
    wait_for(lambda: all(b.step >= 3 for b in read_heartbeats(run.run_dir, 0).values())
             and len(read_heartbeats(run.run_dir, 0)) == 2, 120, "both ranks to finish step 3")
    time.sleep(4)  # long enough for dozens of steps, had rank 0 not been blocked
    beats = read_heartbeats(run.run_dir, 0)
    assert run.proc.poll() is None, "the job ended instead of hanging"
    assert (beats[0].step, beats[1].step) == (3, 3)
    assert time.time() - beats[0].time > 3.5  # no heartbeat since: stuck, not slow
    # SIGUSR1 makes a rank print its stacks: rank 1 sleeps in the fault, rank 0 waits in FSDP's
    # all-gather of the next step. One at a time, so the two dumps do not interleave.
    for rank, where in ((1, "in at_step_end"), (0, "in foreach_all_gather")):
        os.kill(beats[rank].pid, signal.SIGUSR1)
        wait_for(lambda where=where: where in "".join(err), 30, f"rank {rank}'s stack",
                 show=lambda: "".join(err)[-6000:])
    run.kill()
    out = run.proc.stdout.read()
    assert [line.split()[0] for line in out.splitlines()] == ["step=1", "step=2", "step=3"]
    assert "rank 1: injected hang at step 3" in "".join(err)


def test_crash_exits_non_zero_without_a_traceback(torchrun):
    run = torchrun.run([*torchrun.small, "--steps", "50"], fault="crash:step=2:rank=0")
    assert run.returncode == 1
    assert "rank 0: injected crash at step 2: exiting with code 1" in run.stderr
    # No traceback from the rank: the supervisor must not read an injected crash as a bug (not
    # retried).
    from fsdp_orch.supervise.diagnose import diagnose_text

    assert diagnose_text(run.stderr).category != "user_code_error"
    assert "step=3" not in run.stdout


def test_collective_timeout_makes_the_other_rank_fail_with_a_real_timeout(torchrun):
    started = time.monotonic()
    run = torchrun.run([*torchrun.small, "--steps", "50"], fault="collective_timeout:step=2:rank=1",
                       watch={"collective_timeout": "3s"}, timeout=120)
    assert run.returncode != 0
    assert "rank 1: injected collective timeout at step 2" in run.stderr
    # Rank 0 waited in a gloo collective until the process group's 3 s timeout.
    assert "[rank0]" in run.stderr and "timed out" in run.stderr.lower()
    assert time.monotonic() - started < 60


def test_slow_rank_makes_every_step_slower_from_its_step_on(torchrun):
    run = torchrun.start(torchrun.prepare([*torchrun.small, "--steps", "9"],
                                          fault="slow:step=5:rank=1:seconds=0.6"))
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(run.proc.stderr.read()))
    reader.start()
    seen: dict[int, float] = {}
    for line in run.proc.stdout:
        if line.startswith("step="):
            seen[int(line.split()[0].removeprefix("step="))] = time.monotonic()
    run.proc.wait(timeout=120)
    reader.join()
    assert run.proc.returncode == 0, err
    gaps = {s: seen[s] - seen[s - 1] for s in range(2, 10)}
    before = [gaps[s] for s in (2, 3, 4, 5)]  # rank 1 sleeps after step 5 on: from gap 6
    after = [gaps[s] for s in (6, 7, 8, 9)]
    assert min(after) >= 0.55, gaps  # rank 0 waits for the straggler in every collective
    assert statistics.median(before) < 0.3, gaps
