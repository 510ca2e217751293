"""The bootstrap's write meter: I/O progress from /proc/self/io, the clock and the reader
injected."""

from __future__ import annotations

import os
from pathlib import Path

from fsdp_orch.bootstrap.io_meter import MIN_BYTES_PER_SAMPLE, WriteMeter, parse_io, read_own_io

PROC_IO = """rchar: 323934931
wchar: 323929600
syscr: 632687
syscw: 632675
read_bytes: 0
write_bytes: 323932160
cancelled_write_bytes: 0
"""


def test_parse_io_reads_both_write_counters():
    assert parse_io(PROC_IO) == (323929600, 323932160)
    assert parse_io("rchar: 1\n") is None
    assert parse_io("wchar: x\nwrite_bytes: 1\n") is None


def test_progress_needs_min_bytes_between_two_samples_in_either_counter():
    readings = iter([(0, 0), (300, 4096), (300 + MIN_BYTES_PER_SAMPLE, 4096), (0 + 10**9, 4096),
                     (10**9, 4096 + MIN_BYTES_PER_SAMPLE)])
    now = iter([1.0, 2.0, 3.0, 4.0])
    meter = WriteMeter(clock=lambda: next(now), read=lambda: next(readings))
    meter.sample()  # a heartbeat file and a log line: not progress
    assert meter.io_at is None
    meter.sample()  # wchar grew by min_bytes
    assert meter.io_at == 1.0
    meter.sample()
    assert meter.io_at == 2.0
    meter.sample()  # write_bytes grew inside one long write(): wchar did not move
    assert meter.io_at == 3.0


def test_an_unreadable_counter_is_no_progress():
    meter = WriteMeter(clock=lambda: 5.0, read=lambda: None)
    meter.sample()
    assert meter.io_at is None


def test_this_process_writing_a_file_is_seen(tmp_path: Path):
    assert read_own_io() is not None  # Linux's procfs: what every cluster node has
    meter = WriteMeter()
    (tmp_path / "blob").write_bytes(os.urandom(4 * MIN_BYTES_PER_SAMPLE))
    meter.sample()
    assert meter.io_at is not None
