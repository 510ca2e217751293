"""Heartbeat files: the runtime's writer and the supervisor's reader agree, and reading is
robust."""

from __future__ import annotations

import json
import os
import time

import pytest

from fsdp_orch.observe.heartbeats import (
    Heartbeat,
    heartbeat_path,
    parse_heartbeat,
    read_heartbeats,
    write_heartbeat,
)
from fsdp_orch.runtime.heartbeat import HeartbeatWriter


def test_writer_output_is_read_back_per_rank(tmp_path):
    writers = [HeartbeatWriter(tmp_path, attempt=1, rank=r) for r in range(2)]
    before = time.time()
    writers[0].beat(step=0, state="starting")
    writers[0].beat(step=7, loss=2.5, state="training", tokens=512)
    writers[1].beat(step=6, loss=2.75, state="saving")
    beats = read_heartbeats(tmp_path, 1)
    assert sorted(beats) == [0, 1]
    assert (beats[0].step, beats[0].loss, beats[0].state, beats[0].attempt) == (
        7, 2.5, "training", 1)
    assert beats[0].metrics == {"tokens": 512}
    assert beats[0].pid == os.getpid()
    assert before <= beats[0].time <= time.time()
    assert (beats[1].step, beats[1].state) == (6, "saving")
    assert read_heartbeats(tmp_path, 0) == {}  # other attempts are separate


def test_the_runtime_writer_without_the_bootstrap_times_its_steps(tmp_path):
    w = HeartbeatWriter(tmp_path, attempt=0, rank=0)
    for step in range(1, 9):
        w.beat(step=step, loss=1.0, state="training")
        if step == 4:
            w.beat(step=step, state="saving")  # the gap to step 5 is the save's: not timed
            # and the save's end at the same step is no new step
            w.beat(step=step, state="training")
    summary = read_heartbeats(tmp_path, 0)[0].step_s
    assert summary is not None and summary["n"] == 6


def test_file_location_and_fields(tmp_path):
    HeartbeatWriter(tmp_path, attempt=3, rank=5).beat(step=1, loss=None, state="done")
    path = tmp_path / "heartbeats" / "attempt-3" / "rank-5.json"
    assert heartbeat_path(tmp_path, 3, 5) == path
    data = json.loads(path.read_text())
    assert set(data) == {"rank", "attempt", "step", "loss", "time", "state", "pid", "metrics"}
    assert data["loss"] is None


def test_state_sticks_until_changed_and_is_validated(tmp_path):
    w = HeartbeatWriter(tmp_path, attempt=0, rank=0)
    w.beat(state="saving")
    w.beat(step=3, loss=1.0)
    assert read_heartbeats(tmp_path, 0)[0].state == "saving"
    with pytest.raises(ValueError, match="state"):
        w.beat(state="sleeping")


def test_writer_without_run_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = HeartbeatWriter(None, attempt=0, rank=0)
    w.beat(step=1, loss=1.0)
    assert not w.enabled
    assert list(tmp_path.iterdir()) == []


def test_replacement_is_atomic_and_leaves_no_temp_files(tmp_path):
    w = HeartbeatWriter(tmp_path, attempt=0, rank=0)
    for step in range(50):
        w.beat(step=step, loss=float(step))
    names = os.listdir(tmp_path / "heartbeats" / "attempt-0")
    assert names == ["rank-0.json"]
    assert read_heartbeats(tmp_path, 0)[0].step == 49


def test_reader_skips_unreadable_and_foreign_files(tmp_path):
    directory = tmp_path / "heartbeats" / "attempt-0"
    directory.mkdir(parents=True)
    (directory / "rank-0.json").write_text("{truncated")
    (directory / "rank-1.json.123.tmp").write_text("{}")
    (directory / "notes.json").write_text("{}")
    good = Heartbeat(rank=2, attempt=0, step=4, loss=1.5, time=1.0, state="training", pid=1)
    write_heartbeat(directory / "rank-2.json", good)
    mislabeled = Heartbeat(rank=9, attempt=0, step=4, loss=1.5, time=1.0, state="training", pid=1)
    write_heartbeat(directory / "rank-3.json", mislabeled)
    assert read_heartbeats(tmp_path, 0) == {2: good}


def test_nan_loss_survives_the_round_trip(tmp_path):
    HeartbeatWriter(tmp_path, attempt=0, rank=0).beat(step=1, loss=float("nan"))
    loss = read_heartbeats(tmp_path, 0)[0].loss
    assert loss != loss


@pytest.mark.parametrize("text, field", [
    ('{"rank": "0", "attempt": 0, "step": 1, "pid": 1, "time": 1.0, "state": "training"}', "rank"),
    ('{"rank": 0, "attempt": 0, "step": 1, "pid": 1, "time": "now", "state": "training"}', "time"),
    ('{"rank": 0, "attempt": 0, "step": 1, "pid": 1, "time": 1.0, "state": "stuck"}', "state"),
    ('{"rank": 0, "attempt": 0, "step": 1, "pid": 1, "time": 1.0, "state": "done", "loss": "x"}',
     "loss"),
    ('[1, 2]', "object"),
])
def test_parse_heartbeat_names_the_bad_field(text, field):
    with pytest.raises(ValueError, match=field):
        parse_heartbeat(text)


def test_module_level_heartbeat_reads_its_place_from_the_environment(tmp_path, monkeypatch):
    from fsdp_orch.runtime import heartbeat as hb

    monkeypatch.setenv("FSDP_ORCH_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("FSDP_ORCH_ATTEMPT", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(hb, "_default", None)
    hb.heartbeat(4, 0.5, tokens=10)
    hb.heartbeat(5, state="done")
    beat = read_heartbeats(tmp_path, 2)[1]
    assert (beat.step, beat.loss, beat.state, beat.metrics) == (5, 0.5, "done", {"tokens": 10})
