"""How a checkpoint problem is told: :class:`CheckpointError` when it stops the job (raised on
every rank), a warning line on stderr when a save or restore works around it."""

from __future__ import annotations

import errno
import sys

from fsdp_orch.vocab.errors import FsdpOrchError


class CheckpointError(FsdpOrchError):
    """A checkpoint could not be saved or restored; raised on every rank."""


# The I/O errors a save meets on a full, closed or read-only filesystem, told by name.
IO_ERRORS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
             errno.EACCES: "permission denied", errno.EROFS: "read-only file system"}


def io_cause(exc: BaseException) -> OSError | None:
    """The OSError of ``IO_ERRORS`` behind a failed save, or None: in the exception's chain, or in
    the per-rank failures that DCP's ``CheckpointException`` carries."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        found = todo.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, OSError) and found.errno in IO_ERRORS:
            return found
        todo += [found.__cause__, found.__context__]
        failures = getattr(found, "failures", None)  # CheckpointException: rank -> (exc, trace)
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) else f for f in failures.values()
                     if isinstance(f, (tuple, BaseException))]
    return None


def save_failed(exc: BaseException, step: int, path: str, kept: str | None) -> CheckpointError:
    """What a failed save of ``step`` into ``path`` says: the I/O error by name where there is one
    (DCP's own says only ``CheckpointException ranks:dict_keys([0, 1])``), and which checkpoint
    is kept."""
    cause = io_cause(exc)
    what = (f"{IO_ERRORS[cause.errno]} in {path}" if cause is not None and cause.errno is not None
            else f"{type(exc).__name__}: {exc}")
    return CheckpointError(f"checkpoint save of step {step} failed: {what}{kept_clause(kept)}")


def kept_clause(kept: str | None) -> str:
    """What a failed save leaves: the checkpoint before it, named."""
    return (f"; the previous checkpoint {kept} is kept" if kept
            else "; there is no earlier checkpoint")


def warn(message: str) -> None:
    """``[fsdp-orch] warning: <message>`` on stderr."""
    print(f"[fsdp-orch] warning: {message}", file=sys.stderr, flush=True)


__all__ = ["IO_ERRORS", "CheckpointError", "io_cause", "kept_clause", "save_failed", "warn"]
