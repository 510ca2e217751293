"""Checkpoint discovery (fsdp_orch.checkpoints.folders and its layouts): which checkpoints count
as complete, in each layout (ours, plain DCP, Hugging Face, Lightning), and moving partial ones out
of the way."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from fsdp_orch.checkpoints.aside import INCOMPLETE_DIR, move_aside
from fsdp_orch.checkpoints.folders import (
    checkpoint_info,
    latest_complete,
    list_checkpoints,
    partial_newer_than_latest,
)
from fsdp_orch.checkpoints.formats import zip_tail_complete
from fsdp_orch.checkpoints.layouts.dcp import parse_commit, step_dir_name


def make_step(base: Path, step: int, *, name: str | None = None, metadata: bool = True,
              commit: object = "auto", rank_state: bool = True) -> Path:
    """Our runtime's layout: padded name, per-rank state, DCP files, then COMMITTED."""
    path = base / (name or step_dir_name(step))
    path.mkdir(parents=True)
    if rank_state:
        (path / "rank-0.state.pt").write_bytes(b"rank state")
    (path / "__0_0.distcp").write_bytes(b"shard")
    if metadata:
        (path / ".metadata").write_bytes(b"pickled metadata")
    if commit == "auto":
        (path / "COMMITTED").write_text(json.dumps({"step": step, "world_size": 2, "time": 1.0}))
    elif isinstance(commit, str):
        (path / "COMMITTED").write_text(commit)
    return path


def make_titan(base: Path, step: int, *, metadata: bool = True) -> Path:
    """What torchtitan (or any script calling dcp.save) writes: step-<N>/ with DCP files only."""
    path = base / f"step-{step}"
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard")
    (path / "__1_0.distcp").write_bytes(b"shard")
    if metadata:
        (path / ".metadata").write_bytes(b"pickled metadata")
    return path


def summary(directory) -> list[tuple[int, bool, str]]:
    return [(c.step, c.complete, c.layout) for c in list_checkpoints(directory)]


# --- ours ----------------------------------------------------------------------------------------

def test_complete_needs_metadata_and_commit(tmp_path):
    make_step(tmp_path, 10)
    make_step(tmp_path, 20, metadata=False)  # DCP never finished
    make_step(tmp_path, 30, commit=None)  # crashed before rank 0 committed
    found = list_checkpoints(tmp_path)
    assert [(c.step, c.complete) for c in found] == [(10, True), (20, False), (30, False)]
    assert [c.reason for c in found] == ["", "no .metadata", "no valid COMMITTED record"]
    assert latest_complete(tmp_path).step == 10


def test_latest_complete_is_highest_complete_step_not_newest_name(tmp_path):
    for step in (2, 10, 9):
        make_step(tmp_path, step)
    make_step(tmp_path, 11, commit=None)
    latest = latest_complete(tmp_path)
    assert latest.step == 10
    assert latest.path == tmp_path / "step-00000010"


def test_zero_padded_and_plain_names_parse_to_the_same_steps(tmp_path):
    make_step(tmp_path, 100)
    make_step(tmp_path, 7, name="step-7")
    assert [c.step for c in list_checkpoints(tmp_path)] == [7, 100]
    assert step_dir_name(100) == "step-00000100"
    assert checkpoint_info(tmp_path / step_dir_name(100)).complete


def test_commit_record_must_parse_and_name_the_same_step(tmp_path):
    make_step(tmp_path, 1, commit="{not json")
    make_step(tmp_path, 2, commit=json.dumps({"step": 3}))
    make_step(tmp_path, 4, commit=json.dumps(["step", 4]))
    make_step(tmp_path, 5, commit="")
    found = list_checkpoints(tmp_path)
    assert [c.complete for c in found] == [False, False, False, False]
    assert [c.layout for c in found] == ["dcp"] * 4
    assert found[1].reason == "COMMITTED names step 3"
    assert latest_complete(tmp_path) is None


def test_a_folder_is_ours_by_padded_name_commit_record_or_rank_state(tmp_path):
    make_step(tmp_path, 1, commit=None, rank_state=False)  # padded name alone
    make_step(tmp_path, 2, name="step-2", commit=None)  # a rank state file alone
    make_step(tmp_path, 3, name="step-3", commit=json.dumps({"step": 4}), rank_state=False)
    assert summary(tmp_path) == [(1, False, "dcp"), (2, False, "dcp"), (3, False, "dcp")]


