"""The agent the bootstrap installs in every Python process of a job: step progress, main-thread
liveness and injected faults for scripts that never import fsdp_orch.

Passive until the process starts a process group (``init_process_group``, wrapped when
``torch.distributed`` is imported) or takes an optimizer step (torch's global optimizer-step post
hook, registered when ``torch.optim.optimizer`` is imported). Then it marks each step as it is taken
(``fsdp_orch.observe.step_marks``: a store into a mapped page) and writes the rank's heartbeat file
(``fsdp_orch.observe.heartbeats``) every ``TICK_S`` from a watcher thread that also keeps the
main-thread probe asking (``bootstrap.heartbeat_thread``), and from the main thread when it becomes
active, when a garbage collection runs long and when its script returns. A script that uses
``fsdp_orch.runtime`` reports its own steps, loss and saves through :meth:`Agent.report`; from then
on optimizer steps are not counted twice and the runtime applies the faults.
"""

from __future__ import annotations

import _thread
import gc as _gc
import os
import sys
import time

from fsdp_orch.bootstrap.heartbeat_thread import STEP_WRITE_MIN_S, HeartbeatThread
from fsdp_orch.bootstrap.importhook import when_imported

TYPE_CHECKING = False  # typing and threading cost milliseconds in every Python process of the job
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any

# young objects past which a collection is worth a heartbeat (about 10 ms of work)
LONG_YOUNG_COLLECTION = 100_000
# DCP's set_state_dict/get_state_dict step once there (zero gradients, lr 0) to create the
# optimizer's state before a load: not a training step (bootstrap.torch_hooks.wrap_init_optim_state)
DCP_STATE_DICT = "torch.distributed.checkpoint.state_dict"
# the pid of the process its launcher started as the rank (Agent._is_the_rank_itself)
RANK_PID = "FSDP_ORCH_RANK_PID"


