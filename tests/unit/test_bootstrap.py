"""The bootstrap every rank's Python loads: cheap, torch-free at start-up, counts optimizer steps,
probes the main thread, chains to the sitecustomize it shadows. Real interpreters, no torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fsdp_orch.bootstrap.importhook import when_imported
from fsdp_orch.bootstrap.probe import MainThreadProbe
from fsdp_orch.places.builtin import bootstrap_site_dir

# this checkout's fsdp_orch, not an installed one
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def run_python(code: str, tmp_path: Path, *, extra_path: str | None = None, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    full.update({"FSDP_ORCH_RUN_DIR": str(tmp_path / "run"), "FSDP_ORCH_ATTEMPT": "0",
                 "FSDP_ORCH_ATTEMPT_DIR": str(tmp_path / "run" / "attempt-0"),
                 "OMP_NUM_THREADS": "1",
                 "PYTHONPATH": os.pathsep.join(p for p in (str(bootstrap_site_dir()), extra_path)
                                               if p)})
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def heartbeat(tmp_path: Path, rank: int = 0) -> dict:
    return json.loads(
        (tmp_path / "run" / "heartbeats" / "attempt-0" / f"rank-{rank}.json").read_text())


def test_start_up_imports_no_torch_and_starts_no_thread(tmp_path):
    out = run_python("import sys, threading; print('torch' in sys.modules, "
                     "threading.active_count(), 'fsdp_orch.bootstrap.agent' in sys.modules)",
                     tmp_path)
    torch_loaded, threads, agent_loaded = out.split()
    assert torch_loaded == "False" and threads == "1"
    # Ours ran; sys.modules['sitecustomize'] may be the one it chained to (Debian's python3 has one,
    # /usr/lib/python3.11/sitecustomize.py: the quick tier run as a plain user met it)
    assert agent_loaded == "True"
    assert not (tmp_path / "run" / "heartbeats").exists()  # passive until a step or a process group


def test_optimizer_steps_become_heartbeats_with_the_resume_step_as_base(tmp_path):
    code = ("import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(7):\n"
            "    o.zero_grad(); m(torch.ones(1, 2)).sum().backward(); o.step()\n")
    run_python(code, tmp_path, FSDP_ORCH_RESUME_STEP="40")
    beat = heartbeat(tmp_path)
    assert beat["step"] == 47 and beat["state"] == "done" and beat["rank"] == 0
    assert beat["python_at"] <= beat["time"] and beat["host"]


def test_a_resumed_rank_that_returns_without_a_step_is_done_at_its_resume_step(tmp_path):
    """Rank 1, resumed at step 40, returns with no process group and no step (nothing left to
    train): done at 40. A Python process it started inherits RANK but is not the rank, and a
    fresh attempt's rank (no resume step) keeps saying nothing."""
    child = ("import os, subprocess, sys\n"
             "subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
             "print(os.environ['FSDP_ORCH_RANK_PID'] == str(os.getpid()))\n")
    assert run_python(child, tmp_path, RANK="1", FSDP_ORCH_RESUME_STEP="40").split() == ["True"]
    beat = heartbeat(tmp_path, rank=1)
    assert beat["state"] == "done" and beat["step"] == 40 and beat["pid"] != os.getpid()
    assert beat["metrics"] == {"returned_without_a_step": True}  # taken at an exit 0 alone
    # the child's own return wrote nothing: the beat is the rank's (a child is another pid)
    (tmp_path / "run" / "heartbeats" / "attempt-0" / "rank-1.json").unlink()
    run_python("pass", tmp_path, RANK="1", FSDP_ORCH_RESUME_STEP="40",
               FSDP_ORCH_RANK_PID="1")  # a process some rank started
    run_python("pass", tmp_path, RANK="1")  # a fresh attempt
    run_python("pass", tmp_path, FSDP_ORCH_RESUME_STEP="40")  # no rank: launcher: python
    assert not list((tmp_path / "run" / "heartbeats").rglob("rank-*.json"))
    with pytest.raises(AssertionError):  # a rank that raised is not done
        run_python("raise SystemExit('boom')", tmp_path, RANK="1", FSDP_ORCH_RESUME_STEP="40")


STEPS_THEN_A_GROUP = """
import sys, torch, torch.distributed as dist
m = torch.nn.Linear(2, 1)
o = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(3):
    o.zero_grad(); m(torch.ones(1, 2)).sum().backward(); o.step()
from fsdp_orch.bootstrap import agent
print(agent.current().metrics.get("no_process_group", False))
if sys.argv[-1] == "group":
    dist.init_process_group("gloo", init_method="file://" + sys.argv[-2], rank=0, world_size=1)
    print(agent.current().metrics.get("no_process_group", False))
"""


