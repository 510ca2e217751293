"""The failure classifier: real failure lines from public issue trackers, and the root-cause
rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_orch.supervise.diagnose import (
    CATEGORIES,
    LineScanner,
    diagnose_text,
    quoted,
)
from fsdp_orch.supervise.exit_cause import diagnose_exit
from fsdp_orch.vocab.categories import NOT_IN_PUBLIC_LOGS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = [*json.loads((FIXTURES / "failure-logs.json").read_text()),
        *json.loads((FIXTURES / "failure-logs-extra.json").read_text())]
CORPUS = [case for path in sorted((FIXTURES / "corpus").glob("*.json"))
          for case in json.loads(path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("case", REAL, ids=[f"{c['category']}-{i}" for i, c in enumerate(REAL)])
def test_real_failure_lines_are_classified_as_labelled(case):
    result = diagnose_text(case["text"])
    assert result.category == case["category"], (case["source"], result)
    assert (result.evidence
            and any(quoted(result.evidence) in line for line in case["text"].splitlines()))
    assert result.retryable is (case["category"] not in ("user_code_error", "checkpoint_error"))


def test_every_category_a_public_log_can_show_has_a_real_fixture():
    labelled = {c["category"] for c in [*REAL, *CORPUS]}
    assert set(CATEGORIES) - labelled == NOT_IN_PUBLIC_LOGS


def test_the_first_root_cause_wins_over_its_consequences():
    log = "\n".join([
        "[default0]:step=10 loss=4.1",
        "[default1]:Traceback (most recent call last):",
        '[default1]:  File "train.py", line 40, in <module>',
        "[default1]:    batch = cache[key]",
        "[default1]:KeyError: 'tokens'",
        "[default0]:[rank0]:[E1206 18:44:12 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
        "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
        "W1121 12:00:00.000 1 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 7 closing signal SIGTERM",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ])
    result = diagnose_text(log)
    assert result.category == "user_code_error"
    assert result.evidence == "KeyError: 'tokens' (at train.py:40 in <module>)"
    assert result.line == 5
    assert result.retryable is False


def test_consequence_lines_alone_are_not_a_cause():
    log = ("W0409 07:28:49 1359 torch/distributed/elastic/multiprocessing/api.py:897] Sending "
           "process 1365 closing signal SIGTERM\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    assert diagnose_text(log).category == "unknown"


def test_exceptions_that_name_a_known_cause_are_not_user_errors():
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert diagnose_text(log).category == "cuda_oom"
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
           "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 "
           "clients joined.\n")
    assert diagnose_text(log).category == "rendezvous_failure"


def test_a_healthy_training_log_is_unknown_not_a_false_alarm():
    log = "\n".join([
        "W1121 12:00:00 torch/distributed/run.py:803] Setting OMP_NUM_THREADS environment variable",
        "[default0]:/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:86: UserWarning: "
        "None of the inputs have requires_grad=True.",
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
    strong_later = weak + ("slurmstepd: error: *** JOB 42 ON n1 CANCELLED AT 2026-01-01T00:00:00 "
                           "DUE TO PREEMPTION ***\n")
    assert diagnose_text(strong_later).category == "preemption_or_node_lost"


def test_line_scanner_reports_the_cause_as_soon_as_it_is_written():
    scanner = LineScanner()
    assert scanner.feed("[default0]:step=3 loss=1.0") is None
    hit = scanner.feed("[default1]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:"
                       "589] Read error [127.0.0.1]:25266: Connection reset by peer")
    assert hit is not None and hit.category == "gloo_timeout_or_peer_lost"
    assert scanner.feed("KeyError: 'late'") is hit


@pytest.mark.parametrize("code,category,names", [
    (0, "unknown", "code 0"), (1, "unknown", "code 1"), (-9, "killed_sigkill", "SIGKILL"),
    (137, "killed_sigkill", "SIGKILL"), (-11, "crashed_signal", "SIGSEGV"),
    (139, "crashed_signal", "SIGSEGV"),
    (-6, "crashed_signal", "SIGABRT"), (-7, "crashed_signal", "SIGBUS"),
    (-1, "crashed_signal", "SIGHUP"),
    (-15, "preemption_or_node_lost", "SIGTERM"), (None, "preemption_or_node_lost", "disappeared")])
def test_exit_codes(code, category, names):
    """A rank ended by a signal is never unknown: the category and the evidence name the signal."""
    result = diagnose_exit(code)
    assert result.category == category and result.retryable
    assert names in result.evidence


def test_cli_diagnose_prints_one_object_per_file_and_a_list_for_several(tmp_path):
    a = tmp_path / "a.log"
    b = tmp_path / "b.log"
    a.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 388.00 MiB.\n")
    b.write_text("all good\n")
    one = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose", str(a), "--json"],
                         capture_output=True, text=True, check=True)
    obj = json.loads(one.stdout)
    assert (obj["category"] == "cuda_oom" and obj["retryable"] is True
            and "CUDA out of memory" in obj["evidence"])
    assert "batch size" in obj["hint"] and "offload_params" in obj["hint"]
    two = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose", str(a), str(b), "--json"],
                         capture_output=True, text=True, check=True)
    listed = json.loads(two.stdout)
    assert [r["category"] for r in listed] == ["cuda_oom", "unknown"]
    assert "fsdp-orch logs" in listed[1]["hint"]
    missing = subprocess.run([sys.executable, "-m", "fsdp_orch", "diagnose",
                              str(tmp_path / "nope.log")],
                             capture_output=True, text=True)
    assert (missing.returncode == 2 and "nope.log" in missing.stderr
            and "Traceback" not in missing.stderr)


def test_torchruns_own_traceback_and_failure_summary_are_not_a_user_error():
    log = "\n".join([
        "E1121 14:49:00 1 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
        "(exitcode: 1) local_rank: 0 (pid: 9) of binary: /venv/bin/python",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line '
        '1032, in <module>',
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


def test_torchruns_failed_line_inside_a_ranks_traceback_is_not_its_exception():
    """Seen in CI: rank 1's traceback and torchrun's line about it reach the log interleaved; the
    rank's own exception, with where it was raised, is still the evidence."""
    failed = ("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) "
              "local_rank: 1 (pid: 20235) of binary: /venv/bin/python")
    frames = ['  File "/work/train.py", line 88, in <module>',
              "    raise KeyError('tokens')"]
    for at in (1, 2, 3):  # after the header, after a frame, after the source line
        lines = ["Traceback (most recent call last):", *frames, "KeyError: 'tokens'"]
        lines.insert(at, failed)
        found = diagnose_text("\n".join(lines))
        assert found.category == "user_code_error", (at, found)
        assert found.evidence == "KeyError: 'tokens' (at train.py:88 in <module>)", (at, found)


