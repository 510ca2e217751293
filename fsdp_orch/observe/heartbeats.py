"""Heartbeat files: one JSON file per rank and attempt, replaced atomically every half second and at
changes of state, each step in the step mark beside it. Torch-free.

The rank's bootstrap rewrites the file from its watcher thread every tick, and at each step a script
reports through the runtime; an optimizer step of an unchanged script goes to the step mark
(``fsdp_orch.observe.step_marks``) as it is taken, which every reader here applies.

Layout: ``<run_dir>/heartbeats/attempt-<A>/rank-<R>.json`` holding
``{"rank", "attempt", "step", "loss", "time", "state", "pid", "metrics", "progress_at",
"python_at"}``. ``state`` is one of ``starting`` (process group up, no step done yet), ``training``,
``saving`` (inside a checkpoint save: slow, not hung) and ``done``. ``time`` is when the file was
written; ``progress_at`` when the step or state last changed (absent: the same as ``time``);
``python_at`` when the rank's main thread last ran Python bytecode (absent: not probed); ``io_at``
when the rank's process last wrote at a rate that counts as I/O progress (absent: never, or not
measured: see ``fsdp_orch.bootstrap.io_meter``); ``compute_at``, in a process running torch_xla
only, when it last used a quarter of a core or more (compiling a graph:
``fsdp_orch.bootstrap.compute_meter``), or, in any process, when its child processes (data loader
workers) last did; ``collecting_since``, when a full garbage collection began that still runs (it
holds the interpreter, so the file is not rewritten until it ends; absent: none runs); ``step_s``,
the rank's own step times (``{"n", "p50", "p95", "max"}``: ``fsdp_orch.observe.step_times``; absent
before two steps, and in heartbeats of older versions), from which the supervisor sets the hang
window; ``held_since``, never in a rank's own file: added by the node's relay when the file has not
been rewritten for a while (:func:`held_since`); ``proc_state`` and ``proc_state_since``, never in
a rank's own file either: added by the relay to a held rank's whose process it finds frozen
(``T``/``t`` stopped, ``D`` uninterruptible: ``fsdp_orch.observe.process_state``), and since when.
The bootstrap on every rank writes them
(``fsdp_orch.bootstrap.agent``), fed by the runtime where a script uses it; the supervisor reads
them with :func:`read_heartbeats`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_orch.places.private import write_atomically
from fsdp_orch.vocab.states import HeartbeatState

STATES = tuple(s.value for s in HeartbeatState)
# A write of the watcher (every 0.5 s) missed by half a tick: the relay reads at 0.25 s (node agent)
# or 0.5 s (SSH report), so the supervisor knows a rank is held 0.75-1.25 s after its last write,
# while its python_at (up to a tick older than that write) looks like a hang only past the window's
# 2 s floor. A write merely late on a busy machine flags it for a moment: that only defers a
# verdict.
HELD_AFTER_S = 0.75
# metrics key of a rank resumed at step S that returned with no process group and no step: done at
# S only if the attempt exits 0 (the bootstrap cannot see its own exit status)
RETURNED_WITHOUT_A_STEP = "returned_without_a_step"
# metrics key of a rank that takes optimizer steps with no torch.distributed process group while
# its launcher started several (WORLD_SIZE > 1): it trains a model of its own
NO_PROCESS_GROUP = "no_process_group"
# The optional unix times a heartbeat may carry (``None``: not seen), each validated the same way.
TIME_FIELDS = ("progress_at", "python_at", "io_at", "compute_at", "collecting_since", "held_since",
               "proc_state_since")
_RANK_FILE = re.compile(r"rank-(\d+)\.json")


@dataclass(frozen=True)
class Heartbeat:
    rank: int
    attempt: int
    step: int
    loss: float | None
    time: float  # unix time of the write
    state: str
    pid: int
    metrics: dict[str, Any] = field(default_factory=dict)
    progress_at: float | None = None  # the step or state last changed; None: at ``time``
    python_at: float | None = None  # the main thread last ran Python; None: not probed
    host: str | None = None  # where ``pid`` lives (a supervisor inspects only its own host's)
    io_at: float | None = None  # the process last made I/O progress (bytes written); None: not seen
    # an XLA process or a rank's children last used CPU; None: not seen
    compute_at: float | None = None
    # the rank's recent step times (observe.step_times); None: none yet
    step_s: dict[str, Any] | None = None
    collecting_since: float | None = None  # a full garbage collection runs since; None: none runs
    # the rank's writer fell silent at this time (set by the relay: see held_since)
    held_since: float | None = None
    # its arrival at its recent collectives (observe.arrivals); None: not sampled
    arrivals: dict[str, Any] | None = None
    # the node rank it runs on, as its node agent said (torchrun's c10d rendezvous need not give
    # node N the ranks N*procs..); None: not said
    node: int | None = None
    # the most bytes its accelerator held in tensors so far in the process (on CUDA,
    # torch.cuda.max_memory_allocated); None: not on an accelerator, or not read
    device_peak: int | None = None
    # the rank's process frozen, as its node's relay read it (a /proc state letter: T, t or D), and
    # since when (the relay's clock); None: not frozen, or not read
    proc_state: str | None = None
    proc_state_since: float | None = None

    @property
    def progress_time(self) -> float:
        return self.time if self.progress_at is None else self.progress_at

    def to_json(self) -> str:
        data = {"rank": self.rank, "attempt": self.attempt, "step": self.step, "loss": self.loss,
                "time": self.time, "state": self.state, "pid": self.pid, "metrics": self.metrics}
        if self.progress_at is not None:
            data["progress_at"] = self.progress_at
        if self.python_at is not None:
            data["python_at"] = self.python_at
        if self.host is not None:
            data["host"] = self.host
        if self.io_at is not None:
            data["io_at"] = self.io_at
        if self.compute_at is not None:
            data["compute_at"] = self.compute_at
        if self.step_s is not None:
            data["step_s"] = self.step_s
        if self.collecting_since is not None:
            data["collecting_since"] = self.collecting_since
        if self.held_since is not None:
            data["held_since"] = self.held_since
        if self.arrivals is not None:
            data["arrivals"] = self.arrivals
        if self.device_peak is not None:
            data["device_peak"] = self.device_peak
        if self.proc_state is not None:
            data["proc_state"] = self.proc_state
        if self.proc_state_since is not None:
            data["proc_state_since"] = self.proc_state_since
        return json.dumps(data, separators=(",", ":"))


def heartbeat_dir(run_dir: str | os.PathLike[str], attempt: int) -> Path:
    return Path(os.path.expanduser(os.fspath(run_dir))) / "heartbeats" / f"attempt-{attempt}"


def heartbeat_path(run_dir: str | os.PathLike[str], attempt: int, rank: int) -> Path:
    return heartbeat_dir(run_dir, attempt) / f"rank-{rank}.json"


def parse_heartbeat(text: str) -> Heartbeat:
    """Parse one heartbeat file's text. Raises ValueError naming what is wrong."""
    return heartbeat_from_dict(json.loads(text))


