"""What a failure's evidence adds: the NCCL flight recorder's dumps, where the ranks wrote any."""

from __future__ import annotations

from fsdp_orch.backends.files import FileObservation
from fsdp_orch.observe.nccl_env import nccl_env_defaults
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.hang_evidence import with_flight_recorder


def test_a_failure_links_the_flight_recorder_dumps_at_the_path_the_launch_exported(tmp_path):
    timeout = Diagnosis("nccl_timeout", True, "Watchdog caught collective operation timeout", 3)
    attempt = FileObservation(tmp_path, 0, tmp_path)
    assert with_flight_recorder(timeout, attempt.flight_recorder_dumps()) == timeout
    prefix = nccl_env_defaults(str(tmp_path))["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
    for rank in (0, 1):  # stand-ins for what NCCL's watchdog writes on a timeout (no GPU here)
        (tmp_path / f"{prefix.rsplit('/', 1)[1]}{rank}").write_bytes(b"fake flight recorder dump")
    linked = with_flight_recorder(timeout, attempt.flight_recorder_dumps())
    assert linked.category == "nccl_timeout" and linked.line == 3
    assert linked.evidence == (f"Watchdog caught collective operation timeout; flight recorder "
                               f"dumps (2): {prefix}*")
    hang = Diagnosis("hang", True,
                     "rank 1 stuck in train.py:9 main (not in a collective); stacks: /run/stacks")
    assert with_flight_recorder(hang, attempt.flight_recorder_dumps()).evidence == (
        "rank 1 stuck in train.py:9 main (not in a collective); flight recorder dumps "
        f"(2): {prefix}*; stacks: /run/stacks")


def test_a_verdict_asks_for_the_flight_recorders_and_reads_each_hung_ranks_count(tmp_path):
    import shutil
    from pathlib import Path

    from fsdp_orch.observe.attempt_files import FLIGHT_RECORDER_REQUEST
    from fsdp_orch.supervise.hang_evidence import (
        FLIGHT_RECORDER_WAIT_S,
        ask_for_flight_records,
        flight_records,
    )

    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    assert ask_for_flight_records(tmp_path, lambda: now[0]) == 100.0
    assert (tmp_path / FLIGHT_RECORDER_REQUEST).is_file()
    real = Path(__file__).resolve().parents[1] / "fixtures" / "collective_counts" / "gloo-behind"
    shutil.copy(real / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_0")
    dumps = lambda: sorted(str(p) for p in tmp_path.glob("nccl_trace_rank_*"))  # noqa: E731
    # rank 1 has not answered: wait out the window, then too few ranks to compare
    alone = flight_records(dumps, [0, 1], 100.0, lambda: now[0], sleep)
    assert alone.counts == {} and alone.pending == {}  # a queued gloo collective places no rank
    assert sum(slept) >= FLIGHT_RECORDER_WAIT_S - 1e-9
    shutil.copy(real / "nccl_trace_rank_1", tmp_path / "nccl_trace_rank_1")
    slept.clear()
    records = flight_records(dumps, [0, 1], now[0], lambda: now[0], sleep)
    assert records.counts[1] < records.counts[0] and slept == []
    assert records.pending == {}  # gloo: each rank's stack says where it blocks (NCCL's: below)
    assert ask_for_flight_records(tmp_path / "gone", lambda: now[0]) is None


# --- measured on a GPU (scripts/gpu-check.sh, an H200, torch 2.11.0+cu130, NCCL 2.28.9) -----------

def test_a_rank_waiting_for_the_gpu_behind_a_queued_nccl_collective_is_said_to_wait_in_it():
    """The real py-spy dump of a rank blocked in torch.cuda.synchronize() with an all_reduce queued
    behind a long kernel, and NCCL's own flight-recorder dump of that moment: the stack alone says
    "waiting for the GPU", the dump says which collective."""
    from pathlib import Path

    from fsdp_orch.decide.watchdog import HangVerdict
    from fsdp_orch.observe.collective_counts import parse_dumps, pending_collectives
    from fsdp_orch.observe.stack_parse import parse_pyspy_dump
    from fsdp_orch.observe.stacks import StackCapture, StackDump
    from fsdp_orch.supervise.hang_evidence import explain_hang

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    threads = tuple(
        parse_pyspy_dump((fixtures / "stacks" / "pyspy-h200-cuda-synchronize.txt").read_text()))
    folder = fixtures / "collective_counts" / "nccl-h200-timeout"
    pending = pending_collectives(parse_dumps({p.name: p.read_bytes()
                                               for p in folder.glob("nccl_trace_rank_*")}))
    assert pending == {0: "nccl:all_reduce"}
    verdict = HangVerdict(
        2.5, [0], "no progress for 2.5s (window 2s): rank 0 last reported step 40", suspects=[0])
    roots = ("/usr/lib/python3.12", "/opt/torch/.venv/lib/python3.12/site-packages",
             "/work/main/fsdp_orch")
    capture = StackCapture({0: StackDump(0, 1237, threads)}, "/run/stacks")
    on_stack = explain_hang(verdict, capture, library_roots=roots)
    assert on_stack.evidence.startswith(
        "rank 0 stuck in nccl_timeout.py:54 <module> (waiting for the GPU in a CUDA "
        "synchronisation: a collective queued behind it, or a kernel that does not end)")
    with_dump = explain_hang(verdict, capture, library_roots=roots, pending=pending)
    assert with_dump.evidence.startswith(
        "every stuck rank waits in a collective; rank 0 leads (no rank outside a "
        "collective; the first to stop): in all_reduce (queued, per its flight recorder) at "
        "nccl_timeout.py:54 <module>")
