"""Hugging Face's checkpoint folders: the Trainer's ``checkpoint-N``, Accelerate's ``save_state``.

* ``hf``, the Hugging Face Trainer (or a script using Accelerate's ``save_state`` the same way):
  ``checkpoint-N/``. Complete = ``trainer_state.json`` (written after the model, optimizer and
  RNG files) parses as a JSON object and model weights are there: a weights file, an index whose
  shards all exist, an FSDP ``pytorch_model_fsdp_<k>/`` folder with ``.metadata``, or DeepSpeed's
  ``latest`` tag folder. HF's ``get_last_checkpoint`` takes the highest number, complete or not
  (transformers#35782). A ``checkpoint-N/`` without ``trainer_state.json`` that is a complete
  ``save_state`` folder is Accelerate's.
* ``accelerate``: Accelerate's ``save_state`` folders as transformers' no-trainer examples name
  them, ``step_N`` and ``epoch_N``, and ``checkpoint_N`` from ``ProjectConfiguration``'s automatic
  naming (in ``checkpoints/`` under the directory, or the directory itself). Complete = model
  weights (``model*.safetensors`` whole by its header, ``pytorch_model*.bin`` a whole zip, or a
  sharded ``pytorch_model_fsdp_K/`` with ``.metadata``), the optimizer state (``optimizer*.bin`` a
  whole zip, or ``optimizer_K/`` with ``.metadata``) and ``random_states_R.pkl`` for ranks 0..R
  with no gap, each a whole zip. Only ``step_N`` tells the step; ``epoch_N`` and ``checkpoint_N``
  (a count of saves) are ordered by N with the step unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from fsdp_orch.checkpoints.formats import safetensors_complete, zip_complete
from fsdp_orch.checkpoints.info import ACCELERATE, HF, CheckpointInfo, Step, Verdict
from fsdp_orch.checkpoints.layouts.dcp import METADATA_FILE
from fsdp_orch.checkpoints.storage import Storage

HF_COMPLETE_FILE = "trainer_state.json"
# The Trainer's model.safetensors, pytorch_model.bin, adapter_model.*; Accelerate's save_state
# adds model_1.safetensors, and under FSDP pytorch_model_fsdp.bin (full) or ..._rank0.bin (local).
HF_WEIGHT_FILE = re.compile(r"(?:model|pytorch_model|adapter_model)(?:_\d+)?\.(?:safetensors|bin)"
                            r"|pytorch_model_fsdp(?:_\d+)?(?:_rank\d+)?\.bin")
HF_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
HF_FSDP_MODEL = re.compile(r"pytorch_model_fsdp_\d+")
DEEPSPEED_LATEST = "latest"

ACCELERATE_AUTOMATIC_DIR = "checkpoints"  # ProjectConfiguration(automatic_checkpoint_naming=True)
ACCELERATE_OPTIMIZER_FILE = re.compile(r"optimizer(?:_\d+)?(?:_rank\d+)?\.bin")
ACCELERATE_OPTIMIZER_DIR = re.compile(r"optimizer_\d+")
ACCELERATE_RNG = re.compile(r"random_states_(\d+)\.pkl")
ACCELERATE_UNKNOWN_STEP = {
    "epoch": "an epoch_N folder names the epoch, not the step",
    "checkpoint": "Accelerate's automatic checkpoint_N counts saves, not steps"}


# --- the Trainer's checkpoint-N ----------------------------------------------------------------

def judge_trainer(path: Path, step: int, storage: Storage) -> Verdict:
    """A ``checkpoint-N`` folder: the Trainer's (``hf``), or Accelerate's named the Trainer's
    way."""
    text = storage.read_text(str(path / HF_COMPLETE_FILE))
    if text is None:
        if not save_state_missing(path, storage.list_dir(str(path)), storage):
            return Verdict("", ACCELERATE)
        return Verdict(f"no {HF_COMPLETE_FILE}", HF)
    try:
        state = json.loads(text)
    except ValueError:
        state = None
    if not isinstance(state, dict):
        return Verdict(f"{HF_COMPLETE_FILE} is not a JSON object", HF)
    return Verdict(_weights_missing(path, storage.list_dir(str(path)), storage), HF)


def _weights_missing(path: Path, names: list[str], storage: Storage) -> str:
    """Why the model weights of an HF checkpoint folder are not all there ("" when they are)."""
    if any(HF_WEIGHT_FILE.fullmatch(n) for n in names):
        return ""
    for name in names:
        if HF_FSDP_MODEL.fullmatch(name) and storage.exists(str(path / name / METADATA_FILE)):
            return ""
    latest = storage.read_text(str(path / DEEPSPEED_LATEST))
    if latest and latest.strip() and storage.is_dir(str(path / latest.strip())):
        return ""  # a DeepSpeed engine checkpoint (ZeRO-3 without gathered weights)
    for index in HF_WEIGHT_INDEXES:
        if index in names:
            shards = _index_shards(storage.read_text(str(path / index)))
            if shards is None:
                return f"{index} has no weight_map"
            missing = sorted(s for s in shards if not storage.exists(str(path / s)))
            return f"{index} names missing shard {missing[0]}" if missing else ""
    return "no model weights"


def _index_shards(text: str | None) -> set[str] | None:
    try:
        weight_map = json.loads(text or "").get("weight_map")
    except (ValueError, AttributeError):
        return None
    if not isinstance(weight_map, dict) or not weight_map:
        return None
    return {str(v) for v in weight_map.values()}


# --- Accelerate's save_state ---------------------------------------------------------------------

def judge_save_state(path: Path, step: int, storage: Storage) -> Verdict:
    """A ``step_N``, ``epoch_N`` or ``checkpoint_N`` folder of Accelerate's."""
    return Verdict(save_state_missing(path, storage.list_dir(str(path)), storage), ACCELERATE)