def test_a_rank_of_several_stepping_with_no_process_group_says_so_until_it_makes_one(tmp_path):
    """WORLD_SIZE=2 and steps with no process group: the rank trains alone (NO_PROCESS_GROUP in
    its heartbeat); a group made later takes it back; one rank alone never says it."""
    def run(world: str, *argv: str) -> list[str]:
        code = STEPS_THEN_A_GROUP.replace("sys.argv[-1]", repr(argv[-1]) if argv else "''")
        code = code.replace("sys.argv[-2]", repr(argv[0]) if argv else "''")
        return run_python(code, tmp_path, RANK="1", WORLD_SIZE=world).split()

    assert run("2") == ["True"]
    assert heartbeat(tmp_path, rank=1)["metrics"] == {"no_process_group": True}
    assert run("2", str(tmp_path / "store"), "group") == ["True", "False"]
    assert run("1") == ["False"]


def test_each_rank_times_its_own_optimizer_steps_into_its_heartbeat(tmp_path):
    code = ("import time, torch\nm = torch.nn.Linear(2, 1)\n"
            "o = torch.optim.SGD(m.parameters(), lr=0.1)\nfor _ in range(7):\n"
            "    o.zero_grad(); m(torch.ones(1, 2)).sum().backward(); o.step(); time.sleep(0.05)\n")
    run_python(code, tmp_path, extra_path=PACKAGE_ROOT)
    summary = heartbeat(tmp_path)["step_s"]
    assert summary["n"] == 6  # 7 steps, 6 gaps between them
    assert 0.05 <= summary["p50"] <= summary["p95"] <= summary["max"] < 5


# full: gc.collect(); young: the automatic collection the first allocation sets off after
# gc.enable(), over every object made while gc was disabled (a generation 0 or 1 collection).
@pytest.mark.parametrize("collection", ["full", "young"])
def test_a_long_garbage_collection_is_in_the_heartbeat_while_it_runs(tmp_path, collection):
    collect = "gc.collect()" if collection == "full" else "gc.enable(); trigger = [[]]"
    code = ("import gc, json, torch\nfrom fsdp_orch.bootstrap import agent\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\no.step()\n"
            "gc.disable()\nfor _ in range(300_000): cycle = []; cycle.append(cycle)\n"
            "seen = []\n"
            "gc.callbacks.append(lambda phase, info: seen.append((phase, info['generation'], "
            f"json.load(open(agent.current()._path)).get('collecting_since'))))\n{collect}\n"
            "gc.callbacks.clear()\nprint(json.dumps(seen))\n")
    out = run_python(code, tmp_path, extra_path=PACKAGE_ROOT)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen[0][0] == "start" and seen[0][2] is not None, seen  # written as the collection began
    assert (seen[0][1] == 2) == (collection == "full"), seen
    assert seen[-1][0] == "stop"
    assert "collecting_since" not in heartbeat(tmp_path)  # gone once it ended


def test_after_the_interpreter_was_held_the_first_heartbeat_does_not_show_a_stale_main_thread(
        tmp_path):
    # Seen in CI on a loaded machine: a rank held the GIL for 6 s in one native call; the heartbeat
    # thread's first write after it still carried python_at from before (the main thread had not
    # run the probe's callback yet), the relay stopped saying held_since, and the rank looked hung
    # for that moment. Here a second thread holds the GIL while the main thread sleeps, so the
    # callback cannot run: the write after the hold must still not show 2 s in a native call.
    code = ("import ctypes, json, threading, time, torch\nfrom fsdp_orch.bootstrap import agent\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\no.step()\n"
            "time.sleep(0.6)\nbefore = json.load(open(agent.current()._path))['python_at']\n"
            "ended = []\n"
            "def hold():\n    ctypes.PyDLL(None).usleep(2_000_000)  # keeps the GIL\n"
            "    ended.append(time.time())\nthreading.Thread(target=hold).start()\n"
            "time.sleep(2.4)  # a native wait throughout\n"
            "beat = json.load(open(agent.current()._path))\n"
            "print(json.dumps({'before': before, 'ended': ended[0], 'python_at': "
            "beat['python_at'], 'time': beat['time']}))\n")
    seen = json.loads(run_python(code, tmp_path, extra_path=PACKAGE_ROOT).strip().splitlines()[-1])
    assert seen["time"] >= seen["ended"] - 0.05, seen  # written after the hold
    assert seen["python_at"] >= seen["ended"] - 0.2 > seen["before"] + 1.5, seen


