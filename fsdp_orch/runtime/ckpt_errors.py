"""How a checkpoint problem is told: :class:`CheckpointError` when it stops the job (raised on
every rank), a warning line on stderr when a save or restore works around it."""

from __future__ import annotations

import sys

from fsdp_orch.vocab.errors import FsdpOrchError


class CheckpointError(FsdpOrchError):
    """A checkpoint could not be saved or restored; raised on every rank."""


def warn(message: str) -> None:
    """``[fsdp-orch] warning: <message>`` on stderr."""
    print(f"[fsdp-orch] warning: {message}", file=sys.stderr, flush=True)


__all__ = ["CheckpointError", "warn"]