def test_a_superseded_checkpoint_of_ours_stays_incomplete(tmp_path):
    path = make_step(tmp_path, 8)
    (path / "COMMITTED").rename(path / "COMMITTED.superseded")  # what the runtime does on rewind
    assert summary(tmp_path) == [(8, False, "dcp")]


# --- plain DCP (torchtitan) -----------------------------------------------------------------------

def test_torchtitan_step_folders_are_complete_with_metadata(tmp_path):
    make_titan(tmp_path, 10)
    make_titan(tmp_path, 20, metadata=False)  # a save interrupted before the coordinator's rename
    assert summary(tmp_path) == [(10, True, "dcp-plain"), (20, False, "dcp-plain")]
    assert list_checkpoints(tmp_path)[1].reason == "no .metadata"
    assert latest_complete(tmp_path).path == tmp_path / "step-10"
    assert checkpoint_info(tmp_path / "step-10").layout == "dcp-plain"


def test_plain_and_our_folders_side_by_side(tmp_path):
    make_step(tmp_path, 20)
    make_titan(tmp_path, 30)
    make_step(tmp_path, 40, commit=None)
    assert summary(tmp_path) == [(20, True, "dcp"), (30, True, "dcp-plain"), (40, False, "dcp")]
    assert latest_complete(tmp_path).path == tmp_path / "step-30"


# --- Hugging Face ---------------------------------------------------------------------------------

def make_hf(base: Path, step: int, *, state: str | None = "{}",
            weights: tuple[str, ...] = ("model.safetensors",)) -> Path:
    path = base / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name in weights:
        (path / name).write_bytes(b"weights")
    (path / "optimizer.pt").write_bytes(b"optimizer")
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


def test_hugging_face_checkpoint_folders(tmp_path):
    done = make_hf(tmp_path, 500)
    make_hf(tmp_path, 1000, state=None)  # Trainer died before writing trainer_state.json
    found = list_checkpoints(tmp_path)
    assert [(c.step, c.complete, c.layout) for c in found] == [
        (500, True, "hf"), (1000, False, "hf")]
    assert found[1].reason == "no trainer_state.json"
    assert latest_complete(tmp_path).path == done


@pytest.mark.parametrize("state", ['{"global_step": 10, "log_hi', "[]", ""])
def test_hf_trainer_state_must_be_a_json_object(tmp_path, state):
    make_hf(tmp_path, 10, state=state)
    assert summary(tmp_path) == [(10, False, "hf")]
    assert list_checkpoints(tmp_path)[0].reason == "trainer_state.json is not a JSON object"


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin",
                                     "adapter_model.safetensors", "adapter_model.bin",
                                     # Accelerate's save_state: a second model, FSDP full, local
                                     "model_1.safetensors", "pytorch_model_fsdp.bin",
                                     "pytorch_model_fsdp_rank0.bin"])
def test_hf_single_file_weights(tmp_path, weights):
    make_hf(tmp_path, 10, weights=(weights,))
    assert summary(tmp_path) == [(10, True, "hf")]


def test_hf_without_weights_is_partial(tmp_path):
    make_hf(tmp_path, 10, weights=())
    make_hf(tmp_path, 20, weights=("model.safetensors.tmp", "rng_state.pth", "training_args.bin"))
    assert summary(tmp_path) == [(10, False, "hf"), (20, False, "hf")]
    assert list_checkpoints(tmp_path)[0].reason == "no model weights"


@pytest.mark.parametrize("index", ["model.safetensors.index.json", "pytorch_model.bin.index.json"])
def test_hf_sharded_weights_need_every_shard_of_the_index(tmp_path, index):
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {"a.weight": shards[0], "b.weight": shards[1], "c.weight": shards[1]}
    for step, present in ((10, shards), (20, shards[:1])):
        path = make_hf(tmp_path, step, weights=tuple(present))
        (path / index).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert summary(tmp_path) == [(10, True, "hf"), (20, False, "hf")]
    assert list_checkpoints(tmp_path)[1].reason == f"{index} names missing shard {shards[1]}"