def test_exception_lines_of_every_usual_shape_are_user_errors():
    for last in ("KeyError: 'tokens'", "ValueError", "mypkg.errors.BadBatch: shape (3, 4)",
                 "InjectedThing: something broke", "StopIteration", "AssertionError"):
        log = f'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n{last}\n'
        assert diagnose_text(log).category == "user_code_error", last


@pytest.mark.parametrize(("evidence", "category", "says"), [
    ("torch.distributed.DistStoreError: ... Address already in use", "rendezvous_failure",
     "port is taken"),
    ("RendezvousTimeoutError", "rendezvous_failure", "rdzv_endpoint"),
    ("OSError: [Errno 28] No space left on device", "checkpoint_error", "disk is full"),
    ("size mismatch for lm_head.weight: copying a param", "checkpoint_error", "different model"),
    ("killed by SIGKILL (exit -9)", "killed_sigkill", "dmesg -T | grep -i -e oom -e killed"),
    ("killed by SIGKILL (exit -9)", "killed_sigkill",
     "sacct -j <id> --format=JobID,State,ExitCode,MaxRSS"),
    ("killed by SIGKILL (exit -9)", "killed_sigkill", "journalctl -k"),
    # not yet known to be the OOM killer
    ("rank 1 failed first: killed by SIGKILL (exit -9): the kernel OOM killer, the scheduler or "
     "an external kill", "killed_sigkill", "most often by the kernel's OOM killer"),
    ("Out of memory: Killed process 7870 (python)", "killed_sigkill", "OOM killer"),
    ("RuntimeError: DataLoader worker (pid 46794) is killed by signal: Bus error.",
     "crashed_signal", "/dev/shm"),
    ("ended by SIGABRT (signal 6, exit -6)", "crashed_signal", "terminate called after"),
    ("ended by SIGSEGV (signal 11, exit -11)", "crashed_signal", "PYTHONFAULTHANDLER=1"),
    ("[fsdp-orch fault] rank 0: injected SIGKILL at step 3", "injected_fault", "FSDP_ORCH_FAULT"),
    ("AssertionError: Number of device IDs (4) must match mesh size (8)", "xla_error",
     "multiply to the number"),
    ("ValueError: Axis name fsdp is not defined in the given mesh", "xla_error",
     "naming only the mesh's axes"),
    ("RuntimeError: No PjRtPlugin registered for: CUDA.", "xla_error",
     "PJRT_DEVICE names a device"),
    ("ValueError: Unsupported nprocs (2).", "xla_error", "leave nprocs unset"),
    ("RuntimeError: No registered implementation for untyped custom call to k for Host",
     "xla_error", "could not compile"),
    ("TPU is already in use by process with pid 1234", "xla_error", "lsof"),
])
def test_a_hint_follows_the_line_that_decided_it(evidence, category, says):
    from fsdp_orch.vocab.hints import hint_for

    assert says in hint_for(category, evidence)