_NUMBER = (int, float)


def heartbeat_from_dict(data: Any) -> Heartbeat:
    """A heartbeat from its decoded JSON (a file's, or one in a node summary). Raises ValueError.
    The supervisor takes thousands a second from the node agents: a well-formed one is checked in
    one expression; anything else goes through :func:`_checked`, which names what is wrong."""
    if type(data) is dict:
        get: Callable[[str], Any] = data.get  # decoded JSON
        rank, attempt, step, pid, when = (get("rank"), get("attempt"), get("step"), get("pid"),
                                          get("time"))
        state, loss, metrics, host = get("state"), get("loss"), get("metrics") or {}, get("host")
        progress_at, python_at, io_at, compute_at = (get("progress_at"), get("python_at"),
                                                     get("io_at"), get("compute_at"))
        step_s, collecting, held = get("step_s"), get("collecting_since"), get("held_since")
        arrivals, node, device_peak = get("arrivals"), get("node"), get("device_peak")
        proc_state, proc_since = get("proc_state"), get("proc_state_since")
        # x - x == 0 holds for finite numbers only (inf - inf and nan - nan are
        # nan); type() is exact: no bool
        if (type(rank) is int and type(attempt) is int and type(step) is int and type(pid) is int
                and type(when) in _NUMBER and when - when == 0 and state in STATES
                and (loss is None or type(loss) in _NUMBER) and type(metrics) is dict
                and (host is None or type(host) is str)
                and (progress_at is None
                     or (type(progress_at) in _NUMBER and progress_at - progress_at == 0))
                and (python_at is None
                     or (type(python_at) in _NUMBER and python_at - python_at == 0))
                and (io_at is None or (type(io_at) in _NUMBER and io_at - io_at == 0))
                and (compute_at is None
                     or (type(compute_at) in _NUMBER and compute_at - compute_at == 0))
                and (step_s is None or type(step_s) is dict)
                and (collecting is None
                     or (type(collecting) in _NUMBER and collecting - collecting == 0))
                and (held is None or (type(held) in _NUMBER and held - held == 0))
                and (arrivals is None or type(arrivals) is dict)
                and (node is None or type(node) is int)
                and (device_peak is None or (type(device_peak) is int and device_peak >= 0))
                and (proc_state is None or type(proc_state) is str)
                and (proc_since is None
                     or (type(proc_since) in _NUMBER and proc_since - proc_since == 0))):
            return Heartbeat(rank, attempt, step, None if loss is None else float(loss),
                             float(when), state, pid, metrics,
                             None if progress_at is None else float(progress_at),
                             None if python_at is None else float(python_at), host,
                             None if io_at is None else float(io_at),
                             None if compute_at is None else float(compute_at), step_s,
                             None if collecting is None else float(collecting),
                             None if held is None else float(held), arrivals, node, device_peak,
                             proc_state, None if proc_since is None else float(proc_since))
    return _checked(data)