def test_hf_index_without_weight_map_is_partial(tmp_path):
    path = make_hf(tmp_path, 10, weights=())
    (path / "model.safetensors.index.json").write_text('{"metadata": {}')
    assert summary(tmp_path) == [(10, False, "hf")]


def test_hf_fsdp_sharded_model_folder_needs_its_metadata(tmp_path):
    for step, metadata in ((10, True), (20, False)):
        model = make_hf(tmp_path, step, weights=()) / "pytorch_model_fsdp_0"
        model.mkdir()
        (model / "__0_0.distcp").write_bytes(b"shard")
        if metadata:
            (model / ".metadata").write_bytes(b"pickled metadata")
    assert summary(tmp_path) == [(10, True, "hf"), (20, False, "hf")]


def test_hf_deepspeed_engine_checkpoint_counts_as_weights(tmp_path):
    path = make_hf(tmp_path, 10, weights=())
    (path / "global_step10").mkdir()
    (path / "latest").write_text("global_step10")
    make_hf(tmp_path, 20, weights=()).joinpath("latest").write_text("global_step20")  # no folder
    assert summary(tmp_path) == [(10, True, "hf"), (20, False, "hf")]


# --- Lightning ------------------------------------------------------------------------------------

def lightning_bytes(step: int) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({"epoch": 0, "global_step": step, "pytorch-lightning_version": "2.5.0",
                "state_dict": {"layer.weight": torch.randn(64, 64)},
                "optimizer_states": [{"state": {}, "param_groups": []}]}, buffer)
    return buffer.getvalue()


def test_lightning_ckpt_files_complete_and_truncated(tmp_path):
    data = lightning_bytes(100)
    (tmp_path / "epoch=0-step=100.ckpt").write_bytes(data)
    (tmp_path / "epoch=0-step=200.ckpt").write_bytes(lightning_bytes(200)[:-30])  # still writing
    found = list_checkpoints(tmp_path)
    assert [(c.step, c.complete, c.layout) for c in found] == [(100, True, "lightning"),
                                                                (200, False, "lightning")]
    assert found[1].reason == "not a complete zip archive"
    assert latest_complete(tmp_path).path == tmp_path / "epoch=0-step=100.ckpt"


def test_every_truncation_of_a_torch_save_file_is_partial(tmp_path):
    data = lightning_bytes(1)
    path = tmp_path / "step=1.ckpt"
    cuts = [*range(len(data) - 300, len(data)), *range(0, len(data), 997)]
    for cut in cuts:
        path.write_bytes(data[:cut])
        assert not checkpoint_info(path).complete, cut
    path.write_bytes(data)
    assert checkpoint_info(path).complete


def test_zip_archives_with_a_comment_or_without_zip64_records(tmp_path):
    for name, comment in (("step=1.ckpt", b""), ("step=2.ckpt", b"PK\x05\x06 in a comment" * 50)):
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            archive.writestr("archive/data.pkl", b"x" * 1000)
            archive.comment = comment
    assert summary(tmp_path) == [(1, True, "lightning"), (2, True, "lightning")]
    data = (tmp_path / "step=2.ckpt").read_bytes()
    assert not zip_tail_complete(data[:-1], len(data) - 1)
    assert not zip_tail_complete(data + b"\0", len(data) + 1)


def test_last_ckpt_is_preferred_and_takes_the_newest_complete_numbered_step(tmp_path):
    (tmp_path / "epoch=0-step=100.ckpt").write_bytes(lightning_bytes(100))
    (tmp_path / "epoch=1-step=200.ckpt").write_bytes(lightning_bytes(200)[:1000])
    (tmp_path / "last.ckpt").write_bytes(lightning_bytes(100))
    found = list_checkpoints(tmp_path)
    assert [(c.path.name, c.step, c.complete) for c in found] == [
        ("epoch=0-step=100.ckpt", 100, True), ("last.ckpt", 100, True),
        ("epoch=1-step=200.ckpt", 200, False)]
    assert latest_complete(tmp_path).path == tmp_path / "last.ckpt"
    assert checkpoint_info(tmp_path / "last.ckpt") == found[1]


def test_a_partial_last_ckpt_falls_back_to_the_newest_complete_file(tmp_path):
    (tmp_path / "epoch=0-step=100.ckpt").write_bytes(lightning_bytes(100))
    (tmp_path / "last.ckpt").write_bytes(lightning_bytes(100)[:-1])
    assert latest_complete(tmp_path).path == tmp_path / "epoch=0-step=100.ckpt"


