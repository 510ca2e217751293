"""Training over, process not: a rank that has taken the job's last step and is stuck after it.

On torch 2.13 with gloo, a rank sometimes never exits as its script's ``main()`` returns: a
process group's destructor joins a thread with the interpreter held (``std::thread::join`` <
``~ProcessGroupGloo`` < ``~Reducer`` < ``<module>``); NCCL's teardown hangs too (pytorch#75097,
#117291). Its heartbeat still says ``training``, while a peer's says ``done``. The hang rule alone
would restart a job whose training is complete, and the script would train past its end.

Pure: heartbeats, stacks and the time come in; what is decided comes out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fsdp_orch.decide.watchdog import veto_of
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.stack_parse import ThreadStack
from fsdp_orch.observe.user_frame import display_path, main_thread, native_top, python_frames
from fsdp_orch.vocab.states import HeartbeatState

# How long a rank at the last step may stay, once a peer's script has returned, before its stack
# is read. The stack decides; a verdict of the hang rule reads it at once.
TEARDOWN_WINDOW_S = 15.0

# Python frames that only tear down: above the script's top level, a rank in one of these is past
# its training (interpreter shutdown, atexit, process-group destroy).
TEARDOWN_FUNCTIONS = frozenset({
    "destroy_process_group", "_shutdown", "_python_exit", "_exitfunc", "_run_exitfuncs",
    "_run_finalizers", "__del__"})
# A native frame of a collective in flight: a rank waiting for peers is not tearing down.
_COLLECTIVE = re.compile(r"::(all_?reduce|barrier|broadcast|all_?gather|reduce_?scatter"
                         r"|all_?to_?all|send|recv|gather|scatter)\w*\b", re.IGNORECASE)
# Vetoes that say a rank is busy: it wrote, computed or ran Python within the window. "held" (the
# interpreter held, no signal either way) is what the stack is read for.
_BUSY = frozenset({"collecting", "writing", "computing", "in_python"})


@dataclass(frozen=True)
class PastTheEnd:
    """Some rank's script returned at ``step``; ``stuck`` ranks reached that step and have not
    returned; ``since``: the last progress of any rank."""

    step: int
    returned: list[int]
    stuck: list[int]
    since: float


def past_the_end(beats: dict[int, Heartbeat], world: int, now: float,
                 watch: Watch) -> PastTheEnd | None:
    """The ranks stuck after the job's last step: at least one rank's script returned (state
    ``done``), every other rank has a heartbeat at that same step, none inside a save or busy."""
    returned = sorted(r for r, b in beats.items() if b.state == HeartbeatState.DONE)
    if not returned or len(beats) < world:
        return None
    step = max(beats[r].step for r in returned)
    stuck = [r for r in range(world) if r not in returned]
    if not stuck:
        return None  # every script returned: the rule for a finished attempt applies
    for rank in stuck:
        beat = beats.get(rank)
        if beat is None or beat.state != HeartbeatState.TRAINING or beat.step != step:
            return None
        veto = veto_of(beat, now, TEARDOWN_WINDOW_S, watch)
        if veto is not None and veto.name in _BUSY:
            return None
    return PastTheEnd(step, returned, stuck, max(b.progress_time for b in beats.values()))


def returned_step(beats: dict[int, Heartbeat]) -> int | None:
    """The step every rank had reached when one of them returned from its script (the job's last
    step, by its own count), or None when no rank returned or some rank is behind it."""
    done = [b.step for b in beats.values() if b.state == HeartbeatState.DONE]
    if not done:
        return None
    step = max(done)
    return step if all(b.step >= step for b in beats.values()) else None


def teardown_place(threads: Sequence[ThreadStack], library_roots: Iterable[str]) -> str | None:
    """Where a rank's main thread is stuck when it is past its training: at the script's top level
    (a destructor run as ``main()`` returned), or in a teardown function (``TEARDOWN_FUNCTIONS``),
    and in no collective. None when the stack says otherwise or says nothing."""
    main = main_thread(threads)
    if main is None:
        return None
    python = python_frames(main)
    if not python or any(_COLLECTIVE.search(f.function) for f in main.frames if f.native):
        return None
    inner = []
    for frame in python:
        if frame.function == "<module>":
            break
        inner.append(frame)
    if any(f.function not in TEARDOWN_FUNCTIONS for f in inner):
        return None
    frame = python[0]
    where = f"{frame.function} at {display_path(frame.file, library_roots)}:{frame.line}"
    native = native_top(main)
    return f"{where} (native: {' < '.join(native)})" if native else where


def trainer_final_step(trainer_state: str | None) -> int | None:
    """A Hugging Face Trainer checkpoint's ``trainer_state.json`` says it is the run's last:
    ``global_step`` has reached ``max_steps``. None otherwise, or when the text is not that."""
    try:
        state = json.loads(trainer_state or "")
    except ValueError:
        return None
    if not isinstance(state, dict):
        return None
    step, last = state.get("global_step"), state.get("max_steps")
    if type(step) is int and type(last) is int and 0 < last <= step:
        return step
    return None


__all__ = ["TEARDOWN_WINDOW_S", "PastTheEnd", "past_the_end", "returned_step", "teardown_place",
           "trainer_final_step"]
