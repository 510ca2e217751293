"""The bootstrap agent's heartbeat thread, one per active rank: every ``TICK_S`` it asks the
main-thread probe, samples the write and compute meters and the collectives' arrivals, serves the
supervisor's flight-recorder request and rewrites the rank's heartbeat. Steps reach readers at once
through the step mark the main thread writes (``observe.step_marks``); where a rank has none (its
file could not be made), the thread wakes every ``WATCH_CHUNK_S`` between ticks to write a step the
main thread left unwritten."""

from __future__ import annotations

import _thread
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fsdp_orch.bootstrap.agent import Agent

TICK_S = 0.5  # the watcher's period: heartbeat file refresh and probe
# Without a step mark only (observe.step_marks: every step marked as taken, the heartbeat file
# rewritten at ticks): after a step, write at once unless the last write is younger than this (a
# rank that stops in a native call holding the interpreter right after its last step cannot have
# it written later: issue 43), and between ticks the watcher writes a step left unwritten.
STEP_WRITE_MIN_S = 0.05
WATCH_CHUNK_S = 0.1  # the watcher's sleep between ticks without a step mark


class HeartbeatThread:
    """The thread's state: its ident (a garbage collection it sets off writes without waiting for
    the lock it holds), the pending flight-recorder request and the latest arrivals sample."""

    def __init__(self, agent: Agent, trace_request: tuple[str, str] | None):
        self.agent = agent
        self.ident: int | None = None  # the thread's, once it runs
        # where the supervisor asks for a flight-recorder dump
        request, prefix = trace_request if trace_request is not None else (None, "")
        self.trace_request: str | None = request
        self.trace_prefix = prefix
        self.arrivals: dict[str, Any] | None = None  # the latest sample (observe.arrivals)
        self.arrivals_at = 0  # its round (observe.arrivals)

    def start(self) -> None:
        import threading  # milliseconds: only in a process that became a rank

        threading.Thread(target=self.run, name="fsdp-orch-heartbeat", daemon=True).start()

    def run(self) -> None:
        from fsdp_orch.observe.heartbeats import HELD_AFTER_S

        agent = self.agent
        # before its first write: a collection it sets off knows it
        self.ident = _thread.get_ident()
        woke = time.monotonic()
        # one wake a tick: each takes the interpreter from the main thread
        nap = TICK_S if agent._step_mark is not None else WATCH_CHUNK_S
        while agent.active:
            time.sleep(nap)
            if not agent.active:
                return
            if nap < TICK_S and time.monotonic() - woke < TICK_S:
                self._write_step_left_unwritten()
                continue
            last, woke = woke, time.monotonic()
            if woke - last > HELD_AFTER_S:
                # The interpreter was held until now (this thread could not take it back): whoever
                # held it was not waiting in a collective, which lets it go. Its old python_at would
                # otherwise reach the supervisor in this very write, just as the relay stops saying
                # held_since, and the rank would look hung for a moment.
                agent._probe.mark()
            agent._probe.ask()
            agent._io.sample()
            agent._compute.sample()
            # Every tick, not only once the main thread waits (0.1 ms of /proc here): then the first
            # tick of a wait on data loader workers already says they
            # load, well inside a 2 s window.
            agent._children.sample()
            if self.trace_request is not None:
                self._serve_trace_request()
            self._sample_arrivals()
            with agent._lock:
                agent._write_locked(agent.clock())

    def _serve_trace_request(self) -> None:
        """Once per attempt, from the watcher thread (the main thread may be stuck in a collective):
        this rank's flight recorder, dumped where NCCL's own dump on a timeout would go (one that
        is there already is left alone)."""
        if self.trace_request is None or not os.path.exists(self.trace_request):
            return
        self.trace_request = None
        from fsdp_orch.bootstrap.flight_recorder import write_dump

        write_dump(f"{self.trace_prefix}{self.agent.rank}")

    def _sample_arrivals(self) -> None:
        """At the first tick of each round of the wall clock (``observe.arrivals``), while
        training: every rank's sample holds the same collectives."""
        from fsdp_orch.observe.arrivals import ARRIVALS_EVERY_S

        at = int(self.agent.clock() // ARRIVALS_EVERY_S * ARRIVALS_EVERY_S)
        if at == self.arrivals_at or self.agent.state != "training":
            return
        from fsdp_orch.bootstrap.flight_recorder import arrivals_now

        self.arrivals_at, self.arrivals = at, arrivals_now(at)

    def _write_step_left_unwritten(self) -> None:
        """Between ticks, without a step mark: a step the main thread did not write (its last write
        too young) is written once that write is STEP_WRITE_MIN_S old. The job's last step is then
        in the heartbeat even if the rank stops in a native call holding the interpreter right
        after it (a process group's destructor), where the next tick could not run."""
        agent = self.agent
        if not agent._step_unwritten or agent.clock() - agent._last_write < STEP_WRITE_MIN_S:
            return
        with agent._lock:
            agent._write_locked(agent.clock())