def test_child_processes_cpu_is_measured_every_tick_so_a_wait_on_them_is_seen_at_once(tmp_path):
    # Data loader workers starting anew keep the main thread waiting; their CPU time is the hang
    # rule's veto. Seen in CI: measured only from the second tick of a wait, the news reached the
    # supervisor after a 2 s window. So it is measured while the main thread runs Python too.
    # The main thread runs Python until the heartbeat says compute_at, up to 30 s: with the old
    # rule it never would (the main thread never waits). A fixed 1.5 s failed 4 runs of 4 at load
    # 10-14 on 2 cores, where the busy child and the heartbeat thread get a tick of CPU now and
    # then.
    code = ("import json, subprocess, sys, time, torch\nfrom fsdp_orch.bootstrap import agent\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\no.step()\n"
            "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
            "started = time.time()\nbeat = {}\n"
            "while time.time() < started + 30 and (beat.get('compute_at') or 0) <= started:\n"
            "    until = time.time() + 0.1\n"
            "    while time.time() < until: sum(range(1000))  # Python, busy\n"
            "    try:\n        beat = json.load(open(agent.current()._path))\n"
            "    except ValueError:\n        pass\n"
            "child.kill()\n"
            "print(json.dumps({'started': started, 'seen_after': time.time() - started, "
            "'compute_at': beat.get('compute_at'), 'python_at': beat.get('python_at')}))\n")
    seen = json.loads(run_python(code, tmp_path, extra_path=PACKAGE_ROOT).strip().splitlines()[-1])
    assert seen["compute_at"] is not None and seen["compute_at"] > seen["started"], seen


def test_fault_hang_stops_the_main_thread_in_a_native_call(tmp_path):
    code = ("import subprocess, sys, time, json, torch\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(5):\n    o.step()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env.update({"FSDP_ORCH_RUN_DIR": str(tmp_path / "run"), "FSDP_ORCH_ATTEMPT": "0",
                "FSDP_ORCH_FAULT": "hang:step=3:rank=0", "PYTHONPATH": str(bootstrap_site_dir()),
                "OMP_NUM_THREADS": "1"})
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                beat = heartbeat(tmp_path)
                if beat["step"] == 3 and beat["time"] - beat["python_at"] > 2.0:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        else:
            raise AssertionError(f"no stuck heartbeat: {heartbeat(tmp_path)}")
        assert proc.poll() is None and beat["state"] == "training"
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert "injected hang at step 3" in err


def test_the_runtime_reports_through_the_agent_and_steps_are_not_counted_twice(tmp_path):
    code = ("import torch\nfrom fsdp_orch.runtime.heartbeat import heartbeat\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "import torch.distributed as dist\n"
            "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:29517', rank=0, "
            "world_size=1)\nfor step in range(1, 4):\n    o.step()\n    o.step()\n"
            "    heartbeat(step, loss=0.5)\ndist.destroy_process_group()\n")
    run_python(code, tmp_path)
    beat = heartbeat(tmp_path)
    assert beat["step"] == 3 and beat["loss"] == 0.5  # the runtime's steps, not 6 optimizer steps


