"""The checkpoint layouts found by name in a checkpoint folder: one ``Layout`` entry each, with the
pattern its names match, its completeness rule and its step rule (the rules live in
``fsdp_orch.checkpoints.layouts``). A folder is scanned against ``LAYOUTS`` in order; the first
entry whose pattern matches a name decides. Another framework is one more entry.

The single-file layout (``checkpoint.file``, nanoGPT's ``out/ckpt.pt``) is not here: its name
pattern is the job's own, so it is a source of its own (fsdp_orch.checkpoints.single_file)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.checkpoints.info import ACCELERATE, DCP, HF, LIGHTNING, CheckpointInfo, Step, Verdict
from fsdp_orch.checkpoints.layouts import dcp, hugging_face, lightning
from fsdp_orch.checkpoints.storage import Storage

CompletenessRule = Callable[[Path, int, Storage], Verdict]  # (path, step number, storage)
# (name match, siblings) -> the step. ``siblings`` is None at first; a rule that needs the
# folder's other checkpoints returns None then, and is asked again with them.
StepRule = Callable[[re.Match[str], Sequence[CheckpointInfo] | None], Step | None]


def step_in_name(match: re.Match[str], siblings: Sequence[CheckpointInfo] | None) -> Step:
    """The step is the pattern's group ``step``."""
    return Step(int(match["step"]))


def no_tiebreak(match: re.Match[str]) -> int:
    return 0


@dataclass(frozen=True)
class Layout:
    """One framework's checkpoints, as found in a checkpoint folder.

    ``name``: what ``CheckpointInfo.layout`` says (a completeness rule may name a kindred layout:
    ``dcp`` tells its own folders from plain ``dcp-plain`` ones). ``pattern``: an entry's whole
    name. ``judge``: the completeness rule. ``step``: the step rule. ``tiebreak``: where, at one
    step, the checkpoint sorts (higher is newer: Lightning's ``last.ckpt`` after the numbered
    files). ``folders_only``: an entry of that name that is a file is none. ``subfolder``: a
    folder inside the checkpoint folder where this layout's checkpoints are also looked for
    (Accelerate's automatic ``checkpoints/``). ``judged_alone``: ``checkpoint_info`` describes a
    path of this name as it is, without listing its folder or asking whether it is a folder.
    """

    name: str
    pattern: re.Pattern[str]
    judge: CompletenessRule
    step: StepRule = step_in_name
    tiebreak: Callable[[re.Match[str]], int] = no_tiebreak
    folders_only: bool = True
    subfolder: str | None = None
    judged_alone: bool = False

    def describe(self, match: re.Match[str], path: Path, storage: Storage,
                 step: Step) -> CheckpointInfo:
        """The checkpoint at ``path``, whose name gave ``match`` and the step rule ``step``."""
        verdict = self.judge(path, step.number, storage)
        return CheckpointInfo(step.number, path, not verdict.reason, verdict.layout or self.name,
                              verdict.reason, step_known=not step.note, step_note=step.note)


LAYOUTS: tuple[Layout, ...] = (
    Layout(DCP, re.compile(r"step-(?P<step>\d+)"), dcp.judge, judged_alone=True),
    Layout(HF, re.compile(r"checkpoint-(?P<step>\d+)"), hugging_face.judge_trainer,
           judged_alone=True),
    Layout(ACCELERATE, re.compile(r"(?P<kind>step|epoch|checkpoint)_(?P<step>\d+)"),
           hugging_face.judge_save_state, step=hugging_face.save_state_step,
           subfolder=hugging_face.ACCELERATE_AUTOMATIC_DIR),
    Layout(LIGHTNING, lightning.CKPT, lightning.judge, step=lightning.ckpt_step,
           tiebreak=lightning.last_version, folders_only=False),
)


def entry_for(name: str, layouts: Sequence[Layout]) -> tuple[Layout, re.Match[str]] | None:
    """The first entry whose pattern matches the whole of ``name``, with the match."""
    for layout in layouts:
        if match := layout.pattern.fullmatch(name):
            return layout, match
    return None


__all__ = ["LAYOUTS", "CompletenessRule", "Layout", "StepRule", "entry_for", "step_in_name"]
