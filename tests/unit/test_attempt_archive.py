"""An ended attempt's logs kept as their head and tail, gzipped (supervise/attempt_archive.py): the
cuts (pure), the archive of a real run folder, and the readers (``logs``, ``diagnose``) on it."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pytest

from fsdp_orch.control.logs import node_logs, show_logs
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.store import Store
from fsdp_orch.supervise.attempt_archive import (
    LogCut,
    archive_attempt,
    attempt_logs,
    open_log,
    plan_cuts,
    read_log,
    trimmed,
)

RANK_LOG = "node-0/j1-a0_standby/attempt_0/1/stderr.log"


def test_a_log_within_head_and_tail_is_kept_whole_a_larger_one_cut():
    assert plan_cuts({"b.log": 30, "a.log": 10}, head=10, tail=20) == [
        LogCut("a.log", 10, 10, 0), LogCut("b.log", 30, 30, 0)]
    [cut] = plan_cuts({"c.log": 31}, head=10, tail=20)
    assert cut == LogCut("c.log", 31, 10, 20) and not cut.whole


def test_trimmed_keeps_whole_lines_and_says_what_it_left_out():
    text = b"".join(f"line {i}\n".encode() for i in range(100))
    first, last = text[:20], text[-20:]  # "line 0...line 2" and "line 97...line 99\n"
    kept = trimmed(first, last, len(text))
    assert kept.startswith(b"line 0\nline 1\n[fsdp-orch] ")
    assert kept.endswith(b"\nline 98\nline 99\n")
    left_out = len(text) - len(b"line 0\nline 1\n") - len(b"line 98\nline 99\n")
    assert f"[fsdp-orch] {left_out} bytes of this log left out here" in kept.decode()


def test_trimmed_keeps_a_chunk_without_line_ends_as_it_is():
    kept = trimmed(b"x" * 8, b"y" * 8, 100)
    assert kept.startswith(b"x" * 8 + b"[fsdp-orch] 84 bytes") and kept.endswith(b"\n" + b"y" * 8)


def write_attempt(run_dir: Path, attempt: int, console: bytes, rank: bytes) -> Path:
    folder = run_dir / f"attempt-{attempt}"
    (folder / RANK_LOG).parent.mkdir(parents=True)
    (folder / "console-node-0.log").write_bytes(console)
    (folder / RANK_LOG).write_bytes(rank)
    (folder / "launch.sh").write_text("#!/bin/bash\n")
    return folder


def test_archive_attempt_keeps_head_and_tail_gzipped_and_nothing_else_changes(tmp_path: Path):
    console = b"".join(f"[default0]:step={i} loss=1.0\n".encode() for i in range(20_000))
    traceback = b"Traceback (most recent call last):\nRuntimeError: the end\n"
    folder = write_attempt(tmp_path, 3, console + traceback, b"small\n")
    os.utime(folder / "console-node-0.log", (1_000_000, 1_000_000))
    done = archive_attempt(tmp_path, 3, head=4096, tail=8192)
    assert done.logs == 2 and done.bytes_before == len(console + traceback) + 6
    assert done.bytes_after < 8192 and done.bytes_after == sum(
        p.stat().st_size for p in folder.rglob("*.gz"))
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "console-node-0.log.gz", "launch.sh", RANK_LOG + ".gz"]
    kept = gzip.decompress((folder / "console-node-0.log.gz").read_bytes())
    assert kept.startswith(b"[default0]:step=0 loss=1.0\n") and kept.endswith(traceback)
    assert b"bytes of this log left out here" in kept and len(kept) < 4096 + 8192 + 200
    assert gzip.decompress((folder / (RANK_LOG + ".gz")).read_bytes()) == b"small\n"
    assert (folder / "console-node-0.log.gz").stat().st_mtime == 1_000_000
    assert (folder / "console-node-0.log.gz").stat().st_mode & 0o777 == 0o600
    assert archive_attempt(tmp_path, 3) == type(done)(0, 0, 0)  # idempotent
    assert archive_attempt(tmp_path, 9).logs == 0  # no such attempt: nothing to do


def test_flight_recorder_dumps_are_gzipped_whole_however_large(tmp_path: Path):
    folder = write_attempt(tmp_path, 1, b"log\n", b"")
    dump = bytes(range(256)) * 400  # 100 KiB, more than head + tail below
    (folder / "nccl_trace_rank_1").write_bytes(dump)
    assert archive_attempt(tmp_path, 1, head=1024, tail=1024).logs == 3
    assert read_log(folder / "nccl_trace_rank_1.gz") == dump
    assert sorted(p.name for p in folder.glob("nccl_trace_rank_*")) == ["nccl_trace_rank_1.gz"]


def test_a_log_copied_again_after_its_archive_is_archived_again(tmp_path: Path):
    folder = write_attempt(tmp_path, 0, b"early copy\n", b"")
    archive_attempt(tmp_path, 0)
    (folder / "console-node-0.log").write_bytes(b"early copy\nlast words\n")  # the agent's last
    assert attempt_logs(folder) == {"console-node-0.log": 22}
    archive_attempt(tmp_path, 0)
    assert read_log(folder / "console-node-0.log.gz") == b"early copy\nlast words\n"
    assert not (folder / "console-node-0.log").exists()


def test_growth_per_attempt_is_bounded_whatever_the_log_size(tmp_path: Path):
    """Random (incompressible) logs of 64 KiB and 4 MiB keep the same bytes once archived."""
    sizes = []
    for attempt, size in enumerate((64 * 1024, 4 * 1024 * 1024)):
        data = os.urandom(size // 2).hex().encode()
        write_attempt(tmp_path, attempt, data, b"")
        sizes.append(archive_attempt(tmp_path, attempt, head=8192, tail=16384).bytes_after)
    assert abs(sizes[0] - sizes[1]) < 512 and sizes[1] < 8192 + 16384


def test_readers_take_a_log_archived_or_not(tmp_path: Path):
    plain = tmp_path / "a.log"
    plain.write_bytes(b"RuntimeError: boom\n")
    packed = tmp_path / "b.log.gz"
    packed.write_bytes(gzip.compress(b"RuntimeError: boom\n"))
    assert read_log(plain) == read_log(packed) == b"RuntimeError: boom\n"
    with open_log(packed) as f:
        assert f.read() == "RuntimeError: boom\n"


def test_node_logs_prefers_the_plain_log_and_finds_the_archived_one(tmp_path: Path):
    (tmp_path / "console-node-0.log").write_text("a")
    (tmp_path / "console-node-0.log.gz").write_bytes(gzip.compress(b"a"))
    (tmp_path / "console-node-1.log.gz").write_bytes(gzip.compress(b"b"))
    assert node_logs(tmp_path) == {0: tmp_path / "console-node-0.log",
                                   1: tmp_path / "console-node-1.log.gz"}


def test_fsdp_orch_logs_shows_an_archived_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    index = JobIndex(Store(tmp_path / "jobs.db"), [str(tmp_path / "runs")], warn=lambda text: None)
    run_dir = tmp_path / "runs" / "j1"
    spec = {"launcher": "torchrun", "_resolved": {"nproc_per_node": 2, "world_size": 2}}
    index.journal("j1", role="submit", run_dir=str(run_dir)).submitted(
        name="n", cluster="c", kind="local", spec_json=json.dumps(spec), run_dir=str(run_dir),
        job_file=None, spec_hash=None, idempotency_key=None)
    write_attempt(run_dir, 0, b"[default0]:step 1 on rank 0\n[default1]:step 1 on rank 1\n", b"")
    archive_attempt(run_dir, 0)
    out = io.StringIO()
    assert show_logs(index, "j1", out=out, attempt=0, rank=1) == 0
    assert out.getvalue() == "step 1 on rank 1\n"


def test_diagnose_reads_an_archived_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from argparse import Namespace

    from fsdp_orch.cli.commands.diagnose import run

    path = tmp_path / "console-node-0.log.gz"
    path.write_bytes(gzip.compress(b"[default1]:[fsdp-orch fault] rank 1: injected crash at step 3"
                                   b": exiting with code 1\n"))
    assert run(Namespace(files=[str(path)], json=True)) == 0
    assert json.loads(capsys.readouterr().out)["category"] == "injected_fault"
