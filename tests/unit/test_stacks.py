"""Stacks of hung ranks (fsdp_orch.observe.stacks): parsers on real py-spy and faulthandler
output, the innermost frame of user code, and capture with py-spy or the faulthandler fallback.

The fixtures in tests/fixtures/stacks/ are real output captured on this machine: py-spy dumps of
small hung scripts and of a 2-rank torchrun job on gloo (rank 1 hung in fsdp-orch's fault
injector, rank 0 in ``dist.all_reduce``), faulthandler dumps of the same scripts, and py-spy's
errors; its README says how each was taken and holds the scripts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

import fsdp_orch
from fsdp_orch.observe import command
from fsdp_orch.observe.stack_parse import Frame, ThreadStack, parse_faulthandler, parse_pyspy_dump
from fsdp_orch.observe.stacks import capture_stacks, pyspy_binary, pyspy_error
from fsdp_orch.observe.user_frame import (
    default_library_roots,
    describe_stuck,
    display_path,
    innermost_user_frame,
    is_library_file,
    main_thread,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"
STDLIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"  # where the fixtures' Python lived
SITE = "/work/main/.venv/lib/python3.11/site-packages"
PACKAGE = "/work/main/fsdp_orch"
ROOTS = (STDLIB, SITE, PACKAGE)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def pyspy(name: str) -> list[ThreadStack]:
    return parse_pyspy_dump(fixture(name))


def faulthandler(name: str) -> list[ThreadStack]:
    return parse_faulthandler(fixture(name))


# --- parsers ------------------------------------------------------------------------------------

def test_parse_pyspy_dump_of_a_sleeping_script():
    main, prefetcher = pyspy("pyspy-sleep.txt")
    assert (main.id, main.name, main.active, main.gil) == (3489, "MainThread", False, False)
    assert main.frames == (
        Frame("load_batch", "/tmp/stackdemo/train.py", 11),
        Frame("train", "/tmp/stackdemo/train.py", 17),
        Frame("main", "/tmp/stackdemo/train.py", 32),
        Frame("<module>", "/tmp/stackdemo/train.py", 36))
    assert (prefetcher.id, prefetcher.name) == (3490, "prefetcher")
    assert prefetcher.frames[1] == Frame("Thread.run", f"{STDLIB}/threading.py", 982)


def test_parse_pyspy_dump_of_a_torchrun_rank_in_a_collective():
    (thread,) = pyspy("pyspy-torchrun-rank0.txt")
    assert thread.name == "MainThread"
    assert thread.frames[0] == Frame(
        "all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 3252)
    assert thread.frames[1].function == "_exception_logger.<locals>.wrapper"
    assert [f.function for f in thread.frames[2:]] == [
        "sync_grads", "train_step", "main", "<module>"]


def test_parse_pyspy_native_frames_have_no_line():
    (thread,) = pyspy("pyspy-torchrun-rank0-native.txt")
    assert len(thread.frames) == 13
    assert thread.frames[1] == Frame("pthread_cond_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                     None, native=True)
    pybind = thread.frames[4]  # a C++ name full of parentheses
    assert pybind.function.startswith("pybind11::cpp_function::initialize<")
    assert pybind.function.endswith("::_FUN")
    assert pybind.file.endswith("torch/lib/libtorch_python.so") and pybind.line is None
    assert thread.frames[6].function == "all_reduce" and thread.frames[6].line == 3252


def test_parse_pyspy_ignores_colours_locals_and_other_lines():
    text = ('Process 1: python x.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n'
            '\x1b[1m\x1b[33mThread 0x7F00AA\x1b[0m (active+gil): "MainThread"\n'
            '    \x1b[32mstep\x1b[0m (\x1b[36m/w/x.py\x1b[0m:\x1b[2m5\x1b[0m)\n'
            '        Arguments:\n            n: 3\n'
            '    <module> (/w/x.py:9)\nThread 12 (idle)\n    run (/w/x.py)\n')
    main, other = parse_pyspy_dump(text)
    assert (main.id, main.active, main.gil, main.name) == (0x7F00AA, True, True, "MainThread")
    assert main.frames == (Frame("step", "/w/x.py", 5), Frame("<module>", "/w/x.py", 9))
    assert (other.id, other.name, other.frames) == (12, None, (Frame("run", "/w/x.py", None),))
    assert parse_pyspy_dump("") == []


def test_parse_faulthandler_all_threads():
    prefetcher, main = faulthandler("faulthandler-sleep.txt")
    assert (prefetcher.id, prefetcher.current) == (0x00007F7FB04F86C0, False)
    assert (main.id, main.current, main.name, main.active) == (0x00007F7FB1033B80, True, None, None)
    assert main.frames[0] == Frame("load_batch", "/tmp/stackdemo/train.py", 11)
    assert prefetcher.frames[-1] == Frame("_bootstrap", f"{STDLIB}/threading.py", 1002)


def test_parse_faulthandler_watchdog_dump_has_no_current_thread():
    threads = faulthandler("faulthandler-timeout-queue.txt")  # starts with "Timeout (0:00:02)!"
    assert [len(t.frames) for t in threads] == [4, 6]
    assert not any(t.current for t in threads)


def test_parse_faulthandler_names_single_stack_and_unknown_lines():
    # CPython's formats: 3.14 adds the thread name; all_threads=False prints "Stack"; "???" lines.
    named = parse_faulthandler('Thread 0x00007f58c25be6c0 [sleeper] (most recent call first):\n'
                               '  File "/w/x.py", line 996 in run\n'
                               '  File "/w/x.py", line ??? in <module>\n')
    assert named == [ThreadStack(0x7F58C25BE6C0, "sleeper", None, (
        Frame("run", "/w/x.py", 996), Frame("<module>", "/w/x.py", None)))]
    (stack,) = parse_faulthandler(
        'Stack (most recent call first):\n  File "/w/x.py", line 3 in f\n')
    assert (stack.id, stack.current, stack.frames) == (None, True, (Frame("f", "/w/x.py", 3),))


# --- the main thread and the user's frame ---------------------------------------------------------

def test_innermost_user_frame_skips_nothing_when_the_user_called_a_c_function():
    assert innermost_user_frame(pyspy("pyspy-sleep.txt"), ROOTS) == Frame(
        "load_batch", "/tmp/stackdemo/train.py", 11)  # time.sleep is C: no frame of its own
    assert (innermost_user_frame(faulthandler("faulthandler-sleep.txt"), ROOTS).function
            == "load_batch")


def test_innermost_user_frame_skips_the_standard_library():
    assert innermost_user_frame(pyspy("pyspy-queue.txt"), ROOTS) == Frame(
        "next_batch", "/tmp/stackdemo/train_queue.py", 13)
    # another Python's standard library is recognised by its path, with no roots at all
    assert (innermost_user_frame(faulthandler("faulthandler-timeout-queue.txt"), ()).function
            == "next_batch")


def test_innermost_user_frame_skips_torch_and_native_frames():
    for name in ("pyspy-torchrun-rank0.txt", "pyspy-torchrun-rank0-native.txt"):
        assert innermost_user_frame(pyspy(name), ROOTS) == Frame(
            "sync_grads", "/tmp/stackdemo/hang_ddp.py", 11)


def test_innermost_user_frame_skips_fsdp_orch_frames():
    threads = pyspy("pyspy-torchrun-rank1.txt")
    assert threads[0].frames[0].function == "FaultInjector.at_step_end"
    assert innermost_user_frame(threads, ROOTS) == Frame("main", "/tmp/stackdemo/hang_ddp.py", 27)
    # fsdp-orch's own frames are known by their place in the package, with or without its root
    assert innermost_user_frame(threads, (STDLIB,)) == Frame("main", "/tmp/stackdemo/hang_ddp.py",
                                                             27)


def test_runpy_frames_are_never_user_code():
    for threads in (pyspy("pyspy-run-module.txt"), faulthandler("faulthandler-run-module.txt")):
        assert main_thread(threads).frames[-1].file == "<frozen runpy>"
        assert innermost_user_frame(threads, ROOTS).function == "load_batch"
    only_runpy = [ThreadStack(1, "MainThread", False, (Frame("_run_code", "<frozen runpy>", 88),))]
    assert innermost_user_frame(only_runpy, ROOTS) is None


def test_main_thread_of_faulthandler_is_not_simply_the_current_thread():
    threads = faulthandler("faulthandler-signal-on-thread.txt")  # the kernel chose the prefetcher
    current = next(t for t in threads if t.current)
    assert current.frames[0].function == "prefetch"
    assert main_thread(threads).frames[0].function == "load_batch"  # its stack ends in <module>
    assert innermost_user_frame(threads, ROOTS).function == "load_batch"
    # the bootstrap's word (threading.main_thread().ident) wins over the guess
    assert main_thread(threads, main_thread_id=current.id) is current


def test_main_thread_id_of_a_pyspy_dump_is_the_pid():
    threads = pyspy("pyspy-sleep.txt")
    assert main_thread(threads, main_thread_id=3489).name == "MainThread"
    assert main_thread(threads, main_thread_id=3490).name == "prefetcher"


def test_main_thread_unknown_without_clues():
    worker = ThreadStack(7, None, None, (Frame("work", "/w/x.py", 3),))
    other = ThreadStack(8, None, None, (Frame("run", "/w/y.py", 4),))
    assert main_thread([worker]) is worker
    assert main_thread([worker, other]) is None
    assert innermost_user_frame([worker, other], ROOTS) is None
    assert main_thread([]) is None


def test_default_library_roots():
    roots = default_library_roots()
    assert os.path.normpath(sysconfig.get_paths()["stdlib"]) in roots
    assert os.path.normpath(sysconfig.get_paths()["purelib"]) in roots
    assert str(Path(fsdp_orch.__file__).absolute().parent) in roots
    assert is_library_file(fsdp_orch.__file__, roots)
    assert is_library_file(os.__file__, roots)


def test_is_library_file():
    assert is_library_file("/opt/conda/lib/python3.10/site-packages/torch/nn/module.py", ())
    assert is_library_file("/usr/lib/python3/dist-packages/numpy/core.py", ())
    assert is_library_file("/opt/conda/lib/python3.10/threading.py", ())
    assert is_library_file("<string>", ()) and is_library_file("<frozen runpy>", ())
    assert is_library_file("/work/main/fsdp_orch/runtime/job.py", (PACKAGE,))
    assert not is_library_file("/work/main/fsdp_orch_extra/train.py", (PACKAGE,))
    assert not is_library_file("/home/alice/llm/train.py", ROOTS)
    assert not is_library_file("train.py", ROOTS)


def test_display_path():
    assert display_path("/home/alice/llm/train.py", ROOTS) == "train.py"
    assert display_path(f"{SITE}/torch/distributed/distributed_c10d.py", ROOTS) == (
        ".../torch/distributed/distributed_c10d.py")
    assert display_path(f"{STDLIB}/threading.py", ROOTS) == ".../threading.py"
    assert display_path(f"{PACKAGE}/bootstrap/faults.py", ROOTS) == ".../bootstrap/faults.py"
    assert display_path("<frozen runpy>", ROOTS) == "<frozen runpy>"


def test_describe_stuck():
    assert describe_stuck(0, pyspy("pyspy-torchrun-rank0.txt"), ROOTS) == (
        "rank 0 stuck at hang_ddp.py:11 in sync_grads "
        "(innermost: all_reduce at .../torch/distributed/distributed_c10d.py:3252)")
    assert describe_stuck(1, pyspy("pyspy-torchrun-rank1.txt"), ROOTS) == (
        "rank 1 stuck at hang_ddp.py:27 in main "
        "(innermost: FaultInjector.at_step_end at .../bootstrap/faults.py:130)")
    assert describe_stuck(2, pyspy("pyspy-sleep.txt"), ROOTS) == (
        "rank 2 stuck at train.py:11 in load_batch")
    assert describe_stuck(3, faulthandler("faulthandler-timeout-queue.txt"), ROOTS) == (
        "rank 3 stuck at train_queue.py:13 in next_batch (innermost: wait at .../threading.py:327)")


def test_describe_stuck_for_the_fsdp2_demo_hung_by_fault_injection():
    assert describe_stuck(0, pyspy("pyspy-fsdp2-demo-rank0.txt"), ROOTS) == (
        "rank 0 stuck at train.py:120 in main "
        "(innermost: all_gather_single at .../torch/distributed/distributed_c10d.py:4394)")
    assert describe_stuck(1, pyspy("pyspy-fsdp2-demo-rank1.txt"), ROOTS) == (
        "rank 1 stuck at train.py:130 in main "
        "(innermost: FaultInjector.at_step_end at .../bootstrap/faults.py:130)")


def test_describe_stuck_without_user_code_or_main_thread():
    library_only = [ThreadStack(1, "MainThread", False, (
        Frame("wait", f"{STDLIB}/threading.py", 327), Frame("<module>", "<string>", 1)))]
    assert describe_stuck(4, library_only, ROOTS) == (
        "rank 4 stuck in wait at .../threading.py:327 (no frame of user code on its main thread)")
    two = [ThreadStack(7, None, None, ()), ThreadStack(8, None, None, ())]
    assert describe_stuck(5, two, ROOTS) == (
        "rank 5: no main thread among the 2 threads of its stack dump")
    assert describe_stuck(6, two[:1], ROOTS) == "rank 6: its main thread shows no Python frames"


# --- capture, with effects faked -----------------------------------------------------------------

Answer = tuple[int, str, str]


class FakePySpy:
    """Stands for the py-spy command: canned (returncode, stdout, stderr) per pid, and per
    (pid, "--nonblocking") for the second try."""

    def __init__(self, answers: dict[object, Answer]):
        self.answers = answers
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: list[str], timeout: float) -> Answer:
        self.calls.append((argv, timeout))
        pid = int(argv[-1])
        return self.answers.get((pid, "--nonblocking") if "--nonblocking" in argv else pid,
                                self.answers[pid])


class FakeTime:
    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_capture_stacks_writes_each_dump_and_reports_failures(tmp_path):
    run = FakePySpy({101: (0, fixture("pyspy-torchrun-rank0.txt"), ""),
                     102: (1, "", fixture("pyspy-error-no-such-process.txt"))})
    sent: list[tuple[int, int]] = []
    dumps = capture_stacks({1: 102, 0: 101}, tmp_path / "stacks", run=run, timeout=7.0,
                           send=lambda pid, sig: sent.append((pid, sig)))
    py_spy = pyspy_binary()
    # ranks run in parallel; native frames first, and a failed dump is tried without them, then
    # without pausing the process
    assert sorted(run.calls) == [
        ([py_spy, "dump", "--full-filenames", "--native", "--pid", "101"], 7.0),
        ([py_spy, "dump", "--full-filenames", "--native", "--pid", "102"], 7.0),
        ([py_spy, "dump", "--full-filenames", "--nonblocking", "--pid", "102"], 7.0),
        ([py_spy, "dump", "--full-filenames", "--pid", "102"], 7.0)]
    ok, failed = dumps[0], dumps[1]
    assert (ok.rank, ok.pid, ok.source, ok.error) == (0, 101, "py-spy --native", "")
    assert ok.path == tmp_path / "stacks" / "rank-0.txt"
    assert ok.path.read_text() == fixture("pyspy-torchrun-rank0.txt")
    assert innermost_user_frame(ok.threads, ROOTS).function == "sync_grads"
    assert failed.threads == () and failed.path is None
    assert failed.error == ("py-spy: Failed to get process executable name. Check that the process "
                            "is running. (No such file or directory (os error 2)); no "
                            "rank-1.faulthandler.txt: the rank registered no faulthandler to ask")
    assert sent == []  # no handler registered: SIGUSR1 would have killed the rank
    assert sorted(p.name for p in (tmp_path / "stacks").iterdir()) == ["rank-0.txt"]


def test_capture_stacks_falls_back_to_the_ranks_faulthandler(tmp_path):
    dump_file = tmp_path / "rank-3.faulthandler.txt"
    dump_file.write_text(fixture("faulthandler-sleep.txt"))  # an earlier dump of this attempt
    fake_time = FakeTime()
    sent: list[tuple[int, int]] = []

    def send(pid: int, sig: int) -> None:  # the rank's handler appends its new dump
        sent.append((pid, sig))
        with open(dump_file, "a") as f:
            f.write(fixture("faulthandler-timeout-queue.txt"))

    run = FakePySpy({303: (1, "", fixture("pyspy-error-permission-denied.txt"))})
    dumps = capture_stacks({3: 303}, tmp_path, run=run, send=send, sleep=fake_time.sleep,
                           clock=fake_time.clock)
    dump = dumps[3]
    assert sent == [(303, signal.SIGUSR1)]
    assert (dump.source, dump.path) == ("faulthandler", dump_file)
    assert dump.error.startswith("py-spy: Permission Denied: attaching needs CAP_SYS_PTRACE")
    assert len(dump.threads) == 2  # only the new dump, not the earlier one
    assert describe_stuck(3, dump.threads, ROOTS).startswith("rank 3 stuck at train_queue.py:13")
    assert fake_time.sleeps == [0.1]  # read twice: the dump had stopped growing


def test_capture_stacks_reads_a_process_it_cannot_pause_without_pausing_it(tmp_path):
    run = FakePySpy({7: (1, "Process 7: python train.py\n",
                         fixture("pyspy-error-stopped-process.txt")),
                     (7, "--nonblocking"): (0, fixture("pyspy-nonblocking-stopped.txt"), "")})
    dump = capture_stacks({0: 7}, tmp_path, run=run)[0]
    assert (dump.source, dump.path) == ("py-spy --nonblocking", tmp_path / "rank-0.txt")
    assert dump.error == "py-spy: Failed to get stack traces (Failed to suspend process)"
    assert innermost_user_frame(dump.threads, ROOTS).function == "load_batch"


def test_capture_stacks_without_py_spy_tries_once(tmp_path):
    run = FakePySpy({8: (127, "", "[Errno 2] No such file or directory: 'py-spy'")})
    dump = capture_stacks({0: 8}, tmp_path, run=run, send=lambda pid, sig: None)[0]
    assert len(run.calls) == 1
    assert dump.error.startswith("py-spy: [Errno 2] No such file or directory: 'py-spy'; no ")


def test_capture_stacks_gives_up_on_a_silent_faulthandler(tmp_path):
    (tmp_path / "rank-0.faulthandler.txt").write_text("")
    fake_time = FakeTime()
    run = FakePySpy({5: (1, "", fixture("pyspy-error-not-python.txt"))})
    dumps = capture_stacks({0: 5}, tmp_path, run=run, send=lambda pid, sig: None,
                           sleep=fake_time.sleep, clock=fake_time.clock, faulthandler_wait=2.0)
    assert dumps[0].threads == ()
    assert dumps[0].error == ("py-spy: Failed to find python version from target process; "
                              "no faulthandler dump in rank-0.faulthandler.txt after 2s")
    assert 2.0 <= fake_time.now - 100.0 < 2.2


def test_capture_stacks_when_the_rank_is_gone_before_the_signal(tmp_path):
    (tmp_path / "rank-0.faulthandler.txt").write_text("")

    def send(pid: int, sig: int) -> None:
        raise ProcessLookupError(3, "No such process")

    run = FakePySpy({9: (124, "", "timed out after 10s")})
    dumps = capture_stacks({0: 9}, tmp_path, run=run, send=send)
    assert dumps[0].error == "py-spy: timed out after 10s; SIGUSR1 to pid 9: No such process"


def test_pyspy_error_keeps_the_first_paragraph_and_cause():
    assert pyspy_error(1, fixture("pyspy-error-not-python.txt")) == (
        "py-spy: Failed to find python version from target process")
    assert pyspy_error(1, fixture("pyspy-error-stopped-process.txt")) == (
        "py-spy: Failed to get stack traces (Failed to suspend process)")
    assert pyspy_error(3, "") == "py-spy: exit status 3"


def test_the_command_runner_reports_a_missing_binary_and_a_timeout():
    code, _, err = command.run(["/nonexistent/py-spy", "dump"], 5.0)
    assert code == 127 and "No such file" in err
    assert command.run([sys.executable, "-c", "import time; time.sleep(5)"], 0.3) == (
        124, "", "timed out after 0.3s")
    assert command.run([sys.executable, "-c", "print('hi')"], 5.0) == (0, "hi\n", "")


# --- the real thing -------------------------------------------------------------------------------

HUNG_SCRIPT = textwrap.dedent("""
    import faulthandler, os, signal, sys, threading, time

    def wait_for_batch():  # one line, so the frame's line is the same before and after "ready"
        print("ready", flush=True); time.sleep(3600)

    def train():
        wait_for_batch()

    if len(sys.argv) > 1:  # what the rank's bootstrap does
        faulthandler.register(signal.SIGUSR1, file=open(sys.argv[1], "w"), all_threads=True)
    threading.Thread(target=lambda: time.sleep(3600), name="loader", daemon=True).start()
    train()