def test_last_ckpt_alone_and_its_versions(tmp_path):
    (tmp_path / "last.ckpt").write_bytes(lightning_bytes(5))
    assert [(c.step, c.complete) for c in list_checkpoints(tmp_path)] == [(0, True)]
    (tmp_path / "last-v1.ckpt").write_bytes(lightning_bytes(9))
    assert [c.path.name for c in list_checkpoints(tmp_path)] == ["last.ckpt", "last-v1.ckpt"]
    assert latest_complete(tmp_path).path.name == "last-v1.ckpt"


def test_ckpt_files_without_a_step_are_ignored(tmp_path):
    (tmp_path / "best.ckpt").write_bytes(lightning_bytes(5))
    (tmp_path / "step=3.ckpt.tmp").write_bytes(lightning_bytes(3))
    assert list_checkpoints(tmp_path) == []
    assert checkpoint_info(tmp_path / "best.ckpt") is None


def test_lightning_sharded_checkpoint_folder(tmp_path):
    for step, meta in ((10, "whole"), (20, None), (30, "truncated")):
        path = tmp_path / f"epoch=0-step={step}.ckpt"
        path.mkdir()
        (path / "__0_0.distcp").write_bytes(b"shard")
        (path / ".metadata").write_bytes(b"pickled metadata")  # DCP first, then rank 0's meta.pt
        if meta:
            data = lightning_bytes(step)
            (path / "meta.pt").write_bytes(data if meta == "whole" else data[:-5])
    found = list_checkpoints(tmp_path)
    assert [(c.step, c.complete) for c in found] == [(10, True), (20, False), (30, False)]
    assert found[1].reason == "no complete meta.pt"


# --- across layouts, other filesystems ------------------------------------------------------------

def test_other_entries_are_ignored(tmp_path):
    make_step(tmp_path, 3)
    (tmp_path / "step-4").write_text("a file, not a directory")
    (tmp_path / "checkpoint-5").write_text("a file, not a directory")
    (tmp_path / "full").mkdir()
    (tmp_path / "step-5.tmp").mkdir()
    (tmp_path / "step-x").mkdir()
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / INCOMPLETE_DIR).mkdir()
    assert [c.step for c in list_checkpoints(tmp_path)] == [3]


def test_missing_directory_means_no_checkpoints(tmp_path):
    assert list_checkpoints(tmp_path / "nope") == []
    assert latest_complete(tmp_path / "nope") is None
    assert partial_newer_than_latest(tmp_path / "nope") == []


def test_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    make_step(tmp_path / "ckpts", 8)
    assert latest_complete("~/ckpts").step == 8


def test_storage_protocol_lets_discovery_run_on_other_filesystems():
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("data.pkl", b"x")
    files: dict[str, str | bytes] = {
        "/c/step-00000001/.metadata": "", "/c/step-00000001/COMMITTED": '{"step": 1}',
        "/c/step-00000002/.metadata": "",
        "/c/step-3/.metadata": "",
        "/c/step=4.ckpt": zipped.getvalue(), "/c/step=5.ckpt": zipped.getvalue()[:-3]}

    class DictStorage:
        def list_dir(self, path):
            return sorted({p[len(path) + 1:].split("/")[0] for p in files
                           if p.startswith(path + "/")})

        def is_dir(self, path):
            return any(p.startswith(path + "/") for p in files)

        def exists(self, path):
            return path in files or self.is_dir(path)

        def read_text(self, path):
            value = files.get(path)
            return value if isinstance(value, str) else None

        def size(self, path):
            value = files.get(path)
            return len(value) if isinstance(value, bytes) else None

        def read_tail(self, path, nbytes):
            value = files.get(path)
            return value[-nbytes:] if isinstance(value, bytes) else None

    found = list_checkpoints("/c", DictStorage())
    assert [(c.step, c.complete, c.layout) for c in found] == [
        (1, True, "dcp"), (2, False, "dcp"), (3, True, "dcp-plain"), (4, True, "lightning"),
        (5, False, "lightning")]


def test_parse_commit():
    assert parse_commit('{"step": 4, "world_size": 2}') == {"step": 4, "world_size": 2}
    assert parse_commit(None) is None
    assert parse_commit('{"step": "4"}') is None


