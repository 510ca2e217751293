"""The heartbeat writer: after each step, atomically replace this rank's heartbeat file.

See ``fsdp_orch.observe.heartbeats`` for the layout and the reader. Where the bootstrap runs in this
process (every job fsdp-orch launches), the writer hands each beat to its agent, which owns the
file. Without a run directory (not under fsdp-orch) the writer is a no-op. ``job.step_done`` beats
for you; a script that does not use ``runtime.setup()`` (e.g. an Accelerate script) calls
:func:`heartbeat` after each step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fsdp_orch.bootstrap.agent import current as bootstrap_agent
from fsdp_orch.bootstrap.device_memory import cuda_peak_bytes
from fsdp_orch.nodeagent.beat_dir import rank_beat_path
from fsdp_orch.observe.heartbeats import STATES, Heartbeat, write_heartbeat
from fsdp_orch.observe.step_times import StepTimes
from fsdp_orch.vocab.states import HeartbeatState


class HeartbeatWriter:
    def __init__(self, run_dir: Path | None, attempt: int, rank: int):
        beat_dir = os.environ.get("FSDP_ORCH_BEAT_DIR") or None
        path = (rank_beat_path(beat_dir, str(run_dir), attempt, rank) if run_dir is not None
                else None)
        self.path = Path(path) if path is not None else None
        self.attempt = attempt
        self.rank = rank
        self.step = 0
        self.loss: float | None = None
        self.state = HeartbeatState.STARTING.value
        self.metrics: dict[str, Any] = {}
        # where no bootstrap agent writes the file (and times the steps)
        self.step_times = StepTimes()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def beat(self, step: int | None = None, loss: Any = None, state: str | None = None,
             **metrics: Any) -> None:
        """Record progress; ``loss`` may be a float or a 0-d tensor (read with ``.item()``)."""
        stepped = step is not None and int(step) != self.step
        if step is not None:
            self.step = int(step)
        if loss is not None:
            self.loss = float(loss.item() if hasattr(loss, "item") else loss)
        if state is not None:
            if state not in STATES:
                raise ValueError("heartbeat state: expected one of "
                                 f"{', '.join(STATES)}, got {state!r}")
            self.state = state
        if metrics:
            self.metrics = {k: _plain(v) for k, v in metrics.items()}
        if self.path is None:
            return
        agent = bootstrap_agent()
        if agent is not None:  # one writer per heartbeat file: the bootstrap's, fed from here
            agent.report(self.rank, self.step, self.loss, self.state, self.metrics)
            return
        now = time.time()
        if stepped and self.state == HeartbeatState.TRAINING:
            self.step_times.step_at(now)
        elif self.state == HeartbeatState.SAVING:
            self.step_times.saving()
        write_heartbeat(self.path, Heartbeat(
            rank=self.rank, attempt=self.attempt, step=self.step, loss=self.loss, time=now,
            state=self.state, pid=os.getpid(), metrics=self.metrics,
            step_s=self.step_times.summary(), device_peak=cuda_peak_bytes()))


_default: HeartbeatWriter | None = None


def default_writer() -> HeartbeatWriter:
    """This process's writer: the one ``runtime.setup()`` made, else one from the environment
    (``FSDP_ORCH_RUN_DIR``, ``FSDP_ORCH_ATTEMPT``, ``RANK``)."""
    global _default
    if _default is None:
        run_dir = os.environ.get("FSDP_ORCH_RUN_DIR")
        _default = HeartbeatWriter(Path(os.path.expanduser(run_dir)) if run_dir else None,
                                   int(os.environ.get("FSDP_ORCH_ATTEMPT", "0") or 0),
                                   int(os.environ.get("RANK", "0") or 0))
    return _default


def set_default_writer(writer: HeartbeatWriter | None) -> None:
    global _default
    _default = writer


def heartbeat(step: int, loss: Any = None, *, state: str = HeartbeatState.TRAINING.value,
              **metrics: Any) -> None:
    """Record that ``step`` steps are done (one small atomic file write)."""
    default_writer().beat(step=step, loss=loss, state=state, **metrics)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return value


__all__ = ["HeartbeatWriter", "default_writer", "heartbeat", "set_default_writer"]
