"""The step a rank's main thread marks at a step its heartbeat file does not have yet: read with
the file, it is the step the supervisor judges (observe.step_marks)."""

from __future__ import annotations

import json

from fsdp_orch.observe.heartbeats import read_heartbeat_file
from fsdp_orch.observe.step_marks import (
    StepMark,
    decode_step_mark,
    encode_step_mark,
    step_mark_path,
)


def beat(step: int, at: float, state: str = "training") -> dict:  # type: ignore[type-arg]
    return {"rank": 1, "attempt": 0, "step": step, "loss": None, "time": at, "state": state,
            "pid": 7, "progress_at": at}


def test_a_mark_reads_back_and_a_torn_one_is_ignored():
    raw = encode_step_mark(30, 1000.25)
    assert decode_step_mark(raw) == (30, 1000.25)
    torn = encode_step_mark(31, 1000.5)[:30] + raw[30:]  # a read that raced a write
    assert decode_step_mark(torn) is None
    assert decode_step_mark(b"") is None and decode_step_mark(b"x y x\n") is None


def test_a_newer_mark_gives_the_file_its_step_and_keeps_its_write_time(tmp_path):
    path = tmp_path / "rank-1.json"
    path.write_text(json.dumps(beat(29, 1000.0)))
    StepMark(str(path)).mark(30, 1000.04)
    assert step_mark_path(str(path)) == str(tmp_path / "rank-1.step")
    read = read_heartbeat_file(str(path))
    assert (read.step, read.progress_at, read.state) == (30, 1000.04, "training")
    assert read.time == 1000.0  # a rank held since its last write still looks held


def test_an_older_mark_or_a_finished_rank_keeps_the_file_as_written(tmp_path):
    path = tmp_path / "rank-1.json"
    StepMark(str(path)).mark(30, 1000.04)
    path.write_text(json.dumps(beat(31, 1001.0)))  # the file was rewritten after the mark
    assert read_heartbeat_file(str(path)).step == 31
    path.write_text(json.dumps(beat(29, 999.0, state="done")))
    assert read_heartbeat_file(str(path)).state == "done"
    (tmp_path / "rank-1.step").write_bytes(b"garbage")
    path.write_text(json.dumps(beat(29, 999.0)))
    assert read_heartbeat_file(str(path)).step == 29
