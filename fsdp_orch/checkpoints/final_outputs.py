"""What a script writes after its last checkpoint, where its layout tells: whether it is there.

A job whose ranks were stopped after its last complete checkpoint is not trained again
(``decide.teardown``), but what the script does after that checkpoint may not have run. For a
Hugging Face Trainer (``checkpoint-N`` folders, the ``hf`` layout) that is the final
``save_model()`` into ``output_dir``, the checkpoint folder's parent: one of its model files must
be there. For other layouts nothing says what the script writes at its end: ``finished`` is
``"unknown"``. Pure: the files are asked of a ``Storage``."""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.checkpoints.info import HF, CheckpointInfo
from fsdp_orch.checkpoints.storage import Storage
from fsdp_orch.vocab.states import FINISHED_UNKNOWN as UNKNOWN

# What the Trainer's save_model() writes into output_dir: whole weights, a sharded index, or a
# PEFT adapter (safetensors or pickle).
HF_FINAL_MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                        "pytorch_model.bin.index.json", "adapter_model.safetensors",
                        "adapter_model.bin")


@dataclass(frozen=True)
class FinalOutputs:
    """``finished``: True (the final outputs are there), False (``missing`` names what is not),
    or ``UNKNOWN`` (the layout does not tell what the script writes at its end)."""

    finished: bool | str
    missing: tuple[str, ...] = ()
    looked_in: str | None = None
    left_over: tuple[str, ...] = ()  # partial files of an interrupted write (``*.tmp``)

    def text(self) -> str:
        """One sentence for the job's end and its notice."""
        if self.finished is True:
            return f"the script's final model is in {self.looked_in}"
        if self.finished is False:
            left = (f" (left over: {', '.join(self.left_over)})" if self.left_over else "")
            return (f"the script's final outputs are missing: {'; '.join(self.missing)}{left}; the "
                    "latest checkpoint holds the trained weights")
        return ("whether the script's final outputs were written is unknown: nothing in its "
                "checkpoint layout says what it writes after its last checkpoint")


def final_outputs(info: CheckpointInfo, storage: Storage) -> FinalOutputs:
    """Whether what the script writes after its last checkpoint ``info`` is there."""
    if info.layout != HF:
        return FinalOutputs(UNKNOWN)
    output_dir = info.path.parent
    names = set(storage.list_dir(str(output_dir)))
    if names & set(HF_FINAL_MODEL_FILES):
        return FinalOutputs(True, looked_in=str(output_dir))
    left_over = tuple(sorted(n for n in names if n.endswith(".tmp")))
    missing = (f"the Trainer's final model (save_model(): {', '.join(HF_FINAL_MODEL_FILES[:2])}, "
               f"a sharded index or adapter_model.*) in {output_dir}",)
    return FinalOutputs(False, missing, str(output_dir), left_over)


__all__ = ["HF_FINAL_MODEL_FILES", "FinalOutputs", "final_outputs"]
