"""Hang detection from heartbeats. Pure: the caller passes the heartbeats and the time."""

from __future__ import annotations

from dataclasses import dataclass, field

from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.supervise.hang_window import hang_window


@dataclass(frozen=True)
class HangVerdict:
    stalled_for_s: float  # since the attempt's last progress of any rank
    ranks: list[int]  # ranks past their window
    evidence: str
    suspects: list[int] = field(default_factory=list)  # the same ranks, the first to stop first
    saving: list[int] = field(default_factory=list)  # of those, the ranks inside a checkpoint save


def check_hang(beats: dict[int, Heartbeat], *, world_size: int, attempt_started: float, now: float,
               watch: Watch, window: float | None = None) -> HangVerdict | None:
    """A hang: some rank has made no progress within its window and sits in one native call (or,
    with no liveness probe in its heartbeat, simply made no progress), while no rank is busy in
    Python or writing. Windows: ``startup_timeout`` from the attempt's start until a rank's first
    step, else the progress window, inside a checkpoint save too (``startup_timeout`` for a saving
    rank with no probe, whose writes are not measured either). Vetoes (its peers wait for it):
    a rank busy in Python past its window (a long evaluation); a probed rank within its window that
    ran Python within it (it just stepped); a rank inside a full garbage collection, for up to
    ``startup_timeout`` (``collecting_since``: the interpreter's own work); a rank whose heartbeat
    is not rewritten, for up to ``heartbeat_timeout`` (``held_since``: its watcher thread cannot run,
    so the interpreter is held by one native call: no signal whether it is busy); a rank whose process
    wrote within the window (a save making progress, however slow: bytes written, ``io_at``); an XLA
    rank whose process used CPU within the window (compiling a graph, ``compute_at``), or any rank
    whose child processes did (data loader workers refilling, ``compute_at``); a rank with no heartbeat yet while no
    rank has finished a step (it may still be importing, while the others wait for it in the
    rendezvous). A rank that is done is never late. With no heartbeat from any rank there is no
    signal, and no verdict (see :func:`no_signal`). ``window``: the progress window, else the one
    ``hang_window`` gives for ``beats``."""
    if not beats:
        return None
    started = [b for b in beats.values() if b.state != "starting"]
    window = hang_window(watch, beats).seconds if window is None else window
    if _none_can_be_late(beats, world_size, attempt_started, now, min(window, watch.startup_timeout)):
        return None  # the common case, decided without the walk below: thousands of ranks each poll
    late: list[tuple[int, float, str]] = []
    for rank in range(world_size):
        beat = beats.get(rank)
        if beat is not None and beat.state == "done":
            continue
        if beat is None and not started:
            return None  # no signal from this rank yet (still importing?): nothing to judge by
        if beat is None:  # silent while others have stepped: it never got going
            since, allowed = attempt_started, window
        elif beat.state == "starting":
            since, allowed = attempt_started, watch.startup_timeout
        elif beat.state == "saving" and beat.python_at is None:
            # Not probed: no agent in the process, so its writes are not measured either.
            since, allowed = beat.progress_time, watch.startup_timeout
        else:
            since, allowed = beat.progress_time, window
        if beat is not None and beat.collecting_since is not None and now - beat.collecting_since <= watch.startup_timeout:
            return None  # a garbage collection holds the interpreter: busy, and its peers wait for it
        if beat is not None and beat.held_since is not None and now - beat.held_since <= max(allowed, watch.heartbeat_timeout):
            return None  # its heartbeat is not rewritten: the interpreter is held, busy or stuck, no signal
        if beat is not None and beat.io_at is not None and now - beat.io_at <= allowed:
            return None  # writing (a save that makes progress): its peers wait for it
        if beat is not None and beat.compute_at is not None and now - beat.compute_at <= allowed:
            return None  # an XLA process compiling a graph, or data loader workers loading: computing
        if now - since <= allowed:
            if beat is not None and beat.python_at is not None and now - beat.python_at <= allowed:
                # Running: a late peer is waiting for it. Just back from a long evaluation, this rank
                # has stepped while the peer's heartbeat still shows the wait (it lags by a tick).
                return None
            continue
        if beat is not None and beat.python_at is not None:
            native_for = now - beat.python_at
            if native_for <= allowed:
                return None  # busy in Python: not hung, and its peers wait for it
            what = _last_report(rank, beat) + f", main thread in one native call for {native_for:.1f}s"
        else:
            what = _last_report(rank, beat)
        if beat is not None and beat.held_since is not None:
            what += f", its heartbeat not rewritten for {now - beat.held_since:.1f}s (the interpreter held)"
        if beat is not None and beat.state == "saving":
            written = "nothing written" if beat.io_at is None else f"nothing written for {now - beat.io_at:.1f}s"
            what += f", inside a checkpoint save ({written})"
        late.append((rank, now - since, what))
    if not late:
        return None
    ranks = [r for r, _, _ in late]
    suspects = sorted(ranks, key=lambda r: _stop_order(beats.get(r)))
    saving = [r for r in ranks if (b := beats.get(r)) is not None and b.state == "saving"]
    if not started:
        stalled = now - attempt_started
        return HangVerdict(stalled, ranks, f"no rank finished a step within startup_timeout "
                                           f"({watch.startup_timeout:g}s) of the attempt's start; "
                           + "; ".join(w for _, _, w in late), suspects, saving)
    first = next(item for item in late if item[0] == suspects[0])
    stalled = now - max(b.progress_time for b in started)
    in_save = "".join(f"; {what}" for rank, _, what in late if rank in saving and rank != first[0])
    return HangVerdict(stalled, ranks,
                       f"no progress for {stalled:.1f}s (window {window:g}s): {first[2]}, "
                       f"{first[1]:.1f}s ago; ranks past the window: {rank_list(ranks)}"
                       + in_save, suspects, saving)