def test_discovery_and_heartbeat_modules_do_not_import_torch():
    code = ("import sys, fsdp_orch.checkpoints.folders, fsdp_orch.checkpoints.source, "
            "fsdp_orch.checkpoints.polls, fsdp_orch.observe.heartbeats, "
            "fsdp_orch.bootstrap.faults, "
            "fsdp_orch.runtime.heartbeat, fsdp_orch.runtime.settings, fsdp_orch.runtime; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- partial checkpoints newer than the latest complete one --------------------------------------

def test_partial_newer_than_latest(tmp_path):
    make_hf(tmp_path, 5, state=None)  # older than the latest complete one: not in the way
    make_hf(tmp_path, 10)
    make_hf(tmp_path, 20, state=None)
    make_hf(tmp_path, 30, weights=())
    assert [c.step for c in partial_newer_than_latest(tmp_path)] == [20, 30]


def test_partial_newer_than_latest_without_a_complete_one_is_every_partial(tmp_path):
    make_titan(tmp_path, 1, metadata=False)
    make_titan(tmp_path, 2, metadata=False)
    assert [c.step for c in partial_newer_than_latest(tmp_path)] == [1, 2]


def test_move_aside_hides_partials_in_a_dot_folder_and_never_overwrites(tmp_path):
    make_hf(tmp_path, 10)
    make_hf(tmp_path, 20, state=None)
    (tmp_path / "epoch=0-step=30.ckpt").write_bytes(b"PK\x03\x04 partial")
    moved = move_aside(partial_newer_than_latest(tmp_path), tmp_path, "attempt-1")
    hidden = tmp_path / INCOMPLETE_DIR
    assert moved == [(tmp_path / "checkpoint-20", hidden / "checkpoint-20.attempt-1"),
                     (tmp_path / "epoch=0-step=30.ckpt", hidden / "epoch=0-step=30.ckpt.attempt-1")]
    assert (hidden / "checkpoint-20.attempt-1" / "optimizer.pt").read_bytes() == b"optimizer"
    assert summary(tmp_path) == [(10, True, "hf")]
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-10"]

    make_hf(tmp_path, 20, state=None)  # the same attempt tag again
    again = move_aside(partial_newer_than_latest(tmp_path), tmp_path, "attempt-1")
    assert again == [(tmp_path / "checkpoint-20", hidden / "checkpoint-20.attempt-1-1")]
    assert len(list(hidden.iterdir())) == 3


def test_move_aside_needs_a_plain_tag(tmp_path):
    with pytest.raises(ValueError):
        move_aside([], tmp_path, "a/b")


def test_move_aside_of_nothing_touches_nothing(tmp_path):
    assert move_aside([], tmp_path / "not-yet", "attempt-0") == []  # before the first save
    assert move_aside(partial_newer_than_latest(tmp_path), tmp_path, "attempt-0") == []
    assert list(tmp_path.iterdir()) == []


def test_hf_get_last_checkpoint_takes_the_partial_one_until_it_is_moved_aside(tmp_path):
    pytest.importorskip("transformers")
    from transformers.trainer_utils import get_last_checkpoint

    make_hf(tmp_path, 10)
    make_hf(tmp_path, 20, state=None)
    assert get_last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-20")  # #35782
    move_aside(partial_newer_than_latest(tmp_path), tmp_path, "attempt-0")
    assert get_last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")


@pytest.mark.slow
def test_real_hf_trainer_checkpoints_are_complete(tmp_path):
    pytest.importorskip("transformers")
    script = textwrap.dedent(f"""
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
        model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=32,
                                           n_positions=8))
        data = [{{"input_ids": torch.arange(8), "labels": torch.arange(8)}} for _ in range(8)]
        args = TrainingArguments(output_dir={str(tmp_path)!r}, max_steps=2, save_steps=1,
                                 per_device_train_batch_size=4, report_to=[], use_cpu=True,
                                 disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=data).train()
    """)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    assert summary(tmp_path) == [(1, True, "hf"), (2, True, "hf")]
    (tmp_path / "checkpoint-2" / "model.safetensors").unlink()
    assert latest_complete(tmp_path).path == tmp_path / "checkpoint-1"
