"""Which hung rank is the culprit. Pure: the caller passes the stacks and what else it knows.

When one rank stops, its peers stop too, a few microseconds later, inside the next collective: the
time the ranks last reported cannot tell them apart. Their stacks can. The culprit is the rank
whose main thread is *not* inside a collective (stuck in user code, a write, a sleep); among ranks
that all wait in collectives, the one whose collective count is behind (the NCCL flight recorder's
sequence numbers, or NCCL RAS, where the caller has them); timing comes last.

A rank is inside a collective when a frame between its innermost frame and its innermost frame of
user code is one of torch.distributed's collectives, or one of the wrappers that Accelerate,
Lightning and the HF Trainer put around them (:data:`COLLECTIVE_FRAMES`). A rank inside autograd's
backward with no such frame is most likely in DDP's gradient all-reduce (its reducer waits in C++,
with no Python frame): it ranks between the two. So does a rank waiting for the GPU in a CUDA
synchronisation (:data:`DEVICE_WAIT_FRAMES`): on NCCL a collective's Python call returns at once and
the rank blocks at the next synchronisation, so that is where a rank waiting for a missing peer
sits. Where the rank's flight recorder says it has an NCCL collective queued and not finished
(``pending``, ``observe.collective_counts.pending_collectives``), it waits in that collective,
whatever its stack shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fsdp_orch.observe.stack_parse import Frame, ThreadStack
from fsdp_orch.observe.user_frame import display_path, is_library_file, main_thread

FrameTable = tuple[tuple[re.Pattern[str], re.Pattern[str]], ...]


def _frame_table(*rows: tuple[str, str]) -> FrameTable:
    """(file pattern, function pattern) rows, compiled: a frame matches a row when its file's path
    contains the first and its function's name is the whole of the second."""
    return tuple((re.compile(path), re.compile(function)) for path, function in rows)


# A frame in one of these is waiting for its peers.
COLLECTIVE_FRAMES = _frame_table(
    # every function of c10d's Python API talks to the peers (the collectives, barrier,
    # send/recv, the *_object variants, init_process_group's rendezvous)
    (r"torch/distributed/distributed_c10d\.py$", r".*"),
    (r"torch/distributed/_functional_collectives\.py$", r".*"),
    (r"torch/distributed/elastic/utils/store\.py$", r".*barrier.*"),
    # FSDP's waits on the all-gathers and reduce-scatters it issued earlier
    (r"torch/distributed/fsdp/", r"(?:.*\.)?(?:wait\w*|_?unshard|foreach_all_gather\w*|"
                                 r"foreach_reduce\w*|_all_gather\w*|_reduce_scatter\w*)"),
    (r"torch/distributed/checkpoint/utils\.py$",
     r"(?:.*\.)?(?:gather_object|all_gather_object|broadcast_object|scatter_object|"
     r"reduce_scatter|all_reduce|barrier)"),
    # the wrappers, named in case their inner frames are not shown
    (r"accelerate/utils/operations\.py$",
     r"(?:gather\w*|broadcast\w*|reduce|pad_across_processes)"),
    (r"accelerate/state\.py$", r"(?:.*\.)?wait_for_everyone"),
    (r"lightning/(?:fabric|pytorch)/.*(?:strategies|utilities)/.*\.py$",
     r"(?:.*\.)?(?:barrier|broadcast|reduce|all_gather|_sync_ddp\w*)"),
    (r"transformers/trainer_pt_utils\.py$", r"(?:distributed_concat|distributed_broadcast_scalars|"
                                            r"nested_gather|.*\._nested_gather)"),
    # torch_xla: collectives are recorded lazily and run inside the step's compiled graph, so a
    # host waits for its peers where the graph runs (sync / mark_step) or in an eager rendezvous;
    # reading a tensor (loss.item()) also runs it, with no torch_xla frame: that wait looks like
    # the user's own line
    (r"torch_xla/torch_xla\.py$", r"sync|step"),
    (r"torch_xla/core/xla_model\.py$", r"mark_step|wait_device_ops|rendezvous|all_reduce\w*|"
                                       r"all_gather\w*|reduce_scatter\w*|all_to_all|"
                                       r"collective_permute|send|recv"),
    (r"torch_xla/distributed/xla_backend\.py$", r".*"),
)
# The Python frame that calls into autograd's C++ engine for a backward pass.
BACKWARD_FRAMES = _frame_table((r"torch/autograd/(?:graph|__init__)\.py$",
                                r"_engine_run_backward|run_backward"))
