"""Naming a straggler: the rank the others keep waiting for (``observe.arrivals``). Over the last
``ROUNDS`` rounds of samples (the bootstrap samples every 5 s, so about 30 s), a rank is named when
it led in at least ``LED_ROUNDS`` of them and its leads add up to ``WAIT_FRACTION`` of the time
they spanned: the others waited that share of their time for it. A burst of load, a checkpoint or
an evaluation on one rank is one round or two, not a straggler; two healthy ranks on a loaded
machine take turns, and their leads cancel. Pure: the caller journals what ``look`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_orch.observe.arrivals import Round, round_of

ROUNDS = 6
LED_ROUNDS = 4
# A rank at half its peers' speed makes them wait about half their time for it
# (bench/stragglers.py); healthy ranks on this loaded test machine stayed near 0.1 over 6 rounds.
WAIT_FRACTION = 0.15


@dataclass(frozen=True)
class Straggler:
    rank: int
    node: int | None
    host: str | None
    wait_fraction: float  # the others' mean over the persistent rounds

    def message(self) -> str:
        where = "" if self.node is None else f"node {self.node}{_host(self.host)}, "
        return (f"{where}rank {self.rank}: the others wait {self.wait_fraction:.0%} of each step "
                "for it")


def _host(host: str | None) -> str:
    return f" ({host})" if host else ""


class StragglerWatch:
    """One per attempt: ``look`` at each of the loop's looks."""

    def __init__(self, procs_per_node: int | None):
        self.procs_per_node = procs_per_node
        self._round: Any = None  # the round last judged
        self._rounds: list[Round] = []  # the latest ROUNDS
        self.named: set[int] = set()

    def look(self, beats: Mapping[int, Any]) -> Straggler | None:
        """A straggler the first time it is persistent in this attempt; else None."""
        # a round is judged once, when every rank has sampled it; the samples are checked then,
        # not at each of the loop's looks
        rounds = {b.arrivals.get("at") if type(b.arrivals) is dict else None
                  for b in beats.values()}
        if len(beats) < 2 or len(rounds) != 1 or None in rounds or rounds == {self._round}:
            return None
        samples = {rank: beat.arrivals for rank, beat in beats.items()}
        if not all(well_formed(sample) for sample in samples.values()):
            return None
        self._round = rounds.pop()
        judged = round_of(samples, median_step_ms(beats))
        if judged is None:
            return None
        self._rounds = [*self._rounds[1 - ROUNDS:], judged]
        found = persistent(self._rounds)
        if found is None or found[0] in self.named:
            return None
        rank, fraction = found
        self.named.add(rank)
        node = beats[rank].node
        if node is None and self.procs_per_node:
            node = rank // self.procs_per_node
        return Straggler(rank, node, beats[rank].host, fraction)


def median_step_ms(beats: Mapping[int, Any]) -> float | None:
    """The median of the ranks' median step times (their heartbeats' ``step_s``, in seconds),
    in milliseconds."""
    times = sorted(1000.0 * b.step_s["p50"] for b in beats.values()
                   if isinstance(b.step_s, dict) and type(b.step_s.get("p50")) in (int, float))
    return times[len(times) // 2] if times else None


def persistent(rounds: list[Round]) -> tuple[int, float] | None:
    """(rank, the share of the time the others waited for it) when ``rounds`` (ROUNDS of them)
    name one straggler: it led in LED_ROUNDS and its leads add up to WAIT_FRACTION."""
    if len(rounds) < ROUNDS:
        return None
    leaders = [r.leader for r in rounds]
    rank = max(set(leaders), key=leaders.count)
    if leaders.count(rank) < LED_ROUNDS:
        return None
    fraction = sum(r.leads.get(rank, 0.0) for r in rounds) / sum(r.span_ms for r in rounds)
    return (rank, min(1.0, fraction)) if fraction >= WAIT_FRACTION else None


def well_formed(sample: Any) -> bool:
    """A heartbeat's ``arrivals`` of the shape ``observe.arrivals`` writes (it crossed a wire)."""
    if (type(sample) is not dict or type(sample.get("t0")) not in (int, float)
            or type(sample.get("at")) is not int):
        return False
    rows = sample.get("c")
    return (type(rows) is list and bool(rows)
            and all(type(row) is list and len(row) == 3 and type(row[0]) is int
                    and all(type(v) in (int, float) and v - v == 0 for v in row[1:])
                    for row in rows))


__all__ = ["LED_ROUNDS", "ROUNDS", "WAIT_FRACTION", "persistent", "Straggler", "StragglerWatch",
           "well_formed"]
