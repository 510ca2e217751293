"""Hang detection from heartbeats. Pure: the caller passes the heartbeats and the time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fsdp_orch.decide.frozen_rank import Frozen, every_rank_frozen, frozen_of, frozen_ranks
from fsdp_orch.decide.hang_window import hang_window
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.process_state import describe_state
from fsdp_orch.vocab.states import HeartbeatState


@dataclass(frozen=True)
class HangVerdict:
    stalled_for_s: float  # since the attempt's last progress of any rank
    ranks: list[int]  # ranks past their window
    evidence: str
    suspects: list[int] = field(default_factory=list)  # the same ranks, the first to stop first
    saving: list[int] = field(default_factory=list)  # of those, the ranks inside a checkpoint save
    # of those, the ranks whose process is frozen (``frozen_rank``), in words: "rank 1 (pid N) is
    # stopped (state T: SIGSTOP or a debugger) for 5.8s"
    frozen: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Veto:
    """A rank's state that stops the hang rule: the rank is busy (its peers wait for it) or gives no
    signal. ``holds(beat, now, allowed, watch)``; ``allowed``: the rank's window."""

    name: str
    holds: Callable[[Heartbeat, float, float, Watch], bool]
    why: str


VETOES = (
    Veto("collecting", lambda b, now, allowed, w: b.collecting_since is not None
         and now - b.collecting_since <= w.startup_timeout,
         "inside a full garbage collection, for up to startup_timeout: the interpreter's own work"),
    Veto("held", lambda b, now, allowed, w: b.held_since is not None
         and now - b.held_since <= max(allowed, w.heartbeat_timeout),
         "its heartbeat is not rewritten, for up to heartbeat_timeout: its watcher thread cannot "
         "run, so one native call holds the interpreter, busy or stuck: no signal"),
    Veto("writing", lambda b, now, allowed, w: b.io_at is not None and now - b.io_at <= allowed,
         "its process wrote within the window: a save making progress, however slow"),
    Veto("computing",
         lambda b, now, allowed, w: b.compute_at is not None and now - b.compute_at <= allowed,
         "its process (an XLA graph compiling) or its children (data loader workers refilling) "
         "used CPU within the window"),
    Veto("in_python",
         lambda b, now, allowed, w: b.python_at is not None and now - b.python_at <= allowed,
         "its main thread ran Python within the window: just stepped, or busy past it "
         "(a long evaluation); a late peer is waiting for it "
         "(back from an evaluation, its heartbeat lags the peer's by a tick)"),
)


def veto_of(beat: Heartbeat, now: float, allowed: float, watch: Watch) -> Veto | None:
    return next((v for v in VETOES if v.holds(beat, now, allowed, watch)), None)


@dataclass(frozen=True)
class Hold:
    """Why a rank past its window is not judged (yet), for ``status``: ``subject`` (what is seen,
    ``since`` when), the ``rule`` that holds the verdict back, in words (``rule_text``, ``why``),
    and ``until``: the earliest a verdict can come if nothing changes (None: no bound)."""

    rule: str  # a veto's name, "frozen" (not yet past its threshold), "paused", "node_silent"
    rank: int | None
    subject: str
    since: float | None
    rule_text: str
    until: float | None
    why: str

    def to_json(self) -> dict[str, object]:
        return {"rule": self.rule, "rank": self.rank, "subject": self.subject,
                "since": self.since, "rule_text": self.rule_text, "until": self.until,
                "why": self.why}


def check_hang(beats: dict[int, Heartbeat], *, world_size: int, attempt_started: float, now: float,
               watch: Watch, window: float | None = None) -> HangVerdict | None:
    """The verdict of :func:`judge`, or None."""
    found = judge(beats, world_size=world_size, attempt_started=attempt_started, now=now,
                  watch=watch, window=window)
    return found if isinstance(found, HangVerdict) else None