""")


@pytest.fixture
def hung_process(tmp_path):
    started = []

    def start(*args: str) -> subprocess.Popen:
        script = tmp_path / "hung_train.py"
        script.write_text(HUNG_SCRIPT)
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                                text=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_real_pyspy_capture_of_a_hung_process(tmp_path, hung_process):
    if not Path(pyspy_binary()).exists():
        pytest.skip("py-spy is not installed")
    proc = hung_process()
    started = time.monotonic()
    dumps = capture_stacks({0: proc.pid}, tmp_path / "stacks")
    elapsed = time.monotonic() - started
    dump = dumps[0]
    assert (dump.source, dump.error) == ("py-spy --native", ""), dump.error
    assert {t.name for t in dump.threads} == {"MainThread", "loader"}
    assert main_thread(dump.threads, main_thread_id=proc.pid).name == "MainThread"
    frame = innermost_user_frame(dump.threads, default_library_roots())
    assert (frame.function, frame.file) == ("wait_for_batch", str(tmp_path / "hung_train.py"))
    stuck = describe_stuck(0, dump.threads, default_library_roots())
    # and the native call it sits in: glibc's clock_nanosleep, then the interpreter's time_sleep
    # where py-spy can read its symbols (as root here; not as a plain user of root's pyenv python)
    assert re.fullmatch(r"rank 0 stuck at hung_train\.py:5 in wait_for_batch "
                        r"\(native: \w*sleep\w*( < .*)?\)", stuck), stuck
    assert (tmp_path / "stacks" / "rank-0.txt").read_text().startswith(f"Process {proc.pid}:")
    assert elapsed < 5.0


@pytest.mark.slow
def test_real_pyspy_capture_of_a_stopped_process(tmp_path, hung_process):
    if not Path(pyspy_binary()).exists():
        pytest.skip("py-spy is not installed")
    proc = hung_process()
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        dump = capture_stacks({0: proc.pid}, tmp_path)[0]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert dump.source == "py-spy --nonblocking", dump.error
    assert "Failed to suspend process" in dump.error
    assert innermost_user_frame(dump.threads, default_library_roots()).function == "wait_for_batch"


@pytest.mark.slow
def test_real_faulthandler_fallback_when_pyspy_is_refused(tmp_path, hung_process):
    out_dir = tmp_path / "stacks"
    out_dir.mkdir()
    proc = hung_process(str(out_dir / "rank-1.faulthandler.txt"))
    refused = FakePySpy({proc.pid: (1, "", fixture("pyspy-error-permission-denied.txt"))})
    dump = capture_stacks({1: proc.pid}, out_dir, run=refused)[1]
    assert dump.source == "faulthandler"
    assert innermost_user_frame(dump.threads, default_library_roots()).function == "wait_for_batch"
    assert proc.poll() is None  # the signal asked for a dump, it did not stop the rank


@pytest.mark.slow
def test_real_pyspy_on_a_finished_process_sends_no_signal(tmp_path):
    if not Path(pyspy_binary()).exists():
        pytest.skip("py-spy is not installed")
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    sent: list[tuple[int, int]] = []
    dump = capture_stacks({0: done.pid}, tmp_path, send=lambda pid, sig: sent.append((pid, sig)))[0]
    assert dump.threads == () and dump.error.startswith("py-spy: ")
    assert sent == []


def test_a_native_symbol_is_short_enough_for_a_line_of_evidence() -> None:
    """pybind11's dispatcher symbol, as py-spy --native read it under a rank waiting in
    ``Work.wait`` (the quick start's hang), was 1,100 characters in the failure's evidence."""
    from fsdp_orch.observe.user_frame import short_symbol

    pybind = ("pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<bool, "
              "c10d::Work, std::chrono::duration<long, std::ratio<(long)1, (long)1000> > >(bool "
              "(c10d::Work::*)(std::chrono::duration<long, std::ratio<(long)1, (long)1000> >)), "
              "bool, c10d::Work*>(x)::{lambda(pybind11::detail::function_call&)#1}::_FUN")
    assert short_symbol(pybind) == "pybind11::cpp_function::initialize<…>(…)::{lambda(…)#1}::_FUN"
    assert short_symbol("c10d::Work::wait") == "c10d::Work::wait"
    assert short_symbol("std::operator<< <char>(std::ostream&)") == "std::operator<< <…>(…)"
    assert len(short_symbol("a" * 300)) == 80
