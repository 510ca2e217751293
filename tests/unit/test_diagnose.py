"""The failure classifier: real failure lines from public issue trackers, and the root-cause rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_orch.supervise.diagnose import CATEGORIES, LineScanner, diagnose_exit, diagnose_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = [*json.loads((FIXTURES / "failure-logs.json").read_text()),
        *json.loads((FIXTURES / "failure-logs-extra.json").read_text())]


@pytest.mark.parametrize("case", REAL, ids=[f"{c['category']}-{i}" for i, c in enumerate(REAL)])
def test_real_failure_lines_are_classified_as_labelled(case):
    result = diagnose_text(case["text"])
    assert result.category == case["category"], (case["source"], result)
    assert result.evidence and any(result.evidence in line for line in case["text"].splitlines())
    assert result.retryable is (case["category"] not in ("user_code_error", "checkpoint_error"))


def test_every_category_but_hang_and_unknown_has_a_real_fixture():
    labelled = {c["category"] for c in REAL}
    assert set(CATEGORIES) - labelled == {"hang", "unknown"}


def test_the_first_root_cause_wins_over_its_consequences():
    log = "\n".join([
        "[default0]:step=10 loss=4.1",
        "[default1]:Traceback (most recent call last):",
        '[default1]:  File "train.py", line 40, in <module>',
        "[default1]:    batch = cache[key]",
        "[default1]:KeyError: 'tokens'",
        "[default0]:[rank0]:[E1206 18:44:12 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 "
        "milliseconds before timing out.",
        "W1121 12:00:00.000 1 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 7 "
        "closing signal SIGTERM",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ])
    result = diagnose_text(log)
    assert result.category == "user_code_error"
    assert result.evidence == "KeyError: 'tokens'"
    assert result.line == 5
    assert result.retryable is False


def test_consequence_lines_alone_are_not_a_cause():
    log = ("W0409 07:28:49 1359 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1365 "
           "closing signal SIGTERM\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    assert diagnose_text(log).category == "unknown"


def test_exceptions_that_name_a_known_cause_are_not_user_errors():
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert diagnose_text(log).category == "cuda_oom"
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.\n")
    assert diagnose_text(log).category == "rendezvous_failure"


def test_a_healthy_training_log_is_unknown_not_a_false_alarm():
    log = "\n".join([
        "W1121 12:00:00 torch/distributed/run.py:803] Setting OMP_NUM_THREADS environment variable",
        "[default0]:/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:86: UserWarning: None of the inputs have requires_grad=True.",
        "[default0]:  warnings.warn(",
        "[default0]:step=1 loss=5.5451",
        "[default1]:NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "[default0]:checkpoint saved at step 50",
    ])
    assert diagnose_text(log).category == "unknown"
    assert diagnose_text(log).evidence is None


def test_weak_signs_count_only_without_a_strong_one():
    weak = "host:1:2 [0] misc/socket.cc:518 NCCL WARN Net : Call to recv failed : Broken pipe\n"
    assert diagnose_text(weak).category == "nccl_error"
    strong_later = weak + "slurmstepd: error: *** JOB 42 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO PREEMPTION ***\n"
    assert diagnose_text(strong_later).category == "preemption_or_node_lost"


def test_line_scanner_reports_the_cause_as_soon_as_it_is_written():
    scanner = LineScanner()
    assert scanner.feed("[default0]:step=3 loss=1.0") is None
    hit = scanner.feed("[default1]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] "
                       "Read error [127.0.0.1]:25266: Connection reset by peer")
    assert hit is not None and hit.category == "gloo_timeout_or_peer_lost"
    assert scanner.feed("KeyError: 'late'") is hit


@pytest.mark.parametrize("code,category", [(0, "unknown"), (1, "unknown"), (-9, "unknown"),
                                           (137, "unknown"), (-15, "preemption_or_node_lost"),
                                           (None, "preemption_or_node_lost")])
def test_exit_codes(code, category):
    result = diagnose_exit(code)
    assert result.category == category and result.retryable
    if code in (-9, 137):
        assert "SIGKILL" in result.evidence


def test_cli_diagnose_prints_one_object_per_file_and_a_list_for_several(tmp_path):
    a = tmp_path / "a.log"
    b = tmp_path / "b.log"
    a.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 388.00 MiB.\n")
    b.write_text("all good\n")
    one = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose", str(a), "--json"],
                         capture_output=True, text=True, check=True)
    obj = json.loads(one.stdout)
    assert obj["category"] == "cuda_oom" and obj["retryable"] is True and "CUDA out of memory" in obj["evidence"]
    assert "batch size" in obj["hint"] and "offload_params" in obj["hint"]
    two = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose", str(a), str(b), "--json"],
                         capture_output=True, text=True, check=True)
    listed = json.loads(two.stdout)
    assert [r["category"] for r in listed] == ["cuda_oom", "unknown"]
    assert "fsdp-orch logs" in listed[1]["hint"]
    missing = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose", str(tmp_path / "nope.log")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.log" in missing.stderr and "Traceback" not in missing.stderr


def test_torchruns_own_traceback_and_failure_summary_are_not_a_user_error():
    log = "\n".join([
        "[fsdp-orch fault] rank 0: injected crash at step 2: exiting with code 1",
        "E1121 14:49:00 1 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
        "local_rank: 0 (pid: 9) of binary: /venv/bin/python",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>',
        "    main()",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
    ])
    assert diagnose_text(log).category == "unknown"


def test_exception_lines_of_every_usual_shape_are_user_errors():
    for last in ("KeyError: 'tokens'", "ValueError", "mypkg.errors.BadBatch: shape (3, 4)",
                 "InjectedThing: something broke", "StopIteration", "AssertionError"):
        log = f'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n{last}\n'
        assert diagnose_text(log).category == "user_code_error", last


@pytest.mark.parametrize(("evidence", "category", "says"), [
    ("torch.distributed.DistStoreError: ... Address already in use", "rendezvous_failure", "port is taken"),
    ("RendezvousTimeoutError", "rendezvous_failure", "rdzv_endpoint"),
    ("OSError: [Errno 28] No space left on device", "checkpoint_error", "disk is full"),
    ("size mismatch for lm_head.weight: copying a param", "checkpoint_error", "different model"),
])
def test_a_hint_follows_the_line_that_decided_it(evidence, category, says):
    from fsdp_orch.vocab.hints import hint_for

    assert says in hint_for(category, evidence)