# --- evidence from wrapped exceptions -------------------------------------------------------------

# Captured here (torch 2.13): the PyTorch FSDP tutorial's shape, mp.spawn of 2 workers on a machine
# without a GPU, as issue 26 saw it.
SPAWNED = """\
W1125 16:16:47.349000 12656 torch/multiprocessing/spawn.py:165] Terminating process 12719 via \
signal SIGTERM
Traceback (most recent call last):
  File "/tmp/spawn/fsdp_tut.py", line 19, in <module>
    mp.spawn(fsdp_main, args=(WORLD_SIZE,), nprocs=WORLD_SIZE, join=True)
  File "/work/main/.venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 340, \
in spawn
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 296, \
in start_processes
    while not context.join():
              ^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 211, \
in join
    raise ProcessRaisedException(msg, error_index, failed_process.pid)
torch.multiprocessing.spawn.ProcessRaisedException:\x20

-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 87, in \
_wrap
    fn(i, *args)
  File "/tmp/spawn/fsdp_tut.py", line 13, in fsdp_main
    model = FSDP(model, device_id=torch.device("cuda", rank) if torch.cuda.is_available() else None)
            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/fsdp/\
fully_sharded_data_parallel.py", line 427, in __init__
    _init_device_handle(self, module, self._ignored_params, device_id)
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/fsdp/_init_utils.py", line \
390, in _init_device_handle
    raise RuntimeError(
RuntimeError: FSDP needs a non-CPU accelerator device, but no accelerator device is detected.
"""
FSDP_ERROR = ("RuntimeError: FSDP needs a non-CPU accelerator device, but no accelerator device "
              "is detected.")


def test_the_inner_exception_of_an_mp_spawn_failure_is_the_evidence_with_where_it_was_raised():
    result = diagnose_text(SPAWNED)
    assert result.category == "user_code_error" and not result.retryable
    assert result.evidence == (f"{FSDP_ERROR} (at .../torch/distributed/fsdp/_init_utils.py:390 in "
                               "_init_device_handle, from fsdp_tut.py:13 in fsdp_main)")
    assert result.line == SPAWNED.splitlines().index(FSDP_ERROR) + 1
    assert "ProcessRaisedException" not in result.evidence


def test_fed_line_by_line_the_wrapper_is_never_reported_before_the_inner_exception():
    scanner = LineScanner()
    seen = [scanner.feed(line) for line in SPAWNED.splitlines()]
    first = next(i for i, cause in enumerate(seen) if cause is not None)
    assert SPAWNED.splitlines()[first] == FSDP_ERROR


def test_the_category_of_a_wrapped_exception_is_the_inner_ones():
    oom = SPAWNED.replace(FSDP_ERROR,
                          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                          "2.00 GiB. GPU 0 has a total capacity of 79.10 GiB")
    result = diagnose_text(oom)
    assert result.category == "cuda_oom" and result.retryable
    assert quoted(result.evidence).startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert result.evidence.endswith("(at .../torch/distributed/fsdp/_init_utils.py:390 in "
                                    "_init_device_handle, from fsdp_tut.py:13 in fsdp_main)")


