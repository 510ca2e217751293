"""bench/soak.py's pure parts: the fault plan and the checks on what the run left (checkpoints
lost, steps trained twice)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

from fsdp_orch.bootstrap.faults import parse_faults

_PATH = Path(__file__).resolve().parents[2] / "bench" / "soak.py"
_spec = importlib.util.spec_from_file_location("soak_bench", _PATH)
assert _spec is not None and _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
sys.modules["soak_bench"] = soak
_spec.loader.exec_module(soak)


def test_the_plan_draws_every_kind_in_turn_and_numbers_attempts_by_the_faults_that_end_them():
    plan = soak.plan_faults(random.Random(1), 30 * 60, recovery_s=5.0, min_after_s=7.0)
    assert len(plan) >= 60
    first_round = {f.kind for f in plan[:len(soak.KINDS)]}
    assert first_round == set(soak.KINDS)
    attempt = 0
    for fault in plan:
        assert fault.attempt == attempt and fault.after >= 7.0
        attempt += fault.ends_attempt
    assert all(b.at > a.at for a, b in zip(plan, plan[1:], strict=False))
    assert all(3.0 <= f.pause_s <= 8.0 for f in plan if f.kind == "pause")


def test_the_plan_is_seeded_and_its_rank_faults_parse():
    one = soak.plan_faults(random.Random(7), 600, 3.0, 7.0)
    assert one == soak.plan_faults(random.Random(7), 600, 3.0, 7.0)
    text = ";".join(f.env() for f in one if f.kind in soak.IN_RANKS)
    faults = parse_faults(text)
    assert [(f.kind, f.attempt, f.after) for f in faults] == [
        (f.kind, f.attempt, f.after) for f in one if f.kind in soak.IN_RANKS]


def test_a_checkpoint_gone_is_lost_unless_keep_last_newer_ones_were_committed():
    committed = {10: 1.0, 20: 2.0, 30: 3.0, 40: 4.0, 50: 5.0}
    gone = {10: 4.5, 20: 4.6}  # 10 pruned after 40 (3 newer); 20 gone with only 30, 40 newer
    assert soak.checkpoints_lost(committed, gone, present={30, 40, 50}) == [20]
    assert soak.checkpoints_lost(committed, {10: 4.5}, present={20, 30, 40, 50}) == []


def test_steps_trained_twice_and_what_the_last_commit_forced():
    by_attempt = {0: set(range(1, 26)), 1: set(range(21, 41)), 2: set(range(31, 51))}
    assert soak.trained_twice(by_attempt) == 5 + 10
    # attempt 0 reached 25 with 20 committed; attempt 1 reached 40 with 30 committed, but attempt 2
    # resumed from 20: 10 steps beyond what was forced
    forced, beyond = soak.forced_rework({0: 25, 1: 40}, {0: None, 1: 20, 2: 20}, {1: 20, 2: 30})
    assert (forced, beyond) == (5 + 10, 10)
