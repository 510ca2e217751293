"""What one look at a running attempt leads to (``decide.look.next_step``): pure, the look's
observations and the clock's reading in, the step out, in the rule's order of precedence."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsdp_orch.decide.look import SETTLE_S, Look, Step, next_step
from fsdp_orch.decide.teardown import TEARDOWN_WINDOW_S, PastTheEnd
from fsdp_orch.decide.watchdog import HangVerdict
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.supervise.diagnose import Diagnosis

WATCH = Watch.model_validate({"heartbeat_timeout": "10s", "startup_timeout": "60s",
                              "poll_interval": "2s"})
NOW = 1000.0
QUIET = Look(now=NOW, exit_code=None, finished_at=None, cause=None, settling_since=None,
             replace_straggler=False, verdict=None, past=None, cancel_requested=False,
             window_s=4.0)
HANG = HangVerdict(12.0, [1], "rank 1 made no progress")
LOST_PEER = Diagnosis("gloo_timeout_or_peer_lost", True, "Connection closed by peer")
OOM = Diagnosis("cuda_oom", True, "CUDA out of memory")
KILLED = Diagnosis("killed_sigkill", True, "Signal 9 (SIGKILL)")
STUCK = PastTheEnd(step=100, returned=[0], stuck=[1], since=NOW - 1.0)


def test_nothing_seen_waits_a_quarter_of_a_short_window_or_the_poll_interval() -> None:
    step = next_step(QUIET, WATCH)
    assert step.step is Step.WAIT and step.wait_s == 1.0  # 4 s window / 4 < 2 s poll
    assert next_step(replace(QUIET, window_s=60.0), WATCH).wait_s == 2.0


@pytest.mark.parametrize("look,expected", [
    # a straggler's replacement, then the exit, come before anything the logs or the rule say
    (replace(QUIET, replace_straggler=True, verdict=HANG, cause=OOM), Step.REPLACE_STRAGGLER),
    (replace(QUIET, exit_code=1, replace_straggler=True, verdict=HANG), Step.EXITED),
    (replace(QUIET, exit_code=0, cancel_requested=True), Step.EXITED),
    # a cause that is no echo fails at once, before a hang verdict
    (replace(QUIET, cause=OOM, verdict=HANG), Step.FAIL),
    # every script returned: the straggler waits for the exit, not for its replacement
    (replace(QUIET, replace_straggler=True, finished_at=NOW - 1), Step.WAIT),
    (replace(QUIET, finished_at=NOW - 61), Step.TEARDOWN_HANG),
    (replace(QUIET, finished_at=NOW - 59), Step.WAIT),
    (replace(QUIET, verdict=HANG, cancel_requested=True), Step.HANG),
    (replace(QUIET, cancel_requested=True), Step.CANCEL),
])
def test_each_look_leads_to_one_step_in_the_rules_order(look: Look, expected: Step) -> None:
    assert next_step(look, WATCH).step is expected


def test_a_lost_peer_or_a_signal_settles_until_the_exit_at_most_settle_s() -> None:
    """Often the echo of a rank that died first: torchrun gets SETTLE_S to say which."""
    for cause in (LOST_PEER, KILLED):
        first = next_step(replace(QUIET, cause=cause), WATCH)
        assert first.step is Step.SETTLE and first.cause is cause and first.wait_s == 0.5
        still = replace(QUIET, cause=cause, settling_since=NOW - SETTLE_S + 0.1)
        assert next_step(still, WATCH).step is Step.SETTLE
        done = next_step(replace(still, settling_since=NOW - SETTLE_S), WATCH)
        assert done.step is Step.FAIL and done.cause is cause


def test_a_signal_after_every_script_returned_is_the_teardowns_judged_at_the_exit() -> None:
    after = replace(QUIET, cause=KILLED, finished_at=NOW - 1)
    assert next_step(after, WATCH).step is Step.WAIT
    assert next_step(replace(after, cause=LOST_PEER), WATCH).step is Step.SETTLE


def test_ranks_stuck_past_the_end_have_their_stacks_read_late_or_with_a_verdict() -> None:
    assert next_step(replace(QUIET, past=STUCK), WATCH).step is Step.WAIT
    late = replace(STUCK, since=NOW - TEARDOWN_WINDOW_S - 1)
    assert next_step(replace(QUIET, past=late), WATCH).step is Step.READ_STUCK_STACKS
    assert next_step(replace(QUIET, past=STUCK, verdict=HANG), WATCH).step is \
        Step.READ_STUCK_STACKS


def test_a_lost_node_replaces_the_echoes_of_its_death_and_nothing_else() -> None:
    from fsdp_orch.decide.lost_node import NODE_LOST, lost_node_instead

    said = "node 1 (host-b) stopped answering"
    for echo in ("gloo_timeout_or_peer_lost", "nccl_timeout", "hang", "unknown"):
        found = lost_node_instead(echo, said)
        assert found is not None and (found.category, found.evidence) == (NODE_LOST, said)
    assert lost_node_instead("cuda_oom", said) is None
    assert lost_node_instead("hang", None) is None
