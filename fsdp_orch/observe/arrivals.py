"""Who the others wait for: each rank's arrival at its recent collectives, and the straggler they
name. Pure and stdlib only (the sample is taken in every rank, by the bootstrap's watcher thread).

In synchronous data-parallel training every rank steps at the same rate, so a slow rank does not
show in its step time: it shows in its peers', as time they wait for it inside collectives. Each
rank's flight recorder (torch's record of its last collectives, on for every job fsdp-orch
launches) says when it reached each one; the sample a heartbeat carries is the last
collectives of one process group in the same 4 s of the wall clock on every rank, sampled at each
multiple of ``ARRIVALS_EVERY_S`` (``at``):

    "arrivals": {"at": S, "pg": "0", "t0": MS, "c": [[SEQ, MS_AFTER_T0, DURATION_MS], ...]}

``t0`` is the first one's creation time (unix milliseconds), each offset its own; ``DURATION_MS``
is the collective's time on the device where torch measured it (NCCL with
``TORCH_NCCL_ENABLE_TIMING``), else -1.

How long a rank waited at a collective, ``waits``:
- on a device, the collective's own duration less the shortest any rank had: the kernel of a rank
  that arrived first spins until the last one's starts (the CPU enqueues ahead of the device there,
  so its arrival times say little);
- elsewhere (gloo, on CPU) the collective blocks its caller: the last rank's arrival less its own.

A rank's lead in a round is the others' mean wait less its own; the straggler is the rank whose
lead, summed over recent rounds, is a large share of the time they spanned
(``fsdp_orch.decide.stragglers``). Arrival times compare clocks across hosts: NTP's
few milliseconds, well under the waits worth naming.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ARRIVALS_EVERY_S = 5  # every rank samples at each multiple of this of the wall clock
WINDOW_S = (4.5, 0.5)  # the collectives created from this long before that moment to this long
ARRIVALS_KEPT = 256  # at most this many of them (the latest)
MIN_COMMON = 8  # collectives every rank's sample holds, or no verdict
ONE_WAIT_STEPS = 0.5  # one wait counts at most this many step times


def arrivals_sample(entries: Sequence[Mapping[str, Any]], at: int) -> dict[str, Any] | None:
    """The heartbeat's sample from a flight recorder dump's ``entries`` for the round ``at`` (a
    multiple of ARRIVALS_EVERY_S, unix seconds): the collectives of the latest one's process group
    created in the same window of the wall clock on every rank (WINDOW_S before ``at``, so a rank
    that samples a tick later holds the same ones); None without any."""
    start, end = (at - WINDOW_S[0]) * 1e9, (at - WINDOW_S[1]) * 1e9
    collectives = [e for e in entries
                   if not e.get("is_p2p") and type(e.get("collective_seq_id")) is int
                   and e["collective_seq_id"] > 0 and type(e.get("time_created_ns")) is int]
    if not collectives:
        return None
    group = collectives[-1].get("pg_id")
    kept = [e for e in collectives
            if e.get("pg_id") == group and start <= e["time_created_ns"] < end][-ARRIVALS_KEPT:]
    if not kept:
        return None
    t0 = kept[0]["time_created_ns"]
    rows = []
    for e in kept:
        duration = e.get("duration_ms")
        rows.append([e["collective_seq_id"], round((e["time_created_ns"] - t0) / 1e6, 1),
                     round(float(duration), 1) if isinstance(duration, (int, float))
                     and not isinstance(duration, bool) and duration >= 0 else -1])
    return {"at": at, "pg": str(group), "t0": t0 / 1e6, "c": rows}


@dataclass(frozen=True)
class Round:
    """One round of samples: how long the others waited for each rank beyond what it waited
    itself (``leads``, milliseconds), over ``span_ms`` of the wall clock."""

    leads: dict[int, float]
    span_ms: float
    collectives: int  # how many every rank's sample held

    @property
    def leader(self) -> int:
        """The rank the others waited for most."""
        return max(self.leads, key=lambda rank: (self.leads[rank], -rank))


def round_of(samples: Mapping[int, Mapping[str, Any]],
             step_ms: float | None = None) -> Round | None:
    """Each rank's lead in one round of samples; None with fewer than two ranks, samples of
    different rounds or process groups, or fewer than MIN_COMMON collectives that every sample
    holds. ``step_ms``: the ranks' median step time; one wait counts at most ONE_WAIT_STEPS of it
    (a checkpoint that one rank writes alone is a long wait once, not a slow rank)."""
    if (len(samples) < 2 or len({s.get("pg") for s in samples.values()}) != 1
            or len({s.get("at") for s in samples.values()}) != 1):
        return None
    rows = {rank: {row[0]: (s["t0"] + row[1], row[2]) for row in s["c"]}
            for rank, s in samples.items()}
    common = sorted(set.intersection(*(set(r) for r in rows.values())))
    if len(common) < MIN_COMMON:
        return None
    cap = None if step_ms is None or step_ms <= 0 else ONE_WAIT_STEPS * step_ms
    waited = waits(rows, common[1:], cap)  # the first one's wait began before the span
    spans = [row[common[-1]][0] - row[common[0]][0] for row in rows.values()]
    span = sum(spans) / len(spans)
    if span <= 0:
        return None
    n = len(waited)
    # what the others wait for a rank beyond what it waits itself: two ranks that take turns (a
    # loaded machine) both wait, and neither leads for long
    total = sum(waited.values())
    leads = {rank: (total - w) / (n - 1) - w for rank, w in waited.items()}
    return Round(leads, span, len(common))


def waits(rows: Mapping[int, Mapping[int, tuple[float, float]]], collectives: Sequence[int],
          cap_ms: float | None = None) -> dict[int, float]:
    """Milliseconds each rank waited at ``collectives``: by the device's durations where every
    rank has them, else by arrival; each wait at most ``cap_ms``."""
    total = dict.fromkeys(rows, 0.0)
    most = float("inf") if cap_ms is None else cap_ms
    for seq in collectives:
        arrived = {rank: row[seq][0] for rank, row in rows.items()}
        durations = {rank: row[seq][1] for rank, row in rows.items()}
        if min(durations.values()) >= 0:
            shortest = min(durations.values())
            for rank, duration in durations.items():
                total[rank] += min(most, duration - shortest)
        else:
            last = max(arrived.values())
            for rank, at in arrived.items():
                total[rank] += min(most, last - at)
    return total


__all__ = ["ARRIVALS_EVERY_S", "ARRIVALS_KEPT", "MIN_COMMON", "ONE_WAIT_STEPS", "WINDOW_S", "Round",
           "arrivals_sample", "round_of", "waits"]
