"""What a script writes after its last checkpoint, where its layout tells
(checkpoints.final_outputs)."""

from __future__ import annotations

from pathlib import Path

from fsdp_orch.checkpoints.final_outputs import final_outputs
from fsdp_orch.checkpoints.info import DCP, HF, CheckpointInfo
from fsdp_orch.checkpoints.storage import LocalStorage
from fsdp_orch.control.resubmit import nothing_to_move


def test_a_trainers_final_model_is_looked_for_beside_its_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-20").mkdir()
    info = CheckpointInfo(20, tmp_path / "checkpoint-20", True, HF)
    (tmp_path / "model.safetensors.tmp").write_text("")
    missing = final_outputs(info, LocalStorage())
    assert missing.finished is False and str(tmp_path) in missing.missing[0]
    assert missing.left_over == ("model.safetensors.tmp",)
    assert "missing" in missing.text() and "left over" in missing.text()
    (tmp_path / "adapter_model.safetensors").write_text("")
    assert final_outputs(info, LocalStorage()).finished is True


def test_other_layouts_do_not_say_what_a_script_writes_at_its_end(tmp_path: Path) -> None:
    outputs = final_outputs(CheckpointInfo(20, tmp_path / "step-20", True, DCP), LocalStorage())
    assert outputs.finished == "unknown" and "unknown" in outputs.text()


def test_fresh_with_nothing_to_move_says_where_it_looked() -> None:
    line = nothing_to_move("/w/checkpoints/fabric", configured=False)
    assert "/w/checkpoints/fabric" in line and "no checkpoint.dir" in line
    assert "is not reset" in line