def judge(beats: dict[int, Heartbeat], *, world_size: int, attempt_started: float, now: float,
          watch: Watch, window: float | None = None) -> HangVerdict | Hold | None:
    """A hang: some rank has made no progress within its window and sits in one native call (or,
    with no liveness probe in its heartbeat, simply made no progress), while no rank is vetoed
    (``VETOES``: busy, so its peers wait for it, or with no signal); a rank whose process is frozen
    past its threshold (``frozen_rank``) has no veto. Windows: ``startup_timeout``
    from the attempt's start until a rank's first step, else the progress window, inside a
    checkpoint save too (``startup_timeout`` for a saving rank with no probe, whose writes are not
    measured either). A rank with no heartbeat yet while no rank has finished a step gives no signal
    either (it may still be importing, while the others wait for it in the rendezvous). A rank that
    is done is never late. With no heartbeat from any rank there is no signal, and no verdict (see
    :func:`no_signal`). ``window``: the progress window, else the one ``hang_window`` gives for
    ``beats``. A :class:`Hold` where some rank is late but a veto holds the verdict back; None while
    no rank is late."""
    if not beats:
        return None
    started = [b for b in beats.values() if b.state != HeartbeatState.STARTING]
    window = hang_window(watch, beats).seconds if window is None else window
    if _none_can_be_late(beats, world_size, attempt_started, now,
                         min(window, watch.startup_timeout)):
        return None  # the common case, decided without the walk below: thousands of ranks each poll
    frozen = frozen_ranks(beats, world_size, now, window, watch)
    late: list[tuple[int, float, str]] = []
    hold: Hold | None = None
    for rank in range(world_size):
        beat = beats.get(rank)
        if beat is not None and beat.state == HeartbeatState.DONE:
            continue
        if beat is None and not started:
            return None  # no signal from this rank yet (still importing?): nothing to judge by
        since, allowed = _rank_window(beat, attempt_started, window, watch)
        if beat is not None and hold is None and rank not in frozen:
            veto = veto_of(beat, now, allowed, watch)
            if veto is not None:
                hold = _hold(veto, beat, now, allowed, window, beats, world_size, watch)
        if now - since > allowed:
            late.append((rank, now - since, _lateness(rank, beat, now, frozen.get(rank))))
    if not late:
        return None
    if hold is not None:
        return hold
    return _verdict(late, beats, started, attempt_started, now, window, watch, frozen)


def _hold(veto: Veto, beat: Heartbeat, now: float, allowed: float, window: float,
          beats: dict[int, Heartbeat], world_size: int, watch: Watch) -> Hold:
    """``veto`` on ``beat``'s rank, in the words ``status`` shows."""
    rank = beat.rank
    if veto.name == "held":
        until = (beat.held_since or now) + max(allowed, watch.heartbeat_timeout)
        ceiling = f"held to the {watch.heartbeat_timeout:g}s ceiling (watch.heartbeat_timeout)"
        frozen = frozen_of(beat, window, watch)
        if frozen is not None and every_rank_frozen(beats, world_size, window, watch):
            return Hold("paused", rank, f"every rank frozen (rank {rank} "
                        f"{describe_state(frozen.state)})", beat.held_since, ceiling, until,
                        "a pause of the whole job, not one frozen rank its peers wait for")
        if frozen is not None:
            return Hold("frozen", rank, f"rank {rank} (pid {frozen.pid}) "
                        f"{describe_state(frozen.state)}", frozen.since,
                        f"judged once frozen for {frozen.threshold:g}s while its peers wait",
                        frozen.since + frozen.threshold, "a frozen process makes no progress")
        return Hold("held", rank, f"no heartbeat from rank {rank}", beat.held_since, ceiling,
                    until, "no signal is not hung: its interpreter is held, busy or stuck")
    if veto.name == "collecting":
        return Hold("collecting", rank, f"rank {rank} in a garbage collection",
                    beat.collecting_since, f"not judged for up to startup_timeout "
                    f"({watch.startup_timeout:g}s)",
                    (beat.collecting_since or now) + watch.startup_timeout,
                    "the interpreter's own work")
    if veto.name == "writing":
        # bytes written are progress whatever the file; only a rank that says it saves is in a save
        if beat.state == HeartbeatState.SAVING:
            what, why = "in a save that writes", "a save making progress, however slow"
        else:
            what, why = "wrote", "its process wrote within the window: I/O progress, not a hang"
        return Hold("writing", rank, f"rank {rank} {what}", None, "not judged while it writes",
                    (beat.io_at or now) + allowed, why)
    if veto.name == "computing":
        return Hold("computing", rank, f"rank {rank}'s process or its data loader workers use CPU",
                    None, "not judged while they do", (beat.compute_at or now) + allowed,
                    "a graph compiling, or workers refilling")
    return Hold(veto.name, rank, f"rank {rank} runs Python", None, "not judged while it runs",
                (beat.python_at or now) + allowed,
                "busy past the window (an evaluation?): its peers wait for it")


