"""This rank's flight recorder (torch's record of each process group's last collectives), dumped
when the supervisor asks for it: NCCL dumps it itself on a collective timeout, but a rank stuck in
Python never times out. Standard library only; torch's module is looked up in ``sys.modules``."""

from __future__ import annotations

import os
import sys

# NCCL's recorder first: on a GPU the collectives that hang are NCCL's, and ``_dump_fr_trace`` (the
# recorder gloo writes to) holds none of them (an H200 with torch 2.11 gave an empty dump there).
FLIGHT_RECORDER_DUMPERS = ("_dump_nccl_trace", "_dump_fr_trace")


def flight_recorder_dump(c10d: object) -> bytes | None:
    """This process's flight recorder (a pickle): the first of :data:`FLIGHT_RECORDER_DUMPERS` that
    this torch has and whose dump holds entries, else the last one it has (its group statuses)."""
    dump = None
    for name in FLIGHT_RECORDER_DUMPERS:
        dumper = getattr(c10d, name, None)
        if dumper is None:
            continue
        dump = dumper()
        if _has_entries(dump):
            return dump
    return dump


def arrivals_now(at: int) -> dict | None:  # type: ignore[type-arg]
    """This rank's arrival at its collectives of round ``at`` (``observe.arrivals``), from its
    flight recorder without stack traces (0.2 ms for a few dozen entries, a few ms for 2,000); None
    before the process group exists or where this torch keeps no recorder. The pickle is this
    process's own torch's, made just now."""
    import pickle

    from fsdp_orch.observe.arrivals import arrivals_sample

    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return None
    for name in FLIGHT_RECORDER_DUMPERS:
        dumper = getattr(c10d, name, None)
        if dumper is None:
            continue
        try:
            dump = pickle.loads(dumper(True, False, False))  # collectives, no stacks, all
        except Exception:
            continue
        entries = dump.get("entries") if isinstance(dump, dict) else None
        sample = arrivals_sample(entries, at) if isinstance(entries, list) else None
        if sample is not None:
            return sample
    return None


def _has_entries(dump: bytes) -> bool:
    from fsdp_orch.observe.collective_counts import parse_flight_recorder

    record = parse_flight_recorder(dump)
    return record is not None and record.entries > 0


def trace_request(attempt_dir: str | None) -> tuple[str, str] | None:
    """Where to look for the supervisor's request of a flight-recorder dump, and the prefix of the
    dump's path, when this torch can dump one (:func:`flight_recorder_dump`); the dump goes where
    NCCL's would (the launch's prefix, else the attempt's folder)."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if attempt_dir is None or not any(hasattr(c10d, name) for name in FLIGHT_RECORDER_DUMPERS):
        return None
    from fsdp_orch.observe.attempt_files import FLIGHT_RECORDER_REQUEST
    from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIX

    folder = os.path.expanduser(attempt_dir)
    prefix = (os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
              or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
              or os.path.join(folder, FLIGHT_RECORDER_PREFIX))
    return os.path.join(folder, FLIGHT_RECORDER_REQUEST), prefix


def write_dump(target: str) -> None:
    """This rank's flight recorder, written whole to ``target`` (one that is there already is left
    alone); never raises."""
    try:
        data = flight_recorder_dump(sys.modules["torch._C._distributed_c10d"])
        if data is None:
            return
        fd = os.open(f"{target}.{os.getpid()}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if not os.path.exists(target):
            os.replace(f"{target}.{os.getpid()}.tmp", target)
        else:
            os.unlink(f"{target}.{os.getpid()}.tmp")
    except Exception:  # a dump is evidence, never a reason to disturb training
        pass
