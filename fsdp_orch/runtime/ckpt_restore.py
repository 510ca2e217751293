"""The pieces of a restore: which checkpoints to try, which of them read back, what each rank takes
back of its own state, the warm start from another run's weights, and the superseding of what is
newer than the step restored. The collective order (rank 0 chooses, every rank loads) is
:meth:`fsdp_orch.runtime.checkpoint.Checkpointer.restore`'s."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fsdp_orch.checkpoints.aside import SUSPECT_DIR, move_aside
from fsdp_orch.checkpoints.folders import checkpoint_info, list_checkpoints
from fsdp_orch.checkpoints.info import CheckpointInfo
from fsdp_orch.runtime import ckpt_files as files
from fsdp_orch.runtime.ckpt_errors import CheckpointError, warn
from fsdp_orch.runtime.dist import DistInfo
from fsdp_orch.runtime.sharded_state import ShardedState


def restore_candidates(resume: str, directory: Path) -> list[CheckpointInfo]:
    """What restore would try, newest first, for ``FSDP_ORCH_RESUME``'s ``resume``.

    ``auto``: the complete checkpoints of ``directory``. A path (what the supervisor passes on a
    restart): that checkpoint, then the complete ones before it in its directory, in case it
    turns out unreadable. ``never``: none.
    """
    mode = resume.strip()
    if mode == "never":
        return []
    if mode == "auto":
        return [c for c in reversed(list_checkpoints(directory))
                if c.layout == "dcp" and c.complete]
    info = checkpoint_info(Path(mode).expanduser())
    if info is None or info.layout != "dcp" or not info.complete:
        raise CheckpointError(f"FSDP_ORCH_RESUME={mode}: not a complete step-N checkpoint "
                              "(needs .metadata and COMMITTED)")
    older = [c for c in reversed(list_checkpoints(info.path.parent))
             if c.layout == "dcp" and c.complete and c.step < info.step]
    return [info, *older]


def readable_paths(candidates: list[CheckpointInfo]) -> list[str]:
    """The candidates whose ``.metadata`` reads back; each other one skipped with a warning."""
    paths = []
    for cand in candidates:
        problem = files.check_metadata(cand.path)
        if problem:
            warn(f"skipping checkpoint {cand.path}: {problem}; trying an older one")
        else:
            paths.append(str(cand.path))
    return paths


def saved_step_and_world(path: Path) -> tuple[int, int | None]:
    """The step the checkpoint at ``path`` holds, and the world size it was saved by (None: not
    recorded)."""
    info = checkpoint_info(path)
    commit = files.parse_commit_file(path)
    step = commit["step"] if commit else (info.step if info else 0)
    world = int(commit["world_size"]) if commit and commit.get("world_size") else None
    return step, world


def restore_rank_state(path: Path, info: DistInfo, extras: dict[str, Any],
                       saved_world: int | None) -> None:
    """Rank R restores what rank R saved (RNG states, extras), whatever the world size now: on
    fewer ranks, the state of the ranks beyond the new world is not restored on any rank; on more,
    the new ranks have none (a warning each). DCP has resharded the model and optimizer."""
    world = info.world_size
    if saved_world is not None and saved_world != world and info.is_main:
        gone = ", ".join(str(r) for r in range(world, saved_world))
        dropped = f"; the RNG states and extras of rank(s) {gone} are not restored" if gone else ""
        print(f"[fsdp-orch] {path} was saved by {saved_world} ranks and is restored on {world}: "
              f"model and optimizer resharded by DCP, each rank's RNG states and extras taken from "
              f"the rank of its number{dropped}", file=sys.stderr, flush=True)
    saved = files.read_rank_state(path, info.rank)
    if saved is None:
        warn(f"{path} has no state for rank {info.rank} (saved with a different world "
             "size?): RNG states and extras not restored")
        return
    files.set_rng_state(saved["rng"], info.device)
    files.load_extras(extras, saved.get("extras", {}))


def initialise_from(path: Path, sharded_state: ShardedState, take_optimizer: bool, group: Any,
                    is_main: bool) -> None:
    """A warm start: another run's weights (and optimizer state, with ``take_optimizer``) at step
    0. The step, RNG states and extras are not taken: this is a new run that begins from those
    weights."""
    import torch.distributed.checkpoint as dcp

    info = checkpoint_info(path)
    if info is None or not info.complete or files.check_metadata(path):
        raise CheckpointError(f"FSDP_ORCH_INIT_FROM={path}: not a complete step-N checkpoint")
    model_only = getattr(sharded_state, "for_load_model", None)
    apply_model = getattr(sharded_state, "apply_model", None)
    if take_optimizer:
        wanted, apply = sharded_state.for_load(), sharded_state.apply
    elif model_only is None or apply_model is None:
        raise CheckpointError(f"FSDP_ORCH_INIT_FROM={path}: this sharding loads weights only with "
                              "the optimizer state (submit --init-optimizer)")
    else:
        wanted, apply = model_only(), apply_model
    dcp.load(wanted, checkpoint_id=str(path), storage_reader=files.trusted_reader(path),
             process_group=group, planner=sharded_state.load_planner())
    apply(wanted)
    if is_main:
        what = "weights and optimizer state" if take_optimizer else "weights"
        print(f"[fsdp-orch] initialised from {path} ({what}); starting at step 0", file=sys.stderr,
              flush=True)


def exception_summary(exc: BaseException) -> str:
    """``Type: message`` on one line: DCP's CheckpointException holds every failed rank's
    traceback, of which its first line and the innermost exception line are kept."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0] if len(lines) < 2 else f"{lines[0]} ... {lines[-1]}"
    return f"{type(exc).__name__}: {text[:300]}"


def set_aside_unloadable(paths: list[Path], load_errors: dict[str, str], attempt: int,
                         restored: Path) -> None:
    """Rank 0: each complete checkpoint tried before ``restored`` that would not load, moved into
    its folder's ``.fsdp-orch-suspect/`` and said in a warning the supervisor reads. Left in place
    (superseded), a later save of its step would replace it and keep_last would prune it: it is
    kept, for whoever wants to know what went wrong."""
    for path in paths:
        why = files.check_metadata(path) or load_errors.get(str(path)) or "it did not load"
        info = checkpoint_info(path)
        if info is None:
            continue
        try:
            [(src, dst)] = move_aside([info], path.parent, f"attempt-{attempt}", into=SUSPECT_DIR)
        except OSError as exc:
            warn(f"checkpoint {path} would not load ({why}) and could not be moved aside: {exc}")
            continue
        warn(f"checkpoint {src} would not load ({why}): moved to {dst} and kept; "
             f"restored {restored} instead")


def supersede_after(directory: Path, step: int) -> None:
    """Rank 0: the complete checkpoints of ``directory`` newer than ``step`` superseded (their
    ``COMMITTED`` renamed), said in a warning."""
    done = files.supersede(directory, step)
    if done:
        warn(f"starting from step {step}: superseded newer checkpoint(s) "
             f"{', '.join(p.name for p in done)} (COMMITTED renamed to {files.SUPERSEDED})")


__all__ = ["exception_summary", "initialise_from", "readable_paths", "restore_candidates",
           "restore_rank_state", "saved_step_and_world", "set_aside_unloadable", "supersede_after"]