class Agent:
    def __init__(self, env: Mapping[str, str], clock: Callable[[], float] = time.time):
        self.run_dir = os.path.expanduser(env["FSDP_ORCH_RUN_DIR"])
        # node-local, read by the node's agent
        self.beat_dir = env.get("FSDP_ORCH_BEAT_DIR") or None
        self.attempt = _int(env.get("FSDP_ORCH_ATTEMPT"), 0)
        self.attempt_dir = env.get("FSDP_ORCH_ATTEMPT_DIR") or None
        self.fault_text = env.get("FSDP_ORCH_FAULT") or None
        self.collective_timeout = _float(env.get("FSDP_ORCH_COLLECTIVE_TIMEOUT"))
        self.base_step = _int(env.get("FSDP_ORCH_RESUME_STEP"), 0)
        self.env_rank = _int(env.get("RANK"), -1)
        self.clock = clock
        self.rank: int | None = None
        self.active = False
        self.passive = False  # a forked child of an active rank: never writes
        self.runtime_owned = False
        self.step = self.base_step
        self.loss: float | None = None
        self.state = "starting"
        self.metrics: dict[str, Any] = {}
        self.progress_at = clock()
        self._optimizer_steps: dict[int, int] = {}  # by id(); the last one's in _hot_steps
        self._hot_key: int | None = None  # id() of the optimizer that stepped last
        self._hot_steps = 0  # its steps
        self._most_steps = 0  # the most steps of an optimizer, kept as they count up
        self._lock = _thread.allocate_lock()
        self._last_write = 0.0
        self._step_unwritten = False  # without a step mark: a step taken since the last write
        self._path: str | None = None
        self._step_mark: Any = None  # observe.step_marks: every step, marked as it is taken
        # inside DCP's _init_optim_state: its optimizer step is not a training step (torch_hooks)
        self._initialising_state = 0
        self._probe: Any = None
        self._io: Any = None
        self._compute: Any = None
        self._children: Any = None
        self._step_times: Any = None
        self._gc_since: float | None = None  # a long garbage collection runs since
        self._heartbeat_thread: HeartbeatThread | None = None  # once activated
        self._injector: Any = None
        self._stack_file: Any = None
        self._host: str | None = None

    # --- hooks -------------------------------------------------------------------------------

    def install(self) -> None:
        when_imported("torch.optim.optimizer", self._on_optimizer_module)
        when_imported("torch.distributed", self._on_distributed_module)
        when_imported(DCP_STATE_DICT, self._on_dcp_state_dict)
        for module, bind in _store_hooks().items():
            when_imported(module, bind)
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        if self.base_step > 0 and self._is_the_rank_itself():
            from fsdp_orch.bootstrap.process_hooks import call_when_main_returns

            call_when_main_returns(self._returned_before_a_step)

    def _is_the_rank_itself(self) -> bool:
        """Whether this process is the one its launcher started as rank ``RANK``, not a Python
        process that rank started in turn (a compile worker, an evaluation subprocess), which
        inherits its environment: the first process with ``RANK`` marks it with its pid."""
        if self.env_rank < 0 or os.environ.get(RANK_PID) not in (None, str(os.getpid())):
            return False
        os.environ[RANK_PID] = str(os.getpid())
        return True

    def _on_optimizer_module(self, module: ModuleType) -> None:
        module.register_optimizer_step_post_hook(self._after_optimizer_step)

    def _on_distributed_module(self, module: ModuleType) -> None:
        from fsdp_orch.bootstrap.torch_hooks import wrap_init_process_group_everywhere

        wrap_init_process_group_everywhere(module, self)

    def _on_dcp_state_dict(self, module: ModuleType) -> None:
        from fsdp_orch.bootstrap.torch_hooks import wrap_init_optim_state

        wrap_init_optim_state(module, self)

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """After each optimizer step, on the main thread: a few attribute stores and the step mark
        (three stores into a mapped page), no lock, no formatting, no system call; the heartbeat
        file is the watcher thread's to rewrite, every tick. What the hook touches is cold (the step
        has just swept the caches): timed where torch calls it in a ``Linear(1024, 1024)`` step,
        the hook took 110 us with a lock, a frame walk, a text mark and its pwrite (and a heartbeat
        write every 50 ms), 20 us like this (issue 64: bench/bootstrap_cost.py's hook_in_step_us).
        """
        if not self.active:
            self.activate(self.process_group_rank())
            if not self.active:
                return
            self._note_steps_without_a_group()
        if self.runtime_owned or self._initialising_state:
            return
        key = id(optimizer)
        if key == self._hot_key:  # the optimizer that stepped last: no dictionary
            steps = self._hot_steps = self._hot_steps + 1
        else:
            steps = self._count_step(key)
        if steps > self._most_steps:
            self._most_steps = steps
        step = self.base_step + self._most_steps
        if step == self.step and self.state == "training":
            return
        now = self.clock()  # the time of the step, and of the main thread's Python (python_at)
        self._step_times.step_at(now)
        mark = self._step_mark
        if mark is None:
            self._step_without_mark(step, now)
        else:
            # No lock: the state, the step, then its time; _write_locked reads them the other way
            # round, so a heartbeat never pairs a step with a later step's time (then its mark,
            # newer, would be ignored: issue 43)
            self.state = "training"
            self.step = step
            self.progress_at = now
            mark.mark(step, now)
        if self._injector:
            self._injector.at_step_end(step)

    def _count_step(self, key: int) -> int:
        """A step of another optimizer than the last one's: the counts by optimizer (a model can
        have several), that optimizer's now the one kept at hand."""
        counts = self._optimizer_steps
        if self._hot_key is not None:
            counts[self._hot_key] = self._hot_steps
        steps = counts[key] = counts.get(key, 0) + 1
        self._hot_key, self._hot_steps = key, steps
        return steps

    def _step_without_mark(self, step: int, now: float) -> None:
        """No step mark here (its file could not be made): the heartbeat file says the step, at
        most every STEP_WRITE_MIN_S, and the watcher writes one left unwritten between ticks."""
        with self._lock:
            self.step, self.state, self.progress_at = step, "training", now
            self._step_unwritten = True
            if now - self._last_write >= STEP_WRITE_MIN_S:
                self._write_locked(now)

    def _note_steps_without_a_group(self) -> None:
        """One of several ranks (``WORLD_SIZE`` > 1) stepping with no process group trains a model
        of its own (Lightning's single-device strategy when the script sets no ``num_nodes``):
        said in the heartbeat (NO_PROCESS_GROUP) until a group is made."""
        if _int(os.environ.get("WORLD_SIZE"), 1) > 1 and not _in_a_process_group():
            from fsdp_orch.observe.heartbeats import NO_PROCESS_GROUP

            self.metrics = {**self.metrics, NO_PROCESS_GROUP: True}

    def process_group_made(self) -> None:
        """``init_process_group`` returned (``torch_hooks``): the rank is no longer apart."""
        from fsdp_orch.observe.heartbeats import NO_PROCESS_GROUP

        if NO_PROCESS_GROUP in self.metrics:
            self.metrics = {k: v for k, v in self.metrics.items() if k != NO_PROCESS_GROUP}

    def process_group_rank(self) -> int:
        """This process's rank in its process group, else ``RANK`` (0 when unset)."""
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:
            pass
        return _int(os.environ.get("RANK"), 0)

    def _after_fork_in_child(self) -> None:
        if self.active:
            self.active = False
            self.passive = True

    # --- what the runtime reports ------------------------------------------------------------

    def report(self, rank: int, step: int, loss: float | None, state: str,
               metrics: dict[str, Any]) -> None:
        """A step, loss or state from ``fsdp_orch.runtime``: it owns progress from now on."""
        self.runtime_owned = True
        if not self.active:
            self.activate(rank)
        if not self.active:
            return
        now = self.clock()
        with self._lock:
            if step != self.step or state != self.state:
                self.progress_at = now
            if step != self.step and state == "training":
                self._step_times.step_at(now)
            elif state == "saving":
                self._step_times.saving()
            self.step, self.loss, self.state, self.metrics = step, loss, state, metrics
            self._write_locked(now)

    # --- activation and writing --------------------------------------------------------------

    def activate(self, rank: int) -> None:
        if self.active or self.passive or rank < 0:
            return
        from fsdp_orch.bootstrap.compute_meter import (
            ChildrenCpu,
            ComputeMeter,
            fraction_at_this_load,
        )
        from fsdp_orch.bootstrap.flight_recorder import trace_request
        from fsdp_orch.bootstrap.io_meter import WriteMeter
        from fsdp_orch.bootstrap.probe import MainThreadProbe
        from fsdp_orch.bootstrap.process_hooks import call_when_main_returns, register_stack_dump
        from fsdp_orch.observe.step_times import StepTimes

        self._bind(rank)
        if self._path is not None:
            from fsdp_orch.observe.step_marks import StepMark

            try:
                self._step_mark = StepMark(self._path)
            except OSError:
                self._step_mark = None
        self._probe = MainThreadProbe(self.clock)
        self._io = WriteMeter(self.clock)
        self._compute = ComputeMeter(self.clock)
        # Loading workers at a loaded machine's share of a core still count
        # (the veto holds under load).
        self._children = ComputeMeter(self.clock, cpu_seconds=ChildrenCpu(), applies=_always,
                                      min_fraction=fraction_at_this_load)
        self._step_times = StepTimes()
        self._injector = self._make_injector(rank)
        self._stack_file = register_stack_dump(self.attempt_dir, rank)
        _gc.callbacks.append(self._on_gc)
        self.active = True
        self.progress_at = self.clock()
        with self._lock:
            self._write_locked(self.progress_at)
        call_when_main_returns(self._at_exit)  # "done" before the interpreter's teardown
        self._heartbeat_thread = HeartbeatThread(self, trace_request(self.attempt_dir))
        self._heartbeat_thread.start()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """A collection of a large object graph holds the interpreter in one native call for
        seconds, the watcher thread included: the heartbeat says so as it begins
        (``collecting_since``), and the rule counts the rank as busy meanwhile. Full collections,
        and young ones with many objects to look at: after ``gc.disable()``/``gc.enable()``, or a
        burst of allocations, the automatic collection that follows is a young one over all of them
        (1.3 s for 8M here)."""
        if not self.active:  # a forked child (a data loader worker) never writes
            return
        if phase == "start":
            if info["generation"] != 2 and _gc.get_count()[0] < LONG_YOUNG_COLLECTION:
                return  # the common young collection: milliseconds, and hundreds a second
            now = self.clock()
            self._gc_since = now
        else:
            if self._gc_since is None:
                return
            now = self.clock()
            self._gc_since = None
            if self._probe is not None:
                self._probe.mark()
        # The watcher's own write may have set off the collection (its lock held): no wait there,
        # and the write goes through a temp file of its own so the one in flight is not torn. On
        # another thread, wait a little for a write in flight, or collecting_since is never written.
        thread = self._heartbeat_thread
        own = thread is not None and _thread.get_ident() == thread.ident
        if self._lock.acquire(not own, -1 if own else 0.5):
            try:
                self._write_locked(now)
            finally:
                self._lock.release()
        elif own:
            self._write_locked(now, tmp_tag="gc")

    def _make_injector(self, rank: int) -> Any:
        if not self.fault_text:
            return None
        from fsdp_orch.bootstrap.faults import FaultInjector, parse_faults

        try:
            faults = parse_faults(self.fault_text)
        except ValueError as exc:  # submit validates it; a hand-made environment may not
            print(f"[fsdp-orch] FSDP_ORCH_FAULT ignored: {exc}", file=sys.stderr, flush=True)
            return None
        injector = FaultInjector(faults, rank, self.attempt, self.collective_timeout or 600.0)
        return injector if injector else None

    def _at_exit(self) -> None:
        if not self.active:
            return
        if getattr(sys, "last_value", None) is not None:  # the script ended in an exception
            self.active = False
            return
        with self._lock:
            self.state = "done"
            self.progress_at = self.clock()
            self._write_locked(self.progress_at)
        self.active = False

    def _bind(self, rank: int) -> None:
        """This process is ``rank``: its host and its heartbeat file."""
        import socket

        from fsdp_orch.nodeagent.beat_dir import rank_beat_path

        self._host = socket.gethostname()
        self.rank = rank
        self._path = rank_beat_path(self.beat_dir, self.run_dir, self.attempt, rank)

    def _returned_before_a_step(self) -> None:
        """A rank resumed at step S (``FSDP_ORCH_RESUME_STEP``) whose script returned, with no
        exception, no process group and no optimizer step, had nothing left to train: a
        single-process Lightning run resumed from its checkpoint at ``max_steps`` returns at once.
        Said as the rank done at S, marked RETURNED_WITHOUT_A_STEP: ``sys.exit(1)`` also runs this,
        so the supervisor takes it only from an attempt that exits 0; else it reads an attempt
        that started no rank."""
        if self.active or self.passive or getattr(sys, "last_value", None) is not None:
            return
        from fsdp_orch.observe.heartbeats import RETURNED_WITHOUT_A_STEP

        self._bind(self.env_rank)
        with self._lock:
            self.state = "done"
            self.metrics = {RETURNED_WITHOUT_A_STEP: True}
            self.progress_at = self.clock()
            self._write_locked(self.progress_at)

    def _arrivals(self) -> dict[str, Any] | None:
        """The heartbeat thread's latest sample of the collectives' arrivals (observe.arrivals)."""
        thread = self._heartbeat_thread
        return thread.arrivals if thread is not None else None

    def _write_locked(self, now: float, tmp_tag: str = "") -> None:
        from fsdp_orch.bootstrap.device_memory import cuda_peak_bytes
        from fsdp_orch.observe.heartbeats import Heartbeat, write_heartbeat

        if self._path is None or self.rank is None:
            return
        computed = [m.compute_at for m in (self._compute, self._children)
                    if m is not None and m.compute_at]
        # The step hook stores the state, the step and its time without the lock, in that order:
        # read in the other order, a step is never paired with a later step's time
        progress_at = self.progress_at
        step, state = self.step, self.state
        python_at = self._probe.python_at if self._probe is not None else None
        if python_at is not None and progress_at > python_at:
            python_at = progress_at  # a step or a report: the main thread ran Python then
        try:
            write_heartbeat(self._path, Heartbeat(
                rank=self.rank, attempt=self.attempt, step=step, loss=self.loss, time=now,
                state=state, pid=os.getpid(), metrics=self.metrics,
                progress_at=progress_at, host=self._host, python_at=python_at,
                io_at=self._io.io_at if self._io is not None else None,
                compute_at=max(computed) if computed else None,
                step_s=self._step_times.summary() if self._step_times is not None else None,
                collecting_since=self._gc_since, arrivals=self._arrivals(),
                device_peak=cuda_peak_bytes()), tmp_tag=tmp_tag)
            self._last_write = now
            self._step_unwritten = False
        except OSError:
            pass  # a full or vanished run directory must not break training


def _always() -> bool:
    return True


def _in_a_process_group() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001 - a torch too broken to say: not said either way
        return True


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text not in (None, "") else default  # type: ignore[arg-type]
    except ValueError:
        return default


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _store_hooks() -> dict[str, Callable[[ModuleType], None]]:
    from fsdp_orch.bootstrap.store_bind import HOOKS

    return HOOKS


_agent: Agent | None = None


def install(env: Mapping[str, str] | None = None) -> Agent | None:
    """Install this process's agent (from ``sitecustomize``); None outside an fsdp-orch job."""
    global _agent
    env = os.environ if env is None else env
    if env.get("LOCAL_RANK"):  # a rank of torchrun or accelerate: the user's program, their umask
        from fsdp_orch.bootstrap.user_umask import apply_user_umask

        apply_user_umask(env)
    if _agent is None and env.get("FSDP_ORCH_RUN_DIR"):
        _agent = Agent(env)
        _agent.install()
    return _agent


def current() -> Agent | None:
    """The installed agent, if the bootstrap runs in this process and it may write."""
    return _agent if _agent is not None and not _agent.passive else None


__all__ = ["Agent", "current", "install"]