def silent_hold(silent: dict[int, float], now: float, watch: Watch) -> Hold:
    """The nodes whose channel is silent (node -> seconds) hold every verdict back until heard
    again or found lost."""
    node, quiet = max(silent.items(), key=lambda item: item[1])
    more = f" (and {len(silent) - 1} more)" if len(silent) > 1 else ""
    return Hold("node_silent", None, f"no word from node {node}{more}", now - quiet,
                "not judged until it is heard again or found lost",
                now - quiet + watch.node_timeout,
                "no word from a node is not a hang: its ranks' heartbeats come through it")


def _rank_window(beat: Heartbeat | None, attempt_started: float, window: float,
                 watch: Watch) -> tuple[float, float]:
    """Since when a rank is judged, and for how long it may go without progress."""
    if beat is None:  # silent while others have stepped: it never got going
        return attempt_started, window
    if beat.state == HeartbeatState.STARTING:
        return attempt_started, watch.startup_timeout
    if beat.state == HeartbeatState.SAVING and beat.python_at is None:
        # Not probed: no agent in the process, so its writes are not measured either.
        return beat.progress_time, watch.startup_timeout
    return beat.progress_time, window


def _lateness(rank: int, beat: Heartbeat | None, now: float, frozen: Frozen | None = None) -> str:
    """What a late rank's heartbeat says of it, in words for the evidence."""
    what = _last_report(rank, beat)
    if beat is None:
        return what
    if frozen is not None:
        return (f"{what}, its process (pid {frozen.pid}) {describe_state(frozen.state)} for "
                f"{now - frozen.since:.1f}s")
    if beat.python_at is not None:
        what += f", main thread in one native call for {now - beat.python_at:.1f}s"
    if beat.held_since is not None:
        what += (f", its heartbeat not rewritten for {now - beat.held_since:.1f}s "
                 "(the interpreter held)")
    if beat.state == HeartbeatState.SAVING:
        written = ("nothing written" if beat.io_at is None
                   else f"nothing written for {now - beat.io_at:.1f}s")
        what += f", inside a checkpoint save ({written})"
    return what


def _verdict(late: list[tuple[int, float, str]], beats: dict[int, Heartbeat],
             started: list[Heartbeat], attempt_started: float, now: float, window: float,
             watch: Watch, frozen: dict[int, Frozen]) -> HangVerdict:
    ranks = [r for r, _, _ in late]
    # a frozen rank first: its peers wait for it
    suspects = sorted(ranks, key=lambda r: (r not in frozen, _stop_order(beats.get(r))))
    saving = [r for r in ranks
              if (b := beats.get(r)) is not None and b.state == HeartbeatState.SAVING]
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
                       + in_save, suspects, saving,
                       {rank: f.words(now) for rank, f in frozen.items() if rank in ranks})


def _none_can_be_late(beats: dict[int, Heartbeat], world_size: int, attempt_started: float,
                      now: float, shortest: float) -> bool:
    """Every rank has a heartbeat and each moved within the shortest window any rank can have: no
    rank is late, so there is no verdict (the walk in ``check_hang`` would find none either)."""
    if len(beats) != world_size or min(beats) != 0 or max(beats) != world_size - 1:
        return False
    oldest = min(attempt_started if b.state == HeartbeatState.STARTING else b.progress_time
                 for b in beats.values())
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
    if beat is not None and beat.state != HeartbeatState.STARTING:
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
    if not done or any(b is None or b.state != HeartbeatState.DONE for b in done):
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
    return (f"no rank reported a heartbeat within startup_timeout ({watch.startup_timeout:g}s): "
            "the program did not start a torch process group or optimizer in a Python process that "
            "fsdp-orch's bootstrap runs in (e.g. not a Python program), so hung ranks cannot be "
            "told from slow ones; only logs and exit statuses are watched")