def _checked(data: Any) -> Heartbeat:
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    for key, kind in (("rank", int), ("attempt", int), ("step", int), ("pid", int)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ValueError(f"{key}: expected an integer, got {data.get(key)!r}")
    when = data.get("time")
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not math.isfinite(when):
        raise ValueError(f"time: expected a unix time, got {when!r}")
    state = data.get("state")
    if state not in STATES:
        raise ValueError(f"state: expected one of {', '.join(STATES)}, got {state!r}")
    loss = data.get("loss")
    if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool)):
        raise ValueError(f"loss: expected a number or null, got {loss!r}")
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics: expected an object, got {metrics!r}")
    times = {}
    for key in TIME_FIELDS:
        value = data.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not math.isfinite(value)):
            raise ValueError(f"{key}: expected a unix time or null, got {value!r}")
        times[key] = None if value is None else float(value)
    host = data.get("host")
    if host is not None and not isinstance(host, str):
        raise ValueError(f"host: expected a string or null, got {host!r}")
    step_s = data.get("step_s")
    if step_s is not None and not isinstance(step_s, dict):
        raise ValueError(f"step_s: expected an object or null, got {step_s!r}")
    arrivals = data.get("arrivals")
    if arrivals is not None and not isinstance(arrivals, dict):
        raise ValueError(f"arrivals: expected an object or null, got {arrivals!r}")
    node = data.get("node")
    if node is not None and (type(node) is not int or node < 0):
        raise ValueError(f"node: expected a node rank or null, got {node!r}")
    device_peak = data.get("device_peak")
    if device_peak is not None and (type(device_peak) is not int or device_peak < 0):
        raise ValueError(f"device_peak: expected a byte count or null, got {device_peak!r}")
    proc_state = data.get("proc_state")
    if proc_state is not None and not isinstance(proc_state, str):
        raise ValueError(f"proc_state: expected a process state letter or null, got {proc_state!r}")
    return Heartbeat(rank=data["rank"], attempt=data["attempt"], step=data["step"],
                     loss=None if loss is None else float(loss), time=float(when), state=state,
                     pid=data["pid"], metrics=metrics, host=host, step_s=step_s,
                     arrivals=arrivals, node=node, device_peak=device_peak,
                     proc_state=proc_state, **times)


