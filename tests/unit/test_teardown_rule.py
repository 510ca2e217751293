"""A rank stuck after the job's last step (fsdp_orch.decide.teardown): pure, with heartbeats,
real py-spy dumps (tests/fixtures/stacks) and the time passed in."""

from __future__ import annotations

import json
from pathlib import Path

from fsdp_orch.decide.teardown import (
    TEARDOWN_WINDOW_S,
    past_the_end,
    returned_step,
    teardown_place,
    trainer_final_step,
)
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.stack_parse import parse_pyspy_dump
from fsdp_orch.observe.user_frame import default_library_roots

WATCH = Watch.model_validate({"heartbeat_timeout": "10s", "startup_timeout": "60s"})
STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"
ROOTS = default_library_roots()


def beat(rank: int, step: int, t: float, state: str = "training", **probe: float) -> Heartbeat:
    return Heartbeat(rank=rank, attempt=0, step=step, loss=1.0, time=t, state=state, pid=1,
                     **probe)  # type: ignore[arg-type]


def dump(name: str):  # type: ignore[no-untyped-def]
    return parse_pyspy_dump((STACKS / name).read_text())


def test_a_rank_at_the_last_step_while_a_peer_returned_is_past_the_end():
    beats = {0: beat(0, 300, 100.0, "done"), 1: beat(1, 300, 99.5, python_at=99.5)}
    past = past_the_end(beats, 2, now=120.0, watch=WATCH)
    assert past is not None
    assert (past.step, past.returned, past.stuck, past.since) == (300, [0], [1], 100.0)


def test_a_rank_behind_the_last_step_or_saving_or_busy_is_not_past_the_end():
    done = beat(0, 300, 100.0, "done")
    assert past_the_end({0: done, 1: beat(1, 299, 99.0)}, 2, now=120.0, watch=WATCH) is None
    assert past_the_end({0: done, 1: beat(1, 300, 99.0, "saving")}, 2, 120.0, WATCH) is None
    # writing its final model, or running Python within the window: busy, not stuck
    writing = beat(1, 300, 99.0, io_at=119.0, python_at=99.0)
    assert past_the_end({0: done, 1: writing}, 2, now=120.0, watch=WATCH) is None
    in_python = beat(1, 300, 99.0, python_at=118.0)
    assert past_the_end({0: done, 1: in_python}, 2, now=120.0, watch=WATCH) is None
    # the interpreter held is no signal either way: the stack decides
    held = beat(1, 300, 99.0, python_at=99.0, held_since=100.0)
    assert past_the_end({0: done, 1: held}, 2, now=100.0 + TEARDOWN_WINDOW_S, watch=WATCH)


def test_no_rank_returned_or_every_rank_returned_or_one_unheard_is_not_this_rule():
    assert past_the_end({0: beat(0, 300, 100.0), 1: beat(1, 300, 100.0)}, 2, 200.0, WATCH) is None
    both = {0: beat(0, 300, 100.0, "done"), 1: beat(1, 300, 100.0, "done")}
    assert past_the_end(both, 2, now=200.0, watch=WATCH) is None
    assert past_the_end({0: beat(0, 300, 100.0, "done")}, 2, now=200.0, watch=WATCH) is None


def test_the_returned_step_is_the_step_every_rank_reached():
    assert returned_step({0: beat(0, 300, 1.0, "done"), 1: beat(1, 300, 1.0)}) == 300
    assert returned_step({0: beat(0, 300, 1.0, "done"), 1: beat(1, 299, 1.0)}) is None
    assert returned_step({0: beat(0, 300, 1.0), 1: beat(1, 300, 1.0)}) is None


def test_a_native_call_held_at_the_scripts_top_level_is_teardown():
    place = teardown_place(dump("pyspy-native-held-at-top-level.txt"), ROOTS)
    assert place == ("<module> at teardown.py:7 "
                     "(native: pause < ffi_call < _call_function_pointer < _ctypes_callproc)")


def test_a_function_of_the_scripts_own_or_a_collective_is_not_teardown():
    assert teardown_place(dump("pyspy-native-held-in-own-function.txt"), ROOTS) is None
    # rank 0 of a DDP script waiting in all_reduce, with and without native frames
    assert teardown_place(dump("pyspy-torchrun-rank0-native.txt"), ROOTS) is None
    assert teardown_place(dump("pyspy-torchrun-rank0.txt"), ROOTS) is None
    assert teardown_place([], ROOTS) is None


def test_a_trainer_checkpoint_at_max_steps_is_the_last():
    assert trainer_final_step(json.dumps({"global_step": 300, "max_steps": 300})) == 300
    assert trainer_final_step(json.dumps({"global_step": 200, "max_steps": 300})) is None
    assert trainer_final_step(json.dumps({"global_step": 300, "max_steps": -1})) is None
    assert trainer_final_step("not json") is None
    assert trainer_final_step(None) is None
    assert trainer_final_step("[]") is None
