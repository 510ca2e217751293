"""Naming a straggler (issue 45): each rank's arrival at its collectives, sampled from its flight
recorder in the same window of the wall clock (fsdp_orch.observe.arrivals), and the rank the others
keep waiting for over several rounds (fsdp_orch.decide.stragglers). Synthetic flight recorder
entries, shaped as torch 2.13's gloo and NCCL dumps give them."""

from __future__ import annotations

import json
import random

from fsdp_orch.decide.stragglers import (
    LED_ROUNDS,
    ROUNDS,
    WAIT_FRACTION,
    StragglerWatch,
    persistent,
    well_formed,
)
from fsdp_orch.observe.arrivals import ARRIVALS_KEPT, MIN_COMMON, arrivals_sample, round_of
from fsdp_orch.observe.heartbeats import Heartbeat, heartbeat_from_dict

AT = 1_800_000_000  # a round: a multiple of 5 s of the wall clock
NS = 1_000_000_000


def entry(seq: int, created_s: float, pg: int = 0, duration_ms: float | None = None,
          p2p: bool = False) -> dict:
    e = {"collective_seq_id": seq, "pg_id": pg, "is_p2p": p2p, "profiling_name": "gloo:all_reduce",
         "time_created_ns": int(created_s * NS), "state": "scheduled"}
    if duration_ms is not None:
        e["duration_ms"] = duration_ms
    return e


def ranks_entries(lateness_s: dict[int, float], *, step_s: float = 0.1, per_step: int = 4,
                  at: int = AT, jitter_s: float = 0.0, seed: int = 0) -> dict[int, list[dict]]:
    """Each rank's entries over the 6 s before ``at``: ``per_step`` collectives a step, each rank
    arriving ``lateness_s`` after the first (its own compute is that much slower)."""
    rng = random.Random(seed)
    out: dict[int, list[dict]] = {rank: [] for rank in lateness_s}
    t, seq = at - 6.0, 1
    while t < at:
        for k in range(per_step):
            for rank, late in lateness_s.items():
                noise = rng.uniform(0, jitter_s)
                out[rank].append(entry(seq, t + k * step_s / per_step + late / per_step + noise))
            seq += 1
        t += step_s + max(lateness_s.values())
    return out


def samples(entries: dict[int, list[dict]], at: int = AT) -> dict[int, dict]:
    return {rank: arrivals_sample(e, at) for rank, e in entries.items()}


def test_a_sample_holds_one_groups_collectives_of_the_rounds_window():
    entries = [entry(1, AT - 5.0), entry(2, AT - 4.0), entry(3, AT - 2.0),
               entry(7, AT - 1.9, pg=1), entry(4, AT - 1.0, p2p=True), entry(5, AT - 0.7),
               entry(6, AT - 0.2)]
    sample = arrivals_sample(entries, AT)
    assert sample is not None and (sample["at"], sample["pg"]) == (AT, "0")
    # 4.5 s to 0.5 s before the round, pg 0 (the latest's), no point-to-point
    assert [row[0] for row in sample["c"]] == [2, 3, 5]
    assert sample["t0"] == (AT - 4.0) * 1000
    assert [row[1] for row in sample["c"]] == [0.0, 2000.0, 3300.0]
    assert [row[2] for row in sample["c"]] == [-1, -1, -1]  # no device durations on gloo
    assert arrivals_sample([], AT) is None
    assert arrivals_sample([entry(1, AT - 10.0)], AT) is None  # none in the window
    many = [entry(n, AT - 4.0 + n / 1000) for n in range(1, 1000)]
    assert len(arrivals_sample(many, AT)["c"]) == ARRIVALS_KEPT


def test_the_slow_rank_leads_and_two_ranks_taking_turns_do_not():
    slow = round_of(samples(ranks_entries({0: 0.0, 1: 0.1})))  # rank 1: half speed
    assert slow is not None and slow.leader == 1
    assert slow.leads[1] / slow.span_ms > 0.3 and slow.leads[0] == -slow.leads[1]
    turns = round_of(samples(ranks_entries({0: 0.0, 1: 0.0}, jitter_s=0.02, seed=3)))
    assert turns is not None and abs(turns.leads[0]) / turns.span_ms < 0.1


def test_on_a_device_the_waits_are_the_collectives_durations():
    """NCCL with timing: a rank that arrives first spins in the kernel; the CPU's enqueue times
    say little. Rank 2 has the short kernels: the others wait for it."""
    entries = {rank: [entry(seq, AT - 4.0 + seq * 0.01,
                            duration_ms=1.0 if rank == 2 else 9.0) for seq in range(1, 50)]
               for rank in (0, 1, 2)}
    judged = round_of(samples(entries))
    assert judged is not None and judged.leader == 2
    assert judged.leads[2] > 0 > judged.leads[0]