def held_since(beat: Any, now: float) -> float | None:
    """When the rank whose decoded heartbeat file is ``beat`` stopped rewriting it (its ``time``),
    or None while it writes, once it is done, or when ``beat`` is not a heartbeat.

    The bootstrap's watcher thread rewrites the file every ``TICK_S`` (0.5 s) whatever the main
    thread does: a rank waiting in a collective, a sleep or a blocked read has released the
    interpreter, and its file stays fresh. A file older than ``HELD_AFTER_S`` means the watcher
    could not run: the main thread holds the interpreter in one native call that does not let it
    go (a page fault stalled on memory reclaim, a C extension that keeps the GIL, a large
    allocation or collection), or the process is frozen. From outside, such a rank may be busy or
    stuck, and its ``python_at`` ages like a hung rank's: that is no signal, so the hang rule waits
    for it up to the ceiling. Computed where the file is read, on the rank's own node (its clock):
    the node agent's summary and the SSH node report carry it."""
    if type(beat) is not dict:
        return None
    written: Any = beat.get("time")  # decoded JSON
    if (type(written) not in _NUMBER or beat.get("state") == HeartbeatState.DONE
            or not now - written > HELD_AFTER_S):
        return None
    return float(written)


def read_heartbeat_file(path: str) -> Heartbeat:
    """One rank's heartbeat file, with the step its main thread marked since (``step_marks``).
    Raises OSError or ValueError."""
    from fsdp_orch.observe.step_marks import with_step_mark

    with open(path, encoding="utf-8") as f:
        data = json.loads(f.read())
    return heartbeat_from_dict(with_step_mark(data, path) if type(data) is dict else data)


def read_heartbeats(run_dir: str | os.PathLike[str], attempt: int) -> dict[int, Heartbeat]:
    """The latest heartbeat of every rank of ``attempt`` that wrote
    one; unreadable files are skipped."""
    directory = heartbeat_dir(run_dir, attempt)
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[int, Heartbeat] = {}
    for name in names:
        match = _RANK_FILE.fullmatch(name)
        if not match:
            continue
        try:
            beat = read_heartbeat_file(str(directory / name))
        except (OSError, ValueError):
            continue  # a file replaced while we looked, or not ours
        if beat.rank == int(match.group(1)):
            out[beat.rank] = beat
    return dict(sorted(out.items()))


def write_heartbeat(path: str | os.PathLike[str], beat: Heartbeat, tmp_tag: str = "") -> None:
    """Replace ``path`` atomically (temp file in the same directory, then rename; no fsync: cheap).
    ``tmp_tag``: a temp file of its own, for a write made while another
    of this process's is in flight."""
    # 0600 whatever the umask: a rank runs under the user's (bootstrap.user_umask)
    write_atomically(path, beat.to_json(), mode=0o600, tmp_tag=tmp_tag or "hb")


def returned_without_a_step(beats: dict[int, Heartbeat]) -> set[int]:
    """The ranks of ``beats`` that returned with no step after a resume (RETURNED_WITHOUT_A_STEP):
    done only if the attempt exits 0, so no rule that runs before the exit may see them."""
    return {rank for rank, beat in beats.items() if beat.metrics.get(RETURNED_WITHOUT_A_STEP)}


__all__ = ["HELD_AFTER_S", "NO_PROCESS_GROUP", "RETURNED_WITHOUT_A_STEP", "STATES", "TIME_FIELDS",
           "Heartbeat", "heartbeat_dir", "heartbeat_from_dict", "heartbeat_path", "held_since",
           "parse_heartbeat", "read_heartbeat_file", "read_heartbeats", "returned_without_a_step",
           "write_heartbeat"]
