"""Checkpoint discovery (fsdp_orch.checkpoints): which directories count as complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fsdp_orch.checkpoints import (
    checkpoint_info,
    latest_complete,
    list_checkpoints,
    parse_commit,
    step_dir_name,
)


def make_step(base: Path, name: str, *, metadata: bool = True, commit: object = "auto") -> Path:
    path = base / name
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard")
    if metadata:
        (path / ".metadata").write_bytes(b"pickled metadata")
    if commit == "auto":
        step = int(name.split("-")[1])
        (path / "COMMITTED").write_text(json.dumps({"step": step, "world_size": 2, "time": 1.0}))
    elif isinstance(commit, str):
        (path / "COMMITTED").write_text(commit)
    return path


def test_complete_needs_metadata_and_commit(tmp_path):
    make_step(tmp_path, "step-10")
    make_step(tmp_path, "step-20", metadata=False)  # DCP never finished
    make_step(tmp_path, "step-30", commit=None)  # crashed before rank 0 committed
    found = list_checkpoints(tmp_path)
    assert [(c.step, c.complete) for c in found] == [(10, True), (20, False), (30, False)]
    assert latest_complete(tmp_path).step == 10


def test_latest_complete_is_highest_complete_step_not_newest_name(tmp_path):
    for step in (2, 10, 9):
        make_step(tmp_path, step_dir_name(step))
    make_step(tmp_path, "step-11", commit=None)
    latest = latest_complete(tmp_path)
    assert latest.step == 10
    assert latest.path == tmp_path / "step-00000010"


def test_zero_padded_and_plain_names_parse_to_the_same_steps(tmp_path):
    make_step(tmp_path, "step-00000100")
    make_step(tmp_path, "step-7")
    assert [c.step for c in list_checkpoints(tmp_path)] == [7, 100]
    assert step_dir_name(100) == "step-00000100"
    assert checkpoint_info(tmp_path / step_dir_name(100)).complete


def test_commit_record_must_parse_and_name_the_same_step(tmp_path):
    make_step(tmp_path, "step-1", commit="{not json")
    make_step(tmp_path, "step-2", commit=json.dumps({"step": 3}))
    make_step(tmp_path, "step-4", commit=json.dumps(["step", 4]))
    make_step(tmp_path, "step-5", commit="")
    assert [c.complete for c in list_checkpoints(tmp_path)] == [False, False, False, False]
    assert latest_complete(tmp_path) is None


def test_hugging_face_checkpoint_folders(tmp_path):
    done = tmp_path / "checkpoint-500"
    done.mkdir()
    (done / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-1000").mkdir()  # Trainer died before writing trainer_state.json
    found = list_checkpoints(tmp_path)
    assert [(c.step, c.complete, c.layout) for c in found] == [(500, True, "hf"), (1000, False, "hf")]
    assert latest_complete(tmp_path).path == done


def test_other_entries_are_ignored(tmp_path):
    make_step(tmp_path, "step-3")
    (tmp_path / "step-4").write_text("a file, not a directory")
    (tmp_path / "full").mkdir()
    (tmp_path / "step-5.tmp").mkdir()
    (tmp_path / "step-x").mkdir()
    (tmp_path / "notes.txt").write_text("")
    assert [c.step for c in list_checkpoints(tmp_path)] == [3]


def test_missing_directory_means_no_checkpoints(tmp_path):
    assert list_checkpoints(tmp_path / "nope") == []
    assert latest_complete(tmp_path / "nope") is None


def test_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    make_step(tmp_path / "ckpts", "step-8")
    assert latest_complete("~/ckpts").step == 8


def test_storage_protocol_lets_discovery_run_on_other_filesystems():
    files = {"/c/step-1/.metadata": "", "/c/step-1/COMMITTED": '{"step": 1}',
             "/c/step-2/.metadata": ""}

    class DictStorage:
        def list_dir(self, path):
            names = {p[len(path) + 1:].split("/")[0] for p in files if p.startswith(path + "/")}
            return sorted(names)

        def is_dir(self, path):
            return any(p.startswith(path + "/") for p in files)

        def exists(self, path):
            return path in files or self.is_dir(path)

        def read_text(self, path):
            return files.get(path)

    found = list_checkpoints("/c", DictStorage())
    assert [(c.step, c.complete) for c in found] == [(1, True), (2, False)]


def test_parse_commit():
    assert parse_commit('{"step": 4, "world_size": 2}') == {"step": 4, "world_size": 2}
    assert parse_commit(None) is None
    assert parse_commit('{"step": "4"}') is None


def test_discovery_and_heartbeat_modules_do_not_import_torch():
    code = ("import sys, fsdp_orch.checkpoints, fsdp_orch.heartbeats, fsdp_orch.runtime.faults, "
            "fsdp_orch.runtime.heartbeat, fsdp_orch.runtime.settings, fsdp_orch.runtime; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