def save_state_step(match: re.Match[str], siblings: Sequence[CheckpointInfo] | None) -> Step:
    """``step_N`` names the step; ``epoch_N`` and ``checkpoint_N`` only an order."""
    return Step(int(match["step"]), ACCELERATE_UNKNOWN_STEP.get(match["kind"], ""))


def save_state_missing(path: Path, names: list[str], storage: Storage) -> str:
    """Why an Accelerate ``save_state`` folder is not complete ("" when it is)."""
    parts = (("model weights", HF_WEIGHT_FILE, HF_FSDP_MODEL),
             ("optimizer state", ACCELERATE_OPTIMIZER_FILE, ACCELERATE_OPTIMIZER_DIR))
    for what, file_name, sharded_dir in parts:
        files = [n for n in names if file_name.fullmatch(n)]
        dirs = [n for n in names if sharded_dir.fullmatch(n) and storage.is_dir(str(path / n))]
        if not files and not dirs:
            return f"no {what}"
        for name in files:
            if problem := _file_problem(path, name, storage):
                return problem
        for name in dirs:
            if not storage.exists(str(path / name / METADATA_FILE)):
                return f"{name}/ has no .metadata"
    ranks = sorted(int(m.group(1)) for n in names if (m := ACCELERATE_RNG.fullmatch(n)))
    if ranks != list(range(len(ranks))) or not ranks:
        missing = next(r for r in range(len(ranks) + 1) if r not in ranks)
        return f"no random_states_{missing}.pkl"
    for rank in ranks:
        if problem := _file_problem(path, f"random_states_{rank}.pkl", storage):
            return problem
    return ""


def _file_problem(path: Path, name: str, storage: Storage) -> str:
    """Why a file Accelerate wrote is cut short ("" when whole): safetensors by its header, the
    rest (torch.save's) as zip archives."""
    full = str(path / name)
    if name.endswith(".safetensors"):
        whole = safetensors_complete(full, storage)
    else:
        whole = zip_complete(full, storage)
    return "" if whole else f"{name} is cut short"


__all__ = ["ACCELERATE_AUTOMATIC_DIR", "HF_COMPLETE_FILE", "judge_save_state", "judge_trainer",
           "save_state_missing", "save_state_step"]
