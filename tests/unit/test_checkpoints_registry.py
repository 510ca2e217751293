"""The layout registry (fsdp_orch.checkpoints.registry): a name is decided by the first entry whose
pattern matches it, and another framework is one more ``Layout`` entry. Megatron-LM's
``iter_NNNNNNN/`` folders are found, judged, ordered among the other layouts and moved aside once
an entry names them, and are no checkpoint without it."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from fsdp_orch.checkpoints.aside import INCOMPLETE_DIR
from fsdp_orch.checkpoints.folders import (
    checkpoint_info,
    latest_complete,
    list_checkpoints,
    partial_newer_than_latest,
)
from fsdp_orch.checkpoints.formats import zip_complete
from fsdp_orch.checkpoints.info import Verdict
from fsdp_orch.checkpoints.registry import LAYOUTS, Layout, entry_for
from fsdp_orch.checkpoints.source import FolderSource
from fsdp_orch.checkpoints.storage import LOCAL, Storage

MEGATRON_WEIGHTS = "mp_rank_00/model_optim_rng.pt"


def megatron_complete(path: Path, step: int, storage: Storage) -> Verdict:
    """Megatron-LM writes each rank's torch.save file; rank 0's is there and whole."""
    whole = zip_complete(str(path / MEGATRON_WEIGHTS), storage)
    return Verdict("" if whole else f"no complete {MEGATRON_WEIGHTS}")


MEGATRON = Layout("megatron", re.compile(r"iter_(?P<step>\d{7})"), megatron_complete)
WITH_MEGATRON = (*LAYOUTS, MEGATRON)


def make_iter(base: Path, step: int, *, whole: bool = True) -> Path:
    path = base / f"iter_{step:07d}"
    (path / "mp_rank_00").mkdir(parents=True)
    with zipfile.ZipFile(path / MEGATRON_WEIGHTS, "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 100)
    if not whole:
        data = (path / MEGATRON_WEIGHTS).read_bytes()
        (path / MEGATRON_WEIGHTS).write_bytes(data[:-7])
    return path


def make_hf(base: Path, step: int) -> Path:
    path = base / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    (path / "trainer_state.json").write_text("{}")
    return path


def summary(directory: Path, layouts=LAYOUTS) -> list[tuple[str, int, bool, str]]:
    return [(c.path.name, c.step, c.complete, c.layout)
            for c in list_checkpoints(directory, layouts=layouts)]


def test_an_extra_entry_finds_judges_and_orders_another_framework(tmp_path: Path) -> None:
    make_iter(tmp_path, 100)
    make_hf(tmp_path, 200)
    make_iter(tmp_path, 300, whole=False)  # the save the crash cut short
    (tmp_path / "iter_12").mkdir()  # not the pattern's seven digits
    assert summary(tmp_path, WITH_MEGATRON) == [("iter_0000100", 100, True, "megatron"),
                                                ("checkpoint-200", 200, True, "hf"),
                                                ("iter_0000300", 300, False, "megatron")]
    assert list_checkpoints(tmp_path, layouts=WITH_MEGATRON)[-1].reason == (
        f"no complete {MEGATRON_WEIGHTS}")
    assert latest_complete(tmp_path, layouts=WITH_MEGATRON).path == tmp_path / "checkpoint-200"
    assert [c.step for c in partial_newer_than_latest(tmp_path, layouts=WITH_MEGATRON)] == [300]
    info = checkpoint_info(tmp_path / "iter_0000100", layouts=WITH_MEGATRON)
    assert info is not None and (info.step, info.complete, info.layout) == (100, True, "megatron")


def test_without_its_entry_the_other_framework_is_no_checkpoint(tmp_path: Path) -> None:
    make_iter(tmp_path, 100)
    make_hf(tmp_path, 200)
    assert summary(tmp_path) == [("checkpoint-200", 200, True, "hf")]
    assert checkpoint_info(tmp_path / "iter_0000100") is None


def test_a_source_over_the_extra_layout_moves_its_partial_checkpoint_aside(tmp_path: Path) -> None:
    make_iter(tmp_path, 100)
    partial = make_iter(tmp_path, 300, whole=False)
    source = FolderSource(str(tmp_path), LOCAL, WITH_MEGATRON)
    found = source.settled(sleep=lambda seconds: None)
    moved = source.move_aside(source.newer_partial(found), "attempt-1")
    assert moved == [(partial, tmp_path / INCOMPLETE_DIR / "iter_0000300.attempt-1")]
    assert source.latest() is not None and source.latest().step == 100
    assert summary(tmp_path, WITH_MEGATRON) == [("iter_0000100", 100, True, "megatron")]


def test_the_first_entry_that_matches_a_name_decides(tmp_path: Path) -> None:
    assert entry_for("step-5", LAYOUTS)[0].name == "dcp"
    assert entry_for("epoch=0-step=5.ckpt", LAYOUTS)[0].name == "lightning"
    assert entry_for("notes.txt", LAYOUTS) is None
    titan = tmp_path / "step-10"
    titan.mkdir()
    (titan / ".metadata").write_bytes(b"pickled metadata")
    mine = Layout("mine", re.compile(r"step-(?P<step>\d+)"),
                  lambda path, step, storage: Verdict(""))
    assert summary(tmp_path, (mine, *LAYOUTS)) == [("step-10", 10, True, "mine")]
    assert summary(tmp_path, (*LAYOUTS, mine)) == [("step-10", 10, True, "dcp-plain")]