def test_older_torch_wraps_the_child_error_in_a_bare_exception():
    old = (SPAWNED.replace("torch.multiprocessing.spawn.ProcessRaisedException: ", "Exception:")
           .replace("raise ProcessRaisedException(msg, error_index, failed_process.pid)",
                    "raise Exception(msg)"))
    assert quoted(diagnose_text(old).evidence) == FSDP_ERROR


def test_a_wrapper_whose_inner_exception_was_cut_off_is_the_evidence_left():
    cut = SPAWNED.split("-- Process 1")[0]
    result = diagnose_text(cut)
    assert result.category == "user_code_error"
    assert quoted(result.evidence) == "torch.multiprocessing.spawn.ProcessRaisedException:"


# torchrun's failure summary when the script's main is decorated with @record (captured here): the
# root cause's traceback comes from its error file, indented; another rank's, in "Failures:", is
# later.
RECORDED = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
============================================================
rec.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_16:18:53
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 15233)  (SIGTERM)
  error_file: /tmp/torchelastic_j8krc_1h/903bd5f2_ftr1hi01/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/\
errors/__init__.py", line 367, in wrapper
      return f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
    File "/tmp/spawn/rec.py", line 15, in main
      dist.barrier()
    File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", \
line 5356, in barrier
      work.wait()
  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection \
closed by peer [127.0.0.1]:7071. This is typically caused by a remote worker crashing.
\x20\x20
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_16:18:52
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 15234)\x20
  error_file: /tmp/torchelastic_j8krc_1h/903bd5f2_ftr1hi01/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/\
errors/__init__.py", line 367, in wrapper
      return f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
    File "/tmp/spawn/rec.py", line 14, in main
      load_shard(int(os.environ["RANK"]))
    File "/tmp/spawn/rec.py", line 8, in load_shard
      raise ValueError(f"shard {rank} has 0 rows")
  ValueError: shard 1 has 0 rows
