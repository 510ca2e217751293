"""The measured peak beside fit's estimate (issue 46, "after the job"): each rank's heartbeat
carries ``torch.cuda.max_memory_allocated`` once the rank initialised CUDA; the supervisor records
the largest, when it first shows and when it grows by more than 1%; ``status`` shows it beside the
estimate ``submit`` recorded. No GPU here: ``torch.cuda`` is a stand-in module (named so below) in
the reading test; the rest is the real heartbeat file, journal, fold and status line."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from fsdp_orch.bootstrap.device_memory import cuda_peak_bytes
from fsdp_orch.cli.status_table import memory_line
from fsdp_orch.decide.hang_window import Window
from fsdp_orch.observe.heartbeats import Heartbeat, heartbeat_from_dict, parse_heartbeat
from fsdp_orch.record import event_types
from fsdp_orch.record.events import EventWriter, read_job
from fsdp_orch.record.fold import fold_lines
from fsdp_orch.record.journal import Journal
from fsdp_orch.supervise.progress_events import ProgressEvents

GIB = 1 << 30


def stand_in_cuda(initialised: bool, peak: int) -> types.ModuleType:
    """A stand-in for ``torch.cuda`` (no GPU on this machine): the two calls the reading makes."""
    module = types.ModuleType("torch.cuda")
    module.is_initialized = lambda: initialised  # type: ignore[attr-defined]
    module.max_memory_allocated = lambda: peak  # type: ignore[attr-defined]
    return module


def test_the_peak_is_read_only_where_the_rank_initialised_cuda(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "torch.cuda", raising=False)
    assert cuda_peak_bytes() is None  # torch.cuda never loaded: nothing imported to look
    assert "torch.cuda" not in sys.modules
    monkeypatch.setitem(sys.modules, "torch.cuda", stand_in_cuda(False, 0))
    assert cuda_peak_bytes() is None  # a CPU job that imported torch
    monkeypatch.setitem(sys.modules, "torch.cuda", stand_in_cuda(True, 5 * GIB))
    assert cuda_peak_bytes() == 5 * GIB

    def lost() -> int:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    broken = stand_in_cuda(True, 0)
    broken.max_memory_allocated = lost  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.cuda", broken)
    assert cuda_peak_bytes() is None  # never a failed heartbeat write


def beat(rank: int, step: int, peak: int | None) -> Heartbeat:
    return Heartbeat(rank=rank, attempt=1, step=step, loss=1.0, time=100.0 + step,
                     state="training", pid=10 + rank, device_peak=peak)


def test_the_heartbeat_file_carries_the_peak_and_refuses_a_bad_one() -> None:
    assert parse_heartbeat(beat(0, 3, 7 * GIB).to_json()).device_peak == 7 * GIB
    assert "device_peak" not in beat(0, 3, None).to_json()  # CPU ranks' files are as before
    bad = {"rank": 0, "attempt": 1, "step": 1, "pid": 2, "time": 1.0, "state": "training",
           "device_peak": -1}
    with pytest.raises(ValueError, match="device_peak: expected a byte count"):
        heartbeat_from_dict(bad)


def test_the_supervisor_records_the_largest_rank_and_status_shows_it_beside_the_estimate(
        tmp_path: Path) -> None:
    journal = Journal(EventWriter(tmp_path, "supervisor"), "j1")
    journal.fit_estimated(72.8, 64.2, 80.0)  # what submit's check records
    progress = ProgressEvents(journal, clock=lambda: 0.0)
    window = Window(30.0, "fixed")
    progress.progress({0: beat(0, 1, 40 * GIB), 1: beat(1, 1, 41 * GIB)}, window)
    progress.progress({0: beat(0, 2, 41 * GIB), 1: beat(1, 2, 41 * GIB + GIB // 200)}, window)
    progress.progress({0: beat(0, 3, 61 * GIB), 1: beat(1, 3, 42 * GIB)}, window, final=True)
    lines, _ = read_job(tmp_path)
    peaks = [(e["rank"], e["peak_bytes"]) for e in lines if e["kind"] == "device_peak"]
    assert peaks == [(1, 41 * GIB), (0, 61 * GIB)]  # growth under 1% is not another line
    status = fold_lines([{"kind": "submitted", "at": 1.0, "seq": 0, "job": "j1", "name": "big",
                          "cluster": "slurm", "run_dir": str(tmp_path)}, *lines], "j1")
    assert status is not None
    assert status.to_json()["memory"] == {
        "estimated_peak_gib_per_gpu": 72.8, "estimated_tensor_gib_per_gpu": 64.2,
        "gpu_memory_gib": 80.0, "measured_tensor_gib_per_gpu": 61.0, "measured_rank": 0,
        "measured_attempt": 1}
    assert memory_line(status) == (
        "memory: estimated 72.8 GiB a GPU (tensors 64.2) of 80.0; measured tensors 61.00 GiB "
        "(rank 0, attempt 1, max_memory_allocated)")


def test_a_job_with_neither_shows_no_memory() -> None:
    status = fold_lines([{"kind": "submitted", "at": 1.0, "seq": 0, "job": "j1", "name": "cpu",
                          "cluster": "local", "run_dir": "/r"}], "j1")
    assert status is not None and status.to_json()["memory"] is None
    assert memory_line(status) is None
    assert event_types.EVENT_TYPES["device_peak"] is event_types.DevicePeak