# A checkpoint being written: DCP, torch.save, safetensors, and the frameworks' save functions.
SAVE_FRAMES = _frame_table(
    (r"torch/distributed/checkpoint/", r".*"),
    (r"torch/serialization\.py$", r"(?:save|_save)"),
    (r"safetensors/torch\.py$", r"save\w*"),
    (r".*", r"(?:.*\.)?(?:save_pretrained|save_state|save_checkpoint|_save_checkpoint|save_model|"
            r"_save)"),
)
# The Python frames that wait for the GPU: torch.cuda.synchronize, a stream's or an event's
# synchronize or wait (``loss.item()`` and ``.cpu()`` wait in C++,
# with no Python frame of their own).
DEVICE_WAIT_FRAMES = _frame_table(
    (r"torch/cuda/__init__\.py$", r"synchronize"),
    (r"torch/cuda/streams\.py$", r"(?:.*\.)?(?:synchronize|wait_event|wait_stream|query)"),
)
NOT_IN_COLLECTIVE, IN_BACKWARD, IN_COLLECTIVE, NO_STACK = 0, 1, 2, 3


@dataclass(frozen=True)
class RankPlace:
    """Where a rank's main thread was, in the words the evidence uses."""

    rank: int
    # NOT_IN_COLLECTIVE, IN_BACKWARD, IN_COLLECTIVE or NO_STACK: the culprit has the lowest
    tier: int
    where: str  # its innermost frame of user code, "train.py:63 main" (else its innermost frame)
    collective: str | None = None  # the collective it waits in ("broadcast")
    in_save: bool = False  # inside a checkpoint save
    on_device: bool = False  # its main thread waits for the GPU (a CUDA synchronisation)


def _matches(frame: Frame, table: FrameTable) -> bool:
    path = frame.file.replace("\\", "/")
    return any(p.search(path) and f.fullmatch(frame.function) for p, f in table)


def _library_top(frames: Sequence[Frame], library_roots: tuple[str, ...]) -> list[Frame]:
    """The frames above the innermost frame of user code (innermost first)."""
    top = []
    for frame in frames:
        if (frame.line is not None and not frame.native
                and not is_library_file(frame.file, library_roots)):
            break
        top.append(frame)
    return top


def _collective_name(top: Sequence[Frame]) -> str | None:
    """The collective a thread waits in: the innermost matching frame whose name says which
    (c10d's logging wrapper and decorators are skipped)."""
    found = [f for f in top if _matches(f, COLLECTIVE_FRAMES)]
    for frame in found:
        name = frame.function.rsplit(".", 1)[-1]
        if name not in ("wrapper", "inner", "_fn", "decorate_context"):
            return name
    return found[0].function if found else None


def place_of(rank: int, threads: Sequence[ThreadStack], library_roots: Iterable[str],
             main_thread_id: int | None = None, saving: bool = False,
             pending: str | None = None) -> RankPlace:
    """Where ``rank``'s main thread is, from its stack dump; ``saving``: its heartbeat said so;
    ``pending``: the collective its flight recorder has queued and
    not finished ("nccl:all_reduce")."""
    roots = tuple(library_roots)
    main = main_thread(threads, main_thread_id)
    if main is None or not main.frames:
        return RankPlace(rank, NO_STACK, "no main-thread stack", in_save=saving)
    top = _library_top(main.frames, roots)
    user = main.frames[len(top)] if len(top) < len(main.frames) else None
    shown = user or next((f for f in main.frames if not f.native), main.frames[0])
    line = "" if shown.line is None else f":{shown.line}"
    where = f"{display_path(shown.file, roots)}{line} {shown.function}"
    in_save = saving or any(_matches(f, SAVE_FRAMES) for f in main.frames)
    collective = _collective_name(top)
    on_device = any(_matches(f, DEVICE_WAIT_FRAMES) for f in top)
    if collective is not None:
        return RankPlace(rank, IN_COLLECTIVE, where, collective, in_save, on_device)
    if pending is not None:
        name = pending.rsplit(":", 1)[-1]
        return RankPlace(rank, IN_COLLECTIVE, where, f"{name} (queued, per its flight recorder)",
                         in_save, on_device)
    if on_device or any(_matches(f, BACKWARD_FRAMES) for f in top):
        return RankPlace(rank, IN_BACKWARD, where, None, in_save, on_device)
    return RankPlace(rank, NOT_IN_COLLECTIVE, where, None, in_save)


