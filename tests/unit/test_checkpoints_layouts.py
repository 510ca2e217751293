"""Checkpoint layouts of issue 25. A ``checkpoint.dir`` glob (Lightning's moving ``version_N``)
takes the newest complete checkpoint across every match. Accelerate's ``save_state`` folders as a
layout, on folders Accelerate itself wrote (accelerate 1.x, one CPU process, in a subprocess so this
test process does not import torch):
``step_N`` with its step, ``epoch_N`` and the automatic ``checkpoints/checkpoint_N`` ordered with
the step unknown, and a folder cut short anywhere (weights, optimizer, a rank's random states)
partial."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_orch.checkpoints.folders import checkpoint_info, latest_complete, list_checkpoints
from fsdp_orch.checkpoints.info import ACCELERATE

WRITE = r"""
import os, sys
import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed

out = sys.argv[1]
set_seed(0)
model = torch.nn.Linear(8, 4)
optimizer = torch.optim.AdamW(model.parameters())
accelerator = Accelerator(cpu=True)
model, optimizer = accelerator.prepare(model, optimizer)
for name in ("step_20", "step_40", "epoch_0", "epoch_1"):
    accelerator.save_state(os.path.join(out, "named", name))
auto = Accelerator(cpu=True, project_config=ProjectConfiguration(
    project_dir=os.path.join(out, "auto"), automatic_checkpoint_naming=True))
model2, optimizer2 = auto.prepare(torch.nn.Linear(8, 4),
                                  torch.optim.SGD(torch.nn.Linear(8, 4).parameters(), lr=0.1))
auto.save_state()
auto.save_state()
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("accelerate_states")
    subprocess.run([sys.executable, "-c", WRITE, str(out)], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "ACCELERATE_USE_CPU": "1"})
    return out


@pytest.fixture
def named(written: Path, tmp_path: Path) -> Path:
    target = tmp_path / "out"
    shutil.copytree(written / "named", target)
    return target


def test_step_folders_are_complete_with_their_step_and_the_newest_wins(named: Path) -> None:
    steps = [c for c in list_checkpoints(named) if c.step_known]
    assert [(c.path.name, c.complete, c.layout) for c in steps] == [("step_20", True, ACCELERATE),
                                                                      ("step_40", True, ACCELERATE)]
    for name in ("epoch_0", "epoch_1"):
        shutil.rmtree(named / name)
    assert latest_complete(named).path.name == "step_40"


def test_epoch_folders_are_ordered_by_epoch_with_the_step_unknown(named: Path) -> None:
    for name in ("step_20", "step_40"):
        shutil.rmtree(named / name)
    newest = latest_complete(named)
    assert newest.path.name == "epoch_1" and not newest.step_known and "epoch" in newest.step_note


def test_automatic_naming_is_found_under_checkpoints(written: Path) -> None:
    found = list_checkpoints(written / "auto")
    assert [(c.path.name, c.complete) for c in found] == [
        ("checkpoint_0", True), ("checkpoint_1", True)]
    assert not found[-1].step_known and "counts saves" in found[-1].step_note
    assert [c.path.name for c in list_checkpoints(written / "auto" / "checkpoints")] == [
        "checkpoint_0", "checkpoint_1"]


@pytest.mark.parametrize(("cut", "reason"), [
    ("model.safetensors", "model.safetensors is cut short"),
    ("optimizer.bin", "optimizer.bin is cut short"),
    ("random_states_0.pkl", "random_states_0.pkl is cut short"),
])
def test_a_file_cut_short_makes_the_folder_partial(named: Path, cut: str, reason: str) -> None:
    path = named / "step_40" / cut
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    info = checkpoint_info(named / "step_40")
    assert not info.complete and info.reason == reason
    assert latest_complete(named).path.name in ("step_20", "epoch_1")


def test_a_missing_part_makes_the_folder_partial(named: Path) -> None:
    (named / "step_40" / "random_states_0.pkl").rename(named / "step_40" / "random_states_1.pkl")
    assert checkpoint_info(named / "step_40").reason == "no random_states_0.pkl"
    (named / "step_20" / "optimizer.bin").unlink()
    assert checkpoint_info(named / "step_20").reason == "no optimizer state"


def test_a_save_state_folder_named_the_trainers_way_is_complete(named: Path) -> None:
    (named / "step_40").rename(named / "checkpoint-100")
    info = checkpoint_info(named / "checkpoint-100")
    assert info.complete and info.step == 100 and info.layout == ACCELERATE


def _zip(path: Path) -> None:
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"x")


def test_a_globbed_folder_follows_the_newest_version(tmp_path: Path) -> None:
    """Lightning's default folders: every run logs to a new version_N; the newest complete
    checkpoint across every match wins, by step."""
    from fsdp_orch.checkpoints.aside import move_aside
    from fsdp_orch.checkpoints.globs import matching_dirs

    logs = tmp_path / "lightning_logs"
    _zip(logs / "version_0" / "checkpoints" / "epoch=0-step=40.ckpt")
    _zip(logs / "version_0" / "checkpoints" / "last.ckpt")
    _zip(logs / "version_1" / "checkpoints" / "epoch=0-step=100.ckpt")
    _zip(logs / "version_1" / "checkpoints" / "last.ckpt")
    (logs / "version_2" / "checkpoints").mkdir(parents=True)  # the run that hung before saving
    (logs / "version_2" / "checkpoints" / "epoch=0-step=120.ckpt").write_bytes(b"PK\x03\x04 cut")
    (logs / ".hidden").mkdir()
    pattern = str(logs / "version_*" / "checkpoints")
    assert [Path(d).parent.name for d in matching_dirs(pattern)] == [
        "version_0", "version_1", "version_2"]
    newest = latest_complete(pattern)
    assert newest.path == logs / "version_1" / "checkpoints" / "last.ckpt" and newest.step == 100
    partial = [c for c in list_checkpoints(pattern) if not c.complete]
    [(src, dst)] = move_aside(partial, pattern, "attempt-3")
    assert (dst == logs / "version_2" / "checkpoints" / ".fsdp-orch-incomplete"
            / "epoch=0-step=120.ckpt.attempt-3")
    assert dst.exists() and not src.exists()
    assert list_checkpoints(str(tmp_path / "nothing_*")) == []