def test_our_sitecustomize_hands_over_to_the_one_it_shadows(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS_RAN = True\n")
    out = run_python("import builtins; print(getattr(builtins, 'THEIRS_RAN', False))", tmp_path,
                     extra_path=str(theirs))
    assert out.strip() == "True"


def test_post_import_hook_runs_after_the_module_executes_and_not_before(tmp_path, monkeypatch):
    (tmp_path / "watched_mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("watched_mod", lambda module: seen.append(module.VALUE))
    assert seen == [] and "watched_mod" not in sys.modules
    import watched_mod  # noqa: F401

    assert seen == [41]
    assert sys.modules["watched_mod"].__loader__.__class__.__name__ != "_CallbackLoader"


def test_probe_tells_a_native_wait_from_python_work():
    probe = MainThreadProbe()
    stop = threading.Event()
    ages: list[float] = []  # seen from the watcher thread, as the supervisor sees the heartbeat

    def ask() -> None:
        while not stop.is_set():
            probe.ask()
            time.sleep(0.05)
            ages.append(time.time() - probe.python_at)

    watcher = threading.Thread(target=ask, daemon=True)
    watcher.start()
    try:
        time.sleep(1.0)  # one native call
        during_sleep = max(ages)
        ages.clear()
        end = time.time() + 0.5
        while time.time() < end:  # Python bytecode
            sum(range(100))
        during_python = max(ages)
    finally:
        stop.set()
        watcher.join()
    assert during_sleep >= 0.8
    assert during_python < 0.3


def test_the_state_initialising_step_of_a_dcp_load_is_not_a_training_step(tmp_path):
    code = ("import torch\nfrom torch.distributed.checkpoint.state_dict import get_state_dict\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.AdamW(m.parameters(), lr=0.1)\n"
            "get_state_dict(m, o)\n"  # steps once with zero grads and lr 0 to create AdamW's state
            "for _ in range(4):\n"
            "    o.zero_grad(); m(torch.ones(1, 2)).sum().backward(); o.step()\n")
    run_python(code, tmp_path, FSDP_ORCH_RESUME_STEP="40")
    assert heartbeat(tmp_path)["step"] == 44


def test_a_script_that_ends_in_an_exception_is_not_marked_done(tmp_path):
    code = ("import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "o.step()\nraise KeyError('bug')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env.update({"FSDP_ORCH_RUN_DIR": str(tmp_path / "run"), "FSDP_ORCH_ATTEMPT": "0",
                "PYTHONPATH": str(bootstrap_site_dir()), "OMP_NUM_THREADS": "1"})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "KeyError" in proc.stderr
    assert heartbeat(tmp_path)["state"] != "done"


def test_every_step_is_read_as_taken_and_the_main_thread_writes_no_heartbeat_at_a_step(tmp_path):
    """Issue 64: a step costs the main thread a step mark (a store into a mapped page), no
    heartbeat write; readers see each step at once all the same (observe.step_marks)."""
    code = ("import gc, json, threading, time, torch\nfrom fsdp_orch.bootstrap import agent\n"
            "from fsdp_orch.observe.heartbeats import read_heartbeat_file\n"
            "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\no.step()\n"
            "a = agent.current()\nmain = threading.get_ident()\nwriters = []\n"
            "write = a._write_locked\n"
            "def counted(*args, **kwargs):\n"
            "    writers.append(threading.get_ident())\n    write(*args, **kwargs)\n"
            "a._write_locked = counted\n"
            "gc.disable()  # a long collection's heartbeat is the main thread's: none here\n"
            "exact = []\nfor step in range(2, 300):\n"
            "    o.step()\n    exact.append(read_heartbeat_file(a._path).step == step)\n"
            "    time.sleep(0.004)\n"
            "gc.enable()\n"
            "print(json.dumps({'exact': all(exact), 'main': writers.count(main), "
            "'watcher': len(writers) - writers.count(main)}))\n")
    seen = json.loads(run_python(code, tmp_path, extra_path=PACKAGE_ROOT).strip().splitlines()[-1])
    assert seen["exact"] and seen["main"] == 0 and seen["watcher"] >= 1, seen
    assert heartbeat(tmp_path)["step"] == 299  # the end of the script writes the last one


def test_a_rank_that_holds_the_interpreter_right_after_its_last_step_is_read_at_that_step(
        tmp_path):
    """Issue 43 on one process: the watcher thread cannot write while the main thread holds the
    interpreter in a native call after its last step; the step mark already says it."""
    from fsdp_orch.observe.heartbeats import read_heartbeat_file

    code = ("import ctypes, sys, torch\nm = torch.nn.Linear(2, 1)\n"
            "o = torch.optim.SGD(m.parameters(), lr=0.1)\nfor _ in range(50):\n    o.step()\n"
            "print('stepped', flush=True)\n"
            "ctypes.PyDLL(None).usleep(30_000_000)  # keeps the GIL\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env.update({"FSDP_ORCH_RUN_DIR": str(tmp_path / "run"), "FSDP_ORCH_ATTEMPT": "0",
                "PYTHONPATH": os.pathsep.join((str(bootstrap_site_dir()), PACKAGE_ROOT)),
                "OMP_NUM_THREADS": "1"})
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "stepped"
        path = tmp_path / "run" / "heartbeats" / "attempt-0" / "rank-0.json"
        beat = read_heartbeat_file(str(path))
        assert beat.step == 50 and beat.state == "training", beat
    finally:
        proc.kill()
        proc.communicate()


def test_two_optimizers_stepping_in_turn_count_one_step_each_turn(tmp_path):
    code = ("import torch\nm = torch.nn.Linear(2, 1)\n"
            "a = torch.optim.SGD([m.weight], lr=0.1)\nb = torch.optim.AdamW([m.bias], lr=0.1)\n"
            "for _ in range(5):\n    a.step()\n    b.step()\n"
            "b.step()\nb.step()  # b ahead of a: its 7th step is the job's 7th\n")
    run_python(code, tmp_path, extra_path=PACKAGE_ROOT, FSDP_ORCH_RESUME_STEP="10")
    assert heartbeat(tmp_path)["step"] == 17