\x20\x20
============================================================
"""


def test_a_childfailederror_summary_gives_its_root_causes_exception_not_a_later_failure():
    result = diagnose_text(RECORDED)
    assert result.category == "user_code_error"
    assert result.evidence == "ValueError: shard 1 has 0 rows (at rec.py:8 in load_shard)"


# --- a cause for every ending ---------------------------------------------------------------------

@pytest.mark.parametrize(("line", "category", "signal"), [
    ("  traceback : Signal 9 (SIGKILL) received by PID 7870", "killed_sigkill", "SIGKILL"),
    ("E1125 16:10:51.865000 7802 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
     "(exitcode: -9) local_rank: 1 (pid: 7870) of binary: /venv/bin/python", "killed_sigkill",
     "SIGKILL"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL",
     "killed_sigkill", "SIGKILL"),
    ("train.sh: line 4: 31337 Killed                  python train.py", "killed_sigkill",
     "SIGKILL"),
    ("[Tue Nov 25 16:10:51 2026] Out of memory: Killed process 7870 (python) total-vm:81236kB",
     "killed_sigkill", "SIGKILL"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of your "
     "processes may have been killed by the cgroup out-of-memory handler.", "killed_sigkill",
     "SIGKILL"),
    ("  exitcode  : -11 (pid: 6421)", "crashed_signal", "SIGSEGV"),
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' died with "
     "<Signals.SIGBUS: 7>.",
     "crashed_signal", "SIGBUS"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGABRT",
     "crashed_signal", "SIGABRT"),
    ("Fatal Python error: Segmentation fault", "crashed_signal", "SIGSEGV"),
    ("./run.sh: line 3: 4242 Bus error (core dumped) python train.py", "crashed_signal", "SIGBUS"),
])
def test_a_rank_ended_by_a_signal_is_named_by_it(line, category, signal):
    result = diagnose_text(line)
    assert result.category == category and result.retryable
    assert signal in result.evidence and quoted(result.evidence) == line.strip()


def test_sigterm_and_the_ranks_torchrun_stopped_itself_name_no_cause():
    assert (diagnose_text("  traceback : Signal 15 (SIGTERM) received by PID 7869").category
            == "unknown")
    stopped = "\n".join([
        "Failures:", "[1]:", "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -9 (pid: 7869)  (SIGKILL)",
        "  traceback : Signal 9 (SIGKILL) received by PID 7869",
        "------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:", "  rank      : 1 (local_rank: 1)", "  exitcode  : 1 (pid: 7870) ",
        "  traceback : To enable traceback see: "
        "https://pytorch.org/docs/stable/elastic/errors.html"])
    # rank 1 failed first; torchrun killed rank 0
    assert diagnose_text(stopped).category == "unknown"


GLOO_LOST = ("[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
             "pair.cc:537] Read error [127.0.0.1]:44431: Connection reset by peer. This is "
             "typically caused by a remote worker hanging or bugs in the application.")
KILLED_SUMMARY = """\
W1125 16:10:51.799000 7802 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process \
7869 closing signal SIGTERM
E1125 16:10:51.865000 7802 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: -9) local_rank: 1 (pid: 7870) of binary: /work/main/.venv/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
======================================================
train.py FAILED
------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 7869)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 7869
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 7870)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 7870
======================================================
"""


def test_a_ranks_sigkill_outranks_the_lost_peer_it_caused_but_a_crash_does_not():
    """The HF Trainer under accelerate with rank 1 SIGKILLed (captured here): rank 0 reports the
    lost peer first, torchrun the SIGKILL after. A SIGABRT after a lost peer is most often the
    communication library aborting: the lost peer stays the cause."""
    result = diagnose_text(GLOO_LOST + "\n" + KILLED_SUMMARY)
    assert result.category == "killed_sigkill"
    assert ("failed (exitcode: -9) local_rank: 1" in result.evidence
            and result.evidence.endswith("(SIGKILL)"))
    aborted = GLOO_LOST + "\nFatal Python error: Aborted\n"
    assert diagnose_text(aborted).category == "gloo_timeout_or_peer_lost"


# The fault line as the HF Trainer's progress bar leaves it (captured here): after a "\r" update.
INJECTED = ("\r 42%|████▎     | 17/40 [00:01<00:01, 14.59it/s]\r 48%|████▊     | 19/40 "
            "[00:01<00:01, 15.08it/s][fsdp-orch fault] rank 0: injected crash at step 20: "
            "exiting with code 1")


def test_an_injected_fault_is_labelled_as_injected_and_wins_over_its_consequences():
    result = diagnose_text("\n".join([INJECTED, GLOO_LOST, KILLED_SUMMARY]))
    assert result.category == "injected_fault" and result.retryable
    assert result.evidence == (
        "[fsdp-orch fault] rank 0: injected crash at step 20: exiting with code 1")
    assert "FSDP_ORCH_FAULT" in result.hint
    killed = diagnose_text("[default1]:[fsdp-orch fault] rank 1: injected SIGKILL at step 12")
    assert killed.category == "injected_fault" and "SIGKILL" in killed.evidence


def test_a_real_cause_printed_before_an_injected_fault_still_wins():
    log = "\n".join(['Traceback (most recent call last):',
                     '  File "train.py", line 40, in <module>', "KeyError: 'tokens'", INJECTED])
    assert diagnose_text(log).category == "user_code_error"


def test_faults_that_do_not_end_a_rank_are_found_as_real_ones_are():
    """An injected hang or skipped collective is caught by the heartbeats or the real timeout."""
    hang = ("[fsdp-orch fault] rank 1: injected hang at step 30: sleeping forever before the "
            "next collective")
    assert diagnose_text(hang).category == "unknown"




def _follow(tmp_path: Path, console: str):  # type: ignore[no-untyped-def]
    from fsdp_orch.observe.file_tail import FileTail
    from fsdp_orch.supervise.logfollow import LogFollower

    (tmp_path / "console-node-0.log").write_text(console)
    follower = LogFollower(FileTail(tmp_path).chunks)
    return follower, follower.poll(final=True)


def test_at_exit_torchruns_root_cause_outranks_the_lost_peer_under_accelerate(tmp_path):
    """``accelerate launch`` exits 1 whatever ended the rank: torchrun's summary says SIGKILL."""
    from fsdp_orch.supervise.exit_cause import cause_at_exit

    follower, cause = _follow(tmp_path, GLOO_LOST + "\n" + KILLED_SUMMARY)
    # read first, while live
    assert cause is not None and cause.category == "gloo_timeout_or_peer_lost"
    result = cause_at_exit(1, cause, follower.root_cause_rank(), follower.cause_rank(),
                           follower.tail.values())
    assert result.category == "killed_sigkill"
    assert result.evidence.startswith("rank 1 failed first: killed by SIGKILL (exit -9)")


