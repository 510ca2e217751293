"""One checkpoint as discovery describes it (``CheckpointInfo``), the names of the layouts, the
latest complete one of a list, and the two small values a layout's rules return: a ``Verdict``
(complete or why not) and a ``Step``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# The layouts (CheckpointInfo.layout); fsdp_orch.checkpoints.registry says how each is found.
DCP = "dcp"
DCP_PLAIN = "dcp-plain"
HF = "hf"
LIGHTNING = "lightning"
FILE = "file"
ACCELERATE = "accelerate"


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    complete: bool
    layout: str  # DCP, DCP_PLAIN, HF, LIGHTNING, ACCELERATE or FILE
    reason: str = ""  # why it is not complete; "" when it is
    step_known: bool = True  # False: neither its name nor its content tells the step
    step_note: str = ""  # why the step is not known


def latest_of(found: Sequence[CheckpointInfo]) -> CheckpointInfo | None:
    """The last complete checkpoint of ``found`` (oldest first), or None."""
    complete = [c for c in found if c.complete]
    return complete[-1] if complete else None


class Verdict(NamedTuple):
    """What a layout's completeness rule says of one checkpoint: why it is not complete ("" when
    it is), and the layout it turned out to be where a rule tells two apart (None: the entry's)."""

    reason: str
    layout: str | None = None


class Step(NamedTuple):
    """What a layout's step rule says of one checkpoint: its number, and why that number is not
    the training step ("" when it is: an ``epoch_N`` folder numbers epochs)."""

    number: int
    note: str = ""


__all__ = ["ACCELERATE", "DCP", "DCP_PLAIN", "FILE", "HF", "LIGHTNING", "CheckpointInfo", "Step",
           "Verdict", "latest_of"]
