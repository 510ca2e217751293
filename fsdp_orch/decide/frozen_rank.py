"""A rank whose process is frozen while its peers wait. Pure: the heartbeats and the time come in.

A rank stopped mid-training (SIGSTOP, a debugger, a process stuck in the kernel) writes no
heartbeat: from its heartbeat alone it is "held", no signal, and the hang rule waited for it up to
``heartbeat_timeout`` (300 s by default). Its node's relay reads its process state
(``observe.process_state``) and sends it beside the heartbeat: a rank frozen past its threshold
loses the "held" veto (and its other vetoes: a frozen process does nothing), so the rule judges it
like any rank that makes no progress, once its peers wait (no peer is vetoed).

Thresholds: stopped (``T``, ``t``) for longer than the hang window, and ``STOPPED_MIN_S`` at the
least; uninterruptible (``D``, with no byte moved) for longer than the window and
``watch.node_timeout`` at the least. Never a verdict when every rank that has not finished is
frozen: a pause of the whole job (a node paused with its agent is silent, and waits for
``watch.node_timeout`` already).
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.process_state import STOPPED, UNINTERRUPTIBLE, describe_state
from fsdp_orch.vocab.states import HeartbeatState

# A stop shorter than this is not judged, whatever the window: a stack taken by hand stops the
# process for a moment (py-spy dump without --nonblocking: milliseconds; gdb -p in batch mode, with
# its symbols to load: seconds), and the window's 2 s floor was sized to tell a native wait from a
# busy rank, not to outlast a tool. 5 s is 10 ticks of the heartbeat thread; with the relay's
# 0.75 s to see the file stand still and the quarter-window poll, a stopped rank of a job stepping
# faster than 0.5 s is judged 6-7 s after it stopped.
STOPPED_MIN_S = 5.0


@dataclass(frozen=True)
class Frozen:
    rank: int
    pid: int
    state: str  # the /proc state letter
    since: float  # frozen since (the relay's first look that saw it so)
    threshold: float  # judged once frozen for longer than this

    def words(self, now: float) -> str:
        """``rank 1 (pid 4242) is stopped (state T: SIGSTOP or a debugger) for 5.8s``."""
        return (f"rank {self.rank} (pid {self.pid}) is {describe_state(self.state)} for "
                f"{now - self.since:.1f}s")


def threshold_of(state: str, window: float, watch: Watch) -> float | None:
    """How long a process in ``state`` may stay frozen before it is judged; None: never (not a
    frozen state). Uninterruptible sleep gets ``watch.node_timeout``: the kernel's own reclaim and
    I/O stalls last seconds in healthy jobs (a rank held under memory reclaim was seen to stall for
    more than 2 s in CI), and a rank stuck in the kernel is given as long as a silent node."""
    if state in STOPPED:
        return max(window, STOPPED_MIN_S)
    if state in UNINTERRUPTIBLE:
        return max(window, watch.node_timeout)
    return None


def frozen_of(beat: Heartbeat | None, window: float, watch: Watch) -> Frozen | None:
    """``beat``'s rank frozen, at any age; None when its relay found it not frozen."""
    if beat is None or beat.proc_state is None or beat.proc_state_since is None:
        return None
    threshold = threshold_of(beat.proc_state, window, watch)
    if threshold is None:
        return None
    return Frozen(beat.rank, beat.pid, beat.proc_state, beat.proc_state_since, threshold)


def frozen_ranks(beats: dict[int, Heartbeat], world_size: int, now: float, window: float,
                 watch: Watch) -> dict[int, Frozen]:
    """The ranks frozen past their threshold, while some rank that has not finished is not frozen
    (a peer, who can wait for them); {} when every such rank is frozen (the whole job paused)."""
    found = {rank: frozen for rank, beat in beats.items() if beat.state != HeartbeatState.DONE
             and (frozen := frozen_of(beat, window, watch)) is not None}
    if not found or every_rank_frozen(beats, world_size, window, watch):
        return {}
    return {rank: f for rank, f in sorted(found.items()) if now - f.since > f.threshold}


def every_rank_frozen(beats: dict[int, Heartbeat], world_size: int, window: float,
                      watch: Watch) -> bool:
    """Every rank that has not finished is frozen (at any age)."""
    unfinished = [b for b in (beats.get(r) for r in range(world_size))
                  if b is None or b.state != HeartbeatState.DONE]
    return bool(unfinished) and all(frozen_of(b, window, watch) is not None for b in unfinished)


__all__ = ["STOPPED_MIN_S", "Frozen", "every_rank_frozen", "frozen_of", "frozen_ranks",
           "threshold_of"]