def test_one_long_wait_counts_half_a_step_at_most():
    """A checkpoint rank 0 writes alone: the others wait for it once, long."""
    entries = ranks_entries({0: 0.0, 1: 0.0})
    for shifted in (entries[0][80:], entries[1][81:]):
        for e in shifted:  # rank 1 waits 2 s at collective 80, then both go on in step
            e["time_created_ns"] += 2 * NS
    uncapped = round_of(samples(entries))
    capped = round_of(samples(entries), step_ms=100.0)
    assert uncapped is not None and capped is not None
    assert uncapped.leads[0] / uncapped.span_ms > 0.3
    assert capped.leads[0] / capped.span_ms < 0.05


def test_no_round_without_enough_common_collectives_or_from_two_rounds():
    entries = ranks_entries({0: 0.0, 1: 0.05})
    few = {rank: e[-MIN_COMMON - 20:-20] for rank, e in entries.items()}
    few[1] = few[1][: MIN_COMMON - 1]
    assert round_of(samples(few)) is None
    mixed = samples(entries)
    mixed[1] = {**mixed[1], "at": AT - 5}
    assert round_of(mixed) is None
    assert round_of({0: samples(entries)[0]}) is None


def beats(sampled: dict[int, dict], step_ms: float = 100.0) -> dict[int, Heartbeat]:
    return {rank: Heartbeat(rank=rank, attempt=0, step=50, loss=None, time=AT + 1.0,
                            state="training", pid=100 + rank, host=f"node-{rank // 2}",
                            step_s={"n": 50, "p50": step_ms / 1000, "p95": step_ms / 1000,
                                    "max": step_ms / 1000},
                            arrivals=sample)
            for rank, sample in sampled.items()}


def test_a_straggler_is_named_once_it_persists_and_once_only():
    watch = StragglerWatch(procs_per_node=2)
    named = []
    for n in range(ROUNDS + 3):
        at = AT + 5 * n
        lateness = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.1}  # rank 3, on node 1, at half speed
        found = watch.look(beats(samples(ranks_entries(lateness, at=at, seed=n), at)))
        assert watch.look(beats(samples(ranks_entries(lateness, at=at, seed=n), at))) is None
        named.append(found)
    first = next(i for i, found in enumerate(named) if found is not None)
    assert first == ROUNDS - 1  # as soon as there are ROUNDS rounds
    found = named[first]
    assert (found.rank, found.node, found.host) == (3, 1, "node-1")
    assert found.wait_fraction >= WAIT_FRACTION
    assert found.message() == (f"node 1 (node-1), rank 3: the others wait "
                               f"{found.wait_fraction:.0%} of each step for it")
    assert [f for f in named[first + 1:] if f is not None] == []  # named once


def test_healthy_ranks_on_a_loaded_machine_are_never_named():
    watch = StragglerWatch(procs_per_node=2)
    for n in range(60):
        at = AT + 5 * n
        sampled = samples(ranks_entries({0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}, at=at,
                                        jitter_s=0.05, seed=n), at)
        assert watch.look(beats(sampled)) is None


def test_a_round_waits_for_every_ranks_sample():
    watch = StragglerWatch(procs_per_node=None)
    sampled = samples(ranks_entries({0: 0.0, 1: 0.1}))
    stale = beats(sampled)
    stale[1] = heartbeat_from_dict({**json.loads(stale[1].to_json()),
                                    "arrivals": {**sampled[1], "at": AT - 5}})
    assert watch.look(stale) is None and watch._rounds == []
    assert watch.look(beats(sampled)) is None and len(watch._rounds) == 1


def test_persistence_needs_the_same_leader_in_most_rounds():
    from fsdp_orch.observe.arrivals import Round

    def led_by(rank: int, share: float = 0.5) -> Round:
        return Round({rank: share * 1000, 1 - rank: -share * 1000}, 1000.0, 40)

    assert persistent([led_by(1)] * ROUNDS) == (1, 0.5)
    assert persistent([led_by(1)] * (ROUNDS - 1)) is None
    mixed = [led_by(1)] * (LED_ROUNDS - 1) + [led_by(0)] * (ROUNDS - LED_ROUNDS + 1)
    assert persistent(mixed) is None
    assert persistent([led_by(1, WAIT_FRACTION / 2)] * ROUNDS) is None


def test_a_heartbeats_arrivals_cross_the_wire_and_odd_ones_are_left_out():
    sample = samples(ranks_entries({0: 0.0, 1: 0.1}))[1]
    beat = beats({1: sample})[1]
    assert heartbeat_from_dict(json.loads(beat.to_json())).arrivals == sample
    assert well_formed(sample)
    for odd in (None, [], {"at": AT, "t0": 1.0, "c": []},
                {"at": "x", "t0": 1.0, "c": [[1, 0, -1]]}, {"at": AT, "t0": 1.0, "c": [[1, 0]]},
                {"at": AT, "t0": 1.0, "c": [[1, float("nan"), -1]]},
                {"at": AT, "t0": 1.0, "c": [["1", 0, -1]]}):
        assert not well_formed(odd), odd


def test_the_step_time_is_read_in_seconds_from_the_heartbeat():
    from fsdp_orch.decide.stragglers import median_step_ms

    sampled = samples(ranks_entries({0: 0.0, 1: 0.1}))
    assert median_step_ms(beats(sampled, step_ms=470.0)) == 470.0
    assert median_step_ms({}) is None