def _none_can_be_late(beats: dict[int, Heartbeat], world_size: int, attempt_started: float, now: float,
                      shortest: float) -> bool:
    """Every rank has a heartbeat and each moved within the shortest window any rank can have: no
    rank is late, so there is no verdict (the walk in ``check_hang`` would find none either)."""
    if len(beats) != world_size or min(beats) != 0 or max(beats) != world_size - 1:
        return False
    oldest = min(attempt_started if b.state == "starting" else b.progress_time for b in beats.values())
    return now - oldest <= shortest


def rank_list(ranks: list[int], spell_out: int = 16) -> str:
    """``0, 1, 5`` up to ``spell_out`` ranks; more as runs (``0-4094, 4096-8191 (8191 ranks)``): at
    8,192 ranks the evidence stays a line."""
    if len(ranks) <= spell_out:
        return ", ".join(map(str, ranks))
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:spell_out])
    more = f", ... ({len(runs) - spell_out} more runs)" if len(runs) > spell_out else ""
    return f"{text}{more} ({len(ranks)} ranks)"


def _last_report(rank: int, beat: Heartbeat | None) -> str:
    if beat is not None and beat.state != "starting":
        return f"rank {rank} last reported step {beat.step}"
    return f"rank {rank} never finished a step"


def _stop_order(beat: Heartbeat | None) -> tuple[float, float]:
    """Which rank stopped first: the lowest step, then the earliest last sign of Python."""
    if beat is None:
        return (-1.0, 0.0)
    last_python = beat.python_at if beat.python_at is not None else beat.progress_time
    return (float(beat.step), last_python)


def scripts_finished_at(beats: dict[int, Heartbeat], world_size: int) -> float | None:
    """When the last rank's script returned, once every rank has said so (state ``done``: the
    bootstrap writes it as the main module returns without an exception, the runtime in
    ``job.finish()``); None while any rank has not. What comes after is process teardown."""
    done = [beats.get(rank) for rank in range(world_size)]
    if not done or any(b is None or b.state != "done" for b in done):
        return None
    return max(b.progress_time for b in done if b is not None)


def no_signal(beats: dict[int, Heartbeat], *, attempt_started: float, now: float,
              watch: Watch) -> str | None:
    """Why hang detection is off for this attempt, once ``startup_timeout`` has passed with no
    heartbeat from any rank: the program never ran Python with a process group or an optimizer
    step that the bootstrap could see (a non-Python program, or Python started without the launch
    script's environment). Only logs and exit statuses are watched then; never a verdict."""
    if beats or now - attempt_started <= watch.startup_timeout:
        return None
    return (f"no rank reported a heartbeat within startup_timeout ({watch.startup_timeout:g}s): the "
            "program did not start a torch process group or optimizer in a Python process that "
            "fsdp-orch's bootstrap runs in (e.g. not a Python program), so hung ranks cannot be told "
            "from slow ones; only logs and exit statuses are watched")
