"""What one look at a running attempt decides, pure: the loop (``supervise.attempt_watch``)
observes (the exit status, the heartbeats, the logs' root cause, the silent nodes, the cancel
flag), the rules of this folder judge what it saw (the hang rule, the teardown rules, the
straggler's replacement), and ``next_step`` says what the loop does next, in this order:

1. a straggler to replace whose checkpoint is complete: end the attempt there;
2. the attempt exited: judge its exit;
3. a root cause in the logs: fail on it, or, for a lost peer or a signal (often the echo of a rank
   that died first, or of a teardown), settle until the exit, at most ``SETTLE_S``; a signal after
   every script returned is the teardown's, judged at the exit;
4. every script returned and the processes outlived ``startup_timeout``: a teardown hang;
5. ranks stuck after the job's last step: read their stacks (past the teardown window, or with a
   hang verdict at hand), which decide whether it is a teardown hang;
6. the hang rule's verdict: a hang;
7. cancel asked: stop;
8. else wait, a short window judged at least 4 times over.

The clock is the look's ``now``; nothing here sleeps, reads a file or a clock."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from fsdp_orch.decide.teardown import TEARDOWN_WINDOW_S, PastTheEnd
from fsdp_orch.decide.watchdog import HangVerdict
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.vocab.categories import COMMUNICATION, SIGNAL_ENDINGS

# A lost peer is usually the symptom of a rank that died first: after a communication error the
# supervisor gives torchrun this long to report which rank failed first.
SETTLE_S = 5.0
SETTLE_LOOK_S = 0.5  # the pace of the looks while settling


class Cause(Protocol):
    """A root cause read from the logs (``supervise.diagnose.Diagnosis``)."""

    @property
    def category(self) -> str: ...


class Step(enum.Enum):
    REPLACE_STRAGGLER = "replace_straggler"
    EXITED = "exited"
    FAIL = "fail"
    SETTLE = "settle"
    TEARDOWN_HANG = "teardown_hang"
    READ_STUCK_STACKS = "read_stuck_stacks"
    HANG = "hang"
    CANCEL = "cancel"
    WAIT = "wait"


@dataclass(frozen=True)
class Look:
    """One look at a running attempt."""

    now: float
    exit_code: int | None
    finished_at: float | None  # when the last script returned, once every rank's has
    cause: Cause | None  # the logs' root cause so far
    settling_since: float | None  # when settling on a lost peer or a signal began
    replace_straggler: bool  # a straggler to replace, and a checkpoint past its naming complete
    verdict: HangVerdict | None  # the hang rule's (none while a node is silent)
    past: PastTheEnd | None  # ranks stuck after the job's last step
    cancel_requested: bool
    window_s: float  # the hang window


@dataclass(frozen=True)
class Next:
    step: Step
    cause: Cause | None = None  # FAIL, SETTLE: the cause
    wait_s: float = 0.0  # SETTLE, WAIT: how long until the next look


def next_step(look: Look, watch: Watch) -> Next:
    if look.exit_code is None and look.finished_at is None and look.replace_straggler:
        return Next(Step.REPLACE_STRAGGLER)
    if look.exit_code is not None:
        return Next(Step.EXITED)
    cause = look.cause
    if cause is not None and look.finished_at is not None and cause.category in SIGNAL_ENDINGS:
        cause = None  # every script returned: a signal now is the teardown's, judged at the exit
    if cause is not None:
        if cause.category not in COMMUNICATION | SIGNAL_ENDINGS:
            return Next(Step.FAIL, cause)
        since = look.now if look.settling_since is None else look.settling_since
        if look.now - since >= SETTLE_S:
            return Next(Step.FAIL, cause)
        return Next(Step.SETTLE, cause, min(watch.poll_interval, SETTLE_LOOK_S))
    if look.finished_at is not None and look.now - look.finished_at > watch.startup_timeout:
        return Next(Step.TEARDOWN_HANG)
    if look.past is not None and (look.verdict is not None
                                  or look.now - look.past.since > TEARDOWN_WINDOW_S):
        return Next(Step.READ_STUCK_STACKS)
    if look.verdict is not None:
        return Next(Step.HANG)
    if look.cancel_requested:
        return Next(Step.CANCEL)
    return Next(Step.WAIT, wait_s=min(watch.poll_interval, look.window_s / 4))


__all__ = ["SETTLE_S", "Cause", "Look", "Next", "Step", "next_step"]