def test_a_peers_own_error_read_after_the_lost_peer_in_another_nodes_log_is_the_cause(tmp_path):
    """Rank 1 crashed on node 1; rank 0 on node 0 lost it. Node 0's log came first (each node's log
    reaches the supervisor in its agent's batches): the lost peer was named until node 1's line was
    read, and then the crash is. A signal read later in another log does not outrank it: it may be
    the echo of the attempt's stop."""
    from fsdp_orch.observe.file_tail import FileTail
    from fsdp_orch.supervise.logfollow import LogFollower

    crash = "[default0]:[fsdp-orch fault] rank 1: injected crash at step 12: exiting with code 1\n"
    in_a_save = ("Traceback (most recent call last):\n"
                 '  File "/x/torch/distributed/checkpoint/state_dict_saver.py", line 9, in save\n'
                 "RuntimeError: Connection reset by peer\n")  # a save's collective lost its peer
    for later, expected in ((crash, "injected_fault"),
                            ("[default0]:Killed\n", "gloo_timeout_or_peer_lost"),
                            (in_a_save, "gloo_timeout_or_peer_lost"),
                            (GLOO_LOST + "\n", "gloo_timeout_or_peer_lost")):
        folder = tmp_path / expected / str(len(later))
        folder.mkdir(parents=True)
        (folder / "console-node-0.log").write_text(GLOO_LOST + "\n")
        follower = LogFollower(FileTail(folder).chunks)
        first = follower.poll()
        assert first is not None and first.category == "gloo_timeout_or_peer_lost"
        (folder / "console-node-1.log").write_text(later)
        cause = follower.poll(final=True)
        assert cause is not None and cause.category == expected, (later, cause)
        assert follower.cause is not None
        assert follower.cause[0] == ("console-node-1.log" if expected == "injected_fault"
                                     else "console-node-0.log")


def test_a_lost_peer_read_after_a_real_cause_does_not_replace_it(tmp_path):
    from fsdp_orch.observe.file_tail import FileTail
    from fsdp_orch.supervise.logfollow import LogFollower

    (tmp_path / "console-node-1.log").write_text(
        'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n'
        "KeyError: 'tokens'\n")
    follower = LogFollower(FileTail(tmp_path).chunks)
    assert follower.poll(final=True).category == "user_code_error"
    (tmp_path / "console-node-0.log").write_text(GLOO_LOST + "\n")
    assert follower.poll(final=True).category == "user_code_error"


def test_at_exit_a_sigkill_reported_after_the_lost_peer_is_the_cause_without_a_summary(tmp_path):
    """mp.spawn's parent reports the SIGKILL after a surviving worker lost its peer."""
    from fsdp_orch.supervise.exit_cause import cause_at_exit

    spawn_end = ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with "
                 "signal SIGKILL")
    follower, cause = _follow(tmp_path, GLOO_LOST + "\n" + spawn_end + "\n")
    assert follower.root_cause_rank() is None
    result = cause_at_exit(1, cause, None, follower.cause_rank(), follower.tail.values())
    assert result.category == "killed_sigkill" and result.evidence == spawn_end
    follower, cause = _follow(tmp_path, "step=3\n")
    assert (cause_at_exit(-11, cause, None, None, follower.tail.values()).category
            == "crashed_signal")


def test_a_crash_in_teardown_still_counts_as_one_when_the_logs_name_the_signal(tmp_path):
    """After every rank finished, a SIGABRT in the processes' teardown counts as done (supervisor's
    teardown rule); the classifier now names the signal, which must not hide that it was one."""
    from fsdp_orch.supervise.exit_cause import died_of_a_signal

    follower, cause = _follow(tmp_path, "Fatal Python error: Aborted\n")
    assert cause is not None and cause.category == "crashed_signal"
    assert died_of_a_signal(-6, cause, None)
    assert not died_of_a_signal(1, cause, None)
    follower, cause = _follow(tmp_path, 'Traceback (most recent call last):\n'
                                        '  File "t.py", line 1\nKeyError: 1\n')
    assert not died_of_a_signal(-6, cause, None)