def culprit_order(places: dict[int, RankPlace], timing_order: Sequence[int],
                  collective_counts: dict[int, int] | None = None) -> list[int]:
    """The ranks of ``timing_order`` (the watchdog's: the first to stop first), the culprit first:
    by where they are (outside collectives first), then by collective count (lowest first, where
    known), then by timing."""
    counts = collective_counts or {}

    def key(rank: int) -> tuple[int, float, int]:
        place = places.get(rank)
        tier = place.tier if place is not None else NO_STACK
        return (tier, float(counts.get(rank, float("inf"))), timing_order.index(rank))

    return sorted(timing_order, key=key)


def headline(order: Sequence[int], places: dict[int, RankPlace],
             collective_counts: dict[int, int] | None = None) -> str | None:
    """One line naming the culprit and what the others wait in, e.g. ``rank 1 stuck in train.py:63
    main (not in a collective); 1 rank waiting in broadcast: rank 0 at train.py:70 main``; None
    when no rank's stack is known."""
    known = [places[r] for r in order if r in places and places[r].tier != NO_STACK]
    if not known:
        return None
    counts = collective_counts or {}
    first, others = known[0], known[1:]
    save = "; in a checkpoint save" if first.in_save else ""
    if first.tier == NOT_IN_COLLECTIVE:
        text = f"rank {first.rank} stuck in {first.where} (not in a collective{save})"
    elif first.tier == IN_BACKWARD and first.on_device:
        text = (f"rank {first.rank} stuck in {first.where} (waiting for the GPU in a CUDA "
                "synchronisation: a collective queued behind it, "
                f"or a kernel that does not end{save})")
    elif first.tier == IN_BACKWARD:
        text = (f"rank {first.rank} stuck in {first.where} (inside backward with no collective "
                f"frame: DDP's gradient all-reduce, or a slow backward{save})")
    else:
        why = (f"collective count {counts[first.rank]}, the lowest" if first.rank in counts
               else "no rank outside a collective; the first to stop")
        text = (f"every stuck rank waits in a collective; rank {first.rank} leads ({why}): "
                f"in {first.collective} at {first.where}{save.replace(';', ',')}")
    groups: dict[str, list[RankPlace]] = {}
    for place in others:
        label = place.collective or ("a CUDA synchronisation" if place.on_device else
                                     "backward" if place.tier == IN_BACKWARD else "user code")
        groups.setdefault(label, []).append(place)
    for label, members in groups.items():
        verb = "waiting in" if label != "user code" else "also stuck outside a collective"
        count = f"{len(members)} rank{'s' if len(members) > 1 else ''}"
        named = ", ".join(f"rank {p.rank} at {p.where}" for p in members[:3])
        more = f" and {len(members) - 3} more" if len(members) > 3 else ""
        noun = f" {label}" if label != "user code" else ""
        text += f"; {count} {verb}{noun}: {named}{more}"
    return text


def frozen_headline(frozen: dict[int, str], order: Sequence[int],
                    places: dict[int, RankPlace]) -> str:
    """The culprit of a hang whose rank is frozen (``frozen``: rank -> its words, the watchdog's),
    then what its peers wait in: ``rank 1 (pid 4242) is stopped (state T: SIGSTOP or a debugger)
    for 5.8s while rank 0 waits in all_reduce at train.py:80 main``. A frozen rank is the culprit
    wherever its stack stands: it may have been stopped inside a collective itself."""
    lead = "; ".join(frozen.values())
    peers = [rank for rank in order if rank not in frozen]
    if not peers:
        return lead
    groups: dict[str, list[int]] = {}
    for rank in peers:
        place = places.get(rank)
        label = ""
        if place is not None and place.tier != NO_STACK:
            label = f" in {place.collective}" if place.collective else f" at {place.where}"
            if place.collective:
                label += f" at {place.where}"
        groups.setdefault(label, []).append(rank)
    waits = []
    for label, ranks in groups.items():
        shown = ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more"
                                                  if len(ranks) > 8 else "")
        verb = "wait" if len(ranks) > 1 else "waits"
        waits.append(f"rank{'s' if len(ranks) > 1 else ''} {shown} {verb}{label}")
    return f"{lead} while {'; '.join(waits)}"


__all__ = ["COLLECTIVE_FRAMES", "DEVICE_WAIT_FRAMES", "IN_BACKWARD", "IN_COLLECTIVE",
           "NOT_IN_COLLECTIVE", "NO_STACK", "RankPlace", "culprit_order", "frozen_headline",
           "headline", "place_of"]
