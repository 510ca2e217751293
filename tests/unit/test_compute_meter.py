"""The bootstrap's compute meter: CPU time as progress in an XLA process (a graph compiling), the
clocks and the CPU counter injected."""

from __future__ import annotations

import time

from fsdp_orch.bootstrap.compute_meter import MIN_CORE_FRACTION, ComputeMeter, xla_imported


def meter(cpu: list[float], applies: bool = True) -> ComputeMeter:
    walls = iter([0.0, 0.5, 1.0, 1.5, 2.0])
    cpus = iter(cpu)
    stamps = iter([10.0, 11.0, 12.0, 13.0])
    return ComputeMeter(clock=lambda: next(stamps), cpu_seconds=lambda: next(cpus),
                        wall=lambda: next(walls), applies=lambda: applies)


def test_a_quarter_of_a_core_per_sample_is_progress_less_is_not():
    busy = 0.5 * MIN_CORE_FRACTION  # per 0.5 s sample: exactly the threshold
    m = meter([0.0, busy, busy + 0.01, busy + 0.01 + 0.5])
    m.sample()  # the compiler's threads: a quarter of a core
    assert m.compute_at == 10.0
    m.sample()  # 2% of a core: the watcher thread and an idle runtime
    assert m.compute_at == 10.0
    m.sample()  # a whole core
    assert m.compute_at == 11.0


def test_cpu_time_counts_only_where_torch_xla_runs():
    # a CUDA rank waiting in an NCCL collective spins a core: that must not hide its hang
    m = meter([0.0, 1.0, 2.0], applies=False)
    m.sample()
    m.sample()
    assert m.compute_at is None


def test_the_default_applies_only_once_torch_xla_is_imported():
    assert not xla_imported()  # the main environment has no torch_xla
    m = ComputeMeter()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # busy: would count, were this an XLA process
        pass
    m.sample()
    assert m.compute_at is None


def test_the_cpu_of_child_processes_is_counted_and_kept_after_they_exit():
    import subprocess
    import sys

    from fsdp_orch.bootstrap.compute_meter import ChildrenCpu

    children = ChildrenCpu()
    assert children() == 0.0
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.6\n"
                             "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        while children() < 0.5:  # a data loader worker loading: its CPU time grows
            assert busy.poll() is None
            time.sleep(0.05)
    finally:
        busy.kill()
        busy.wait()
    assert children() >= 0.5  # gone, and what it used still counts
    assert ChildrenCpu(pid=busy.pid)() == 0.0  # a process with no children


def test_a_child_already_there_counts_only_the_cpu_it_uses_afterwards():
    # Seen in CI: a process that another test had started was already a child, and its past CPU
    # time counted at the first reading, as if a data loader worker had just been loading.
    import subprocess
    import sys

    from fsdp_orch.bootstrap.compute_meter import ChildrenCpu

    early = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                              "while time.process_time() < end: pass\nprint('idle', flush=True)\n"
                              "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        before = ChildrenCpu()
        # idle from here on: a meter made while it still spun could read its last 10 ms tick
        assert early.stdout is not None and early.stdout.readline() == "idle\n"
        assert before() >= 0.25
        assert ChildrenCpu()() == 0.0
    finally:
        early.kill()
        early.wait()


def test_under_load_a_busy_child_needs_only_half_the_share_of_a_core_it_can_get():
    from fsdp_orch.bootstrap.compute_meter import fraction_at_load

    assert fraction_at_load(0.3, 2) == MIN_CORE_FRACTION  # an idle machine: a quarter of a core
    assert fraction_at_load(4.0, 2) == MIN_CORE_FRACTION  # twice the load: a busy process gets 0.5
    assert abs(fraction_at_load(13.0, 2) - 1 / 13) < 1e-9  # load 13 on 2 cores: 0.15 a process
    assert fraction_at_load(13.0, 0) == 0.5 / 13
    # a worker at load 13 got 0.1 core over a 0.5 s sample: seen at that load's threshold, not at a
    # fixed quarter of a core
    for least, seen in ((MIN_CORE_FRACTION, False), (lambda: fraction_at_load(13.0, 2), True)):
        walls, cpus = iter([0.0, 0.5]), iter([0.0, 0.05])
        worker = ComputeMeter(clock=lambda: 10.0, cpu_seconds=cpus.__next__, wall=walls.__next__,
                              applies=lambda: True, min_fraction=least)
        worker.sample()
        assert (worker.compute_at is not None) is seen
