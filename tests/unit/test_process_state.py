"""A rank's process state as its node's relay reads it (``observe.process_state``), on the wire
(``nodeagent.summary``, the agent, the supervisor's server) and at teardown (a stopped process
ends at once). Real processes stopped with SIGSTOP where the kernel is what is tested."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from secret_checks import wait_for as waited_for

from fsdp_orch.nodeagent.agent import NodeAgent
from fsdp_orch.nodeagent.server import SummaryServer
from fsdp_orch.nodeagent.summary import (
    compact,
    parse_summary,
    state_changed,
    summary_line,
    with_process_states,
)
from fsdp_orch.observe.heartbeats import heartbeat_from_dict, parse_heartbeat
from fsdp_orch.observe.process_state import (
    ProcessStates,
    Sample,
    describe_state,
    parse_io_total,
    parse_stat_state,
    read_sample,
)
from fsdp_orch.observe.proctree import stop_job_processes


def test_the_state_is_the_field_after_the_commands_last_parenthesis():
    assert parse_stat_state(b"4242 (python) T 1 4242 4242 0 -1") == "T"
    assert parse_stat_state(b"4242 (a) (b) c) D 1 2 3") == "D"  # a command with parentheses
    assert parse_stat_state(b"4242 (python)") is None
    assert parse_stat_state(b"garbage") is None


def test_the_io_total_adds_syscalls_and_storage():
    text = b"rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 100\nwrite_bytes: 200\n"
    assert parse_io_total(text) == 330
    assert parse_io_total(b"nothing: 1\n") is None


class Reads:
    """Samples by pid, changed by the test between looks."""

    def __init__(self) -> None:
        self.now: dict[int, Sample] = {}

    def __call__(self, pid: int) -> Sample | None:
        return self.now.get(pid)


def test_a_state_is_timed_from_the_first_look_that_saw_it_and_afresh_when_it_changes():
    reads = Reads()
    states = ProcessStates(reads)
    reads.now = {7: Sample("T"), 8: Sample("S")}
    assert states.look([7, 8], 100.0) == {7: ("T", 100.0)}  # a sleeping process is not frozen
    assert states.look([7, 8], 100.25) == {7: ("T", 100.0)}
    reads.now[7] = Sample("t")
    assert states.look([7], 100.5) == {7: ("t", 100.5)}
    reads.now[7] = Sample("R")
    assert states.look([7], 100.75) == {}
    reads.now[7] = Sample("T")
    assert states.look([7], 101.0) == {7: ("T", 101.0)}
    assert states.look([], 101.25) == {}  # not asked about (its file moved again): forgotten
    assert states.look([7], 101.5) == {7: ("T", 101.5)}


def test_uninterruptible_sleep_that_moves_bytes_is_timed_afresh():
    reads = Reads()
    states = ProcessStates(reads)
    reads.now = {7: Sample("D", 1000)}
    assert states.look([7], 100.0) == {7: ("D", 100.0)}
    assert states.look([7], 100.25) == {7: ("D", 100.0)}
    reads.now = {7: Sample("D", 5000)}  # a slow write that moves: not frozen for as long
    assert states.look([7], 100.5) == {7: ("D", 100.5)}


def test_a_gap_in_the_relays_own_looks_times_every_state_afresh():
    reads = Reads()
    states = ProcessStates(reads, gap_s=2.0)
    reads.now = {7: Sample("T")}
    assert states.look([7], 100.0) == {7: ("T", 100.0)}
    # the relay was paused with its node: the rank still stopped as it resumes is not known to
    # have been stopped all along (a node paused whole, continued one process after another)
    assert states.look([7], 115.0) == {7: ("T", 115.0)}


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"],
                            env={**os.environ, "FSDP_ORCH_JOB_ID": "frozen-test-job"})
    time.sleep(0.2)
    yield proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def wait_for(what, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    return waited_for(what, timeout, interval=0.02)


def test_a_real_stopped_process_reads_stopped_and_continued_it_does_not(sleeper):
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert wait_for(lambda: (s := read_sample(sleeper.pid)) is not None and s.state == "T")
    os.kill(sleeper.pid, signal.SIGCONT)
    assert wait_for(lambda: (s := read_sample(sleeper.pid)) is not None and s.state in "SR")
    assert describe_state("T") == "stopped (state T: SIGSTOP or a debugger)"


def test_a_process_that_has_gone_has_no_state():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert read_sample(proc.pid) is None


def beat_file(rank: int, pid: int, written: float) -> dict:
    return {"rank": rank, "attempt": 0, "step": 12, "loss": 1.0, "time": written,
            "state": "training", "pid": pid, "metrics": {}, "progress_at": written - 0.2,
            "python_at": written - 0.1}


def test_only_a_held_rank_is_read_and_its_state_rides_with_its_heartbeat(sleeper):
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert wait_for(lambda: read_sample(sleeper.pid).state == "T")
    now = time.time()
    current = {0: compact(beat_file(0, sleeper.pid, now - 0.1), now),  # its file still moves
               1: compact(beat_file(1, sleeper.pid, now - 2.0), now)}  # held
    states = ProcessStates()
    out = with_process_states(current, states, now)
    assert "proc_state" not in out[0]
    assert out[1]["proc_state"] == "T" and out[1]["proc_state_since"] == round(now, 3)
    assert state_changed(out, current)  # worth a line at once
    assert with_process_states(current, None, now) == current  # no reader: nothing read
    line = summary_line(0, "host0", now, [out[1]])
    import json

    parsed = parse_summary(json.loads(line)).beats[1]
    assert (parsed.proc_state, parsed.proc_state_since) == ("T", round(now, 3))


def test_a_heartbeat_with_a_process_state_parses_back_and_a_wrong_one_is_named():
    data = {**beat_file(1, 42, 100.0), "held_since": 100.0, "proc_state": "D",
            "proc_state_since": 101.5}
    beat = heartbeat_from_dict(data)
    assert (beat.proc_state, beat.proc_state_since) == ("D", 101.5)
    assert parse_heartbeat(beat.to_json()) == beat
    with pytest.raises(ValueError, match="proc_state"):
        heartbeat_from_dict({**data, "proc_state": 3})
    with pytest.raises(ValueError, match="proc_state_since"):
        heartbeat_from_dict({**data, "proc_state_since": "soon"})


def test_the_agent_sends_a_stopped_ranks_state_to_the_supervisor(sleeper):
    server = SummaryServer("tok", node_timeout=5.0)
    port = server.start()
    written = time.time()
    ranks = {0: beat_file(0, os.getpid(), written), 1: beat_file(1, sleeper.pid, written)}
    agent = NodeAgent(0, "host0", lambda: {0: {**ranks[0], "time": time.time()}, 1: ranks[1]},
                      lambda: ("127.0.0.1", port, "tok"), every=0.2, look_every=0.05,
                      states=ProcessStates())
    loop = asyncio.new_event_loop()
    task = loop.create_task(agent.run())
    thread = threading.Thread(target=lambda: loop.run_until_complete(asyncio.wait([task])),
                              daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: 1 in server.heartbeats())
        assert server.heartbeats()[1].proc_state is None  # not frozen
        os.kill(sleeper.pid, signal.SIGSTOP)
        stopped_at = time.time()
        assert wait_for(lambda: server.heartbeats()[1].proc_state == "T")
        beat = server.heartbeats()[1]
        assert (beat.held_since == pytest.approx(written, abs=1e-3)
                and stopped_at - 0.1 <= beat.proc_state_since)
        assert server.heartbeats()[0].proc_state is None  # its file moves: never read
        os.kill(sleeper.pid, signal.SIGCONT)
        assert wait_for(lambda: server.heartbeats()[1].proc_state is None)
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(5)
        server.close()


def test_a_stopped_process_is_continued_to_take_its_sigterm_at_teardown(sleeper):
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert wait_for(lambda: read_sample(sleeper.pid).state == "T")
    started = time.monotonic()
    killed = stop_job_processes("frozen-test-job", grace=5.0)
    assert killed == [] and time.monotonic() - started < 2.0  # SIGTERM, not the SIGKILL after 5 s
    assert sleeper.wait(5) == -signal.SIGTERM
