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
    new = encode_step_mark(31, 1000.5)
    # reads that raced a write: the new step and the old time and step, or both but the last step
    assert decode_step_mark(new[:16] + raw[16:]) is None
    assert decode_step_mark(new[:24] + raw[24:]) is None
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


def test_the_mark_is_32_bytes_of_this_hosts_byte_order_and_an_earlier_text_one_still_reads():
    import struct

    raw = encode_step_mark(30, 1000.25)
    assert len(raw) == 32 and struct.unpack("=qqdq", raw)[1:] == (30, 1000.25, 30)
    other_order = struct.pack("<qqdq" if struct.pack("=q", 1)[0] == 0 else ">qqdq",
                              *struct.unpack("=qqdq", raw))
    assert decode_step_mark(other_order) is None  # its magic reads as another number
    text = b"%20d %20.6f %20d\n" % (30, 1000.25, 30)  # the mark of a bootstrap before issue 64
    assert decode_step_mark(text) == (30, 1000.25)


def test_every_mark_is_read_at_once_through_the_mapping(tmp_path):
    path = tmp_path / "rank-1.json"
    path.write_text(json.dumps(beat(0, 999.0)))
    mark = StepMark(str(path))
    assert mark._steps is not None  # three stores a step, no write call
    for step in range(1, 200):
        mark.mark(step, 1000.0 + step / 1000)
        read = read_heartbeat_file(str(path))
        assert (read.step, read.progress_at) == (step, 1000.0 + step / 1000)


def test_a_new_mark_file_holds_no_step_and_a_longer_one_is_cut(tmp_path):
    path = tmp_path / "rank-1.json"
    marks = tmp_path / "rank-1.step"
    marks.write_bytes(b"%20d %20.6f %20d\n" % (5, 1.0, 5) + b"x" * 100)  # an earlier writer's
    mark = StepMark(str(path))
    assert decode_step_mark(marks.read_bytes()) is None and marks.stat().st_size == 32
    mark.mark(7, 2.5)
    assert decode_step_mark(marks.read_bytes()) == (7, 2.5)


def test_without_a_mapping_each_mark_is_one_pwrite(tmp_path, monkeypatch):
    import mmap

    def refuse(*args, **kwargs):
        raise OSError("no shared mapping on this file system")

    monkeypatch.setattr(mmap, "mmap", refuse)
    path = tmp_path / "rank-1.json"
    mark = StepMark(str(path))
    assert mark._steps is None
    mark.mark(3, 4.5)
    assert decode_step_mark((tmp_path / "rank-1.step").read_bytes()) == (3, 4.5)


def test_an_odd_step_or_time_never_breaks_the_step(tmp_path):
    mark = StepMark(str(tmp_path / "rank-1.json"))
    marks = tmp_path / "rank-1.step"
    mark.mark(4, 5)  # an int time (a test's clock): packed as a double instead
    assert decode_step_mark(marks.read_bytes()) == (4, 5.0)
    mark.mark(2**70, 6.0)  # no room in 8 bytes: left out, the last mark stands
    assert decode_step_mark(marks.read_bytes()) == (4, 5.0)
