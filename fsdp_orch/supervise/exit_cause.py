"""Why an attempt failed where its logs are not enough: what its exit status tells, and which rank
torchrun's summary says failed first (when the logs only show its peers losing it)."""

from __future__ import annotations

from collections.abc import Iterable

from fsdp_orch.supervise.diagnose import Diagnosis, diagnose_lines, startup_refusal
from fsdp_orch.supervise.signals import SIGNALS, signal_category
from fsdp_orch.vocab.categories import (
    COMMUNICATION,
    NODE_LOST_EXIT,
    SIGNAL_ENDINGS,
    FailureCategory,
)


def diagnose_exit(code: int | None) -> Diagnosis:
    """When the logs say nothing: what the exit status alone tells (negative, or above 128 from a
    shell: ended by a signal)."""
    if code is None:
        return Diagnosis(FailureCategory.PREEMPTION_OR_NODE_LOST, True,
                         "the attempt's processes disappeared", None)
    if code == NODE_LOST_EXIT:
        return Diagnosis(FailureCategory.PREEMPTION_OR_NODE_LOST, True,
                         "a node stopped answering (its host is named in the supervisor's log)",
                         None)
    signum = -code if code < 0 else code - 128 if 128 < code < 192 else None
    if signum is None:
        return Diagnosis(FailureCategory.UNKNOWN, True, f"exited with code {code}", None)
    name = SIGNALS.get(signum, f"signal {signum}")
    category = signal_category(name)
    if category is None:
        return Diagnosis(FailureCategory.PREEMPTION_OR_NODE_LOST, True,
                         f"terminated by SIGTERM (exit {code})", None)
    if category == FailureCategory.KILLED_SIGKILL:
        return Diagnosis(category, True, f"killed by SIGKILL (exit {code}): the kernel OOM killer, "
                                         "the scheduler or an external kill", None)
    return Diagnosis(category, True, f"ended by {name} (signal {signum}, exit {code})", None)


def cause_at_exit(code: int, cause: Diagnosis | None, root: tuple[int, int, int] | None,
                  cause_rank: int | None, logs: Iterable[Iterable[str]] = ()) -> Diagnosis:
    """Why an attempt that exited with ``code`` failed: the logs' root cause (``cause``), unless
    torchrun's summary says another rank failed first (``root``: global rank, local rank, exit code)
    and the logs only show its peers losing it (``cause_rank``: the local rank whose output held the
    cause, if known), or one of ``logs`` (each a log's last lines) reports a rank's SIGKILL after
    the lost peer; then that rank's ending is the cause. A rank that refused to start (argparse's
    usage error, python's "can't open file") and exited with the status that refusal ends with is
    the cause where the logs hold no cause that is not retried (a usage error is the user's)."""
    logs = [list(lines) for lines in logs]
    status = root[2] if root is not None and root[2] != 0 else code
    if cause is None or cause.retryable:
        for lines in logs:
            refused = startup_refusal(lines, status)
            if refused is not None:
                return refused
    if root is not None and root[2] != 0:
        rank, local_rank, rank_code = root
        if cause is None or (cause.category in COMMUNICATION and cause_rank != local_rank):
            base = diagnose_exit(rank_code)
            return Diagnosis(base.category, base.retryable,
                             f"rank {rank} failed first: {base.evidence}", None)
    if cause is not None and cause.category in COMMUNICATION:
        for lines in logs:
            killed = diagnose_lines(lines)
            if killed.category == FailureCategory.KILLED_SIGKILL:
                return killed
    return cause or diagnose_exit(code)


def died_of_a_signal(code: int, cause: Diagnosis | None, root: tuple[int, int, int] | None) -> bool:
    """Whether an attempt (or, under torchrun, its first failed rank: ``root``) ended by a signal
    with nothing in its logs but a lost peer or that signal: how a crash in the processes' teardown
    looks."""
    echoes = COMMUNICATION | SIGNAL_ENDINGS | {FailureCategory.UNKNOWN}
    if cause is not None and cause.category not in echoes:
        return False
    return code < 0 or (root is not None and root[2] < 0)
