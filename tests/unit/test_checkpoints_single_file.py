"""The single-file checkpoint layout (checkpoint.file): whole zip / legacy torch.save / pickle,
truncations, the step from the name or from step_key, the glob, size stability across two looks,
and what a restart keeps (checkpoints/resume.py). Files are written by torch itself where it
matters."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys

import pytest

from fsdp_orch.checkpoints.aside import INCOMPLETE_DIR
from fsdp_orch.checkpoints.globs import fixed_folder
from fsdp_orch.checkpoints.pickles import whole_file
from fsdp_orch.checkpoints.resume import FROM_SCRATCH, UNREADABLE, resume_point, setting_of
from fsdp_orch.checkpoints.single_file import (
    FileLayout,
    file_sizes,
    list_files,
    looked_twice,
    matching_files,
    step_from_name,
)
from fsdp_orch.checkpoints.storage import LOCAL


def nanogpt_bytes(iter_num: int, zip_format: bool = True) -> bytes:
    import torch

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 8)).sum().backward()
    opt.step()
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "model_args": {"n_layer": 2},
                "iter_num": iter_num, "best_val_loss": torch.tensor(1.5), "config": {"lr": 1e-3}},
               buffer, _use_new_zipfile_serialization=zip_format)
    return buffer.getvalue()


def look(tmp_path, pattern: str, step_key: str | None = "iter_num"):
    layout = FileLayout(str(tmp_path / pattern), step_key)
    return list_files(layout, LOCAL, file_sizes(layout, LOCAL))


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_a_whole_torch_save_file_is_complete_with_its_step_from_step_key(tmp_path, zip_format):
    (tmp_path / "ckpt.pt").write_bytes(nanogpt_bytes(150, zip_format))
    [info] = look(tmp_path, "ckpt.pt")
    assert (info.complete, info.step, info.step_known, info.layout) == (True, 150, True, "file")


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_every_truncation_of_a_torch_save_file_is_partial(tmp_path, zip_format):
    data = nanogpt_bytes(7, zip_format)
    path = tmp_path / "ckpt.pt"
    for cut in [*range(len(data) - 200, len(data)), *range(1, len(data), 331)]:
        path.write_bytes(data[:cut])
        assert not whole_file(str(path), LOCAL, want_object=False).whole, cut
    path.write_bytes(data)
    assert whole_file(str(path), LOCAL, want_object=False).whole


def test_a_plain_pickle_is_whole_when_it_ends_with_stop(tmp_path):
    data = pickle.dumps({"iter_num": 30, "weights": list(range(100))}, protocol=4)
    (tmp_path / "state.pkl").write_bytes(data)
    [info] = look(tmp_path, "state.pkl")
    assert (info.complete, info.step) == (True, 30)
    (tmp_path / "state.pkl").write_bytes(data[:-1])
    [info] = look(tmp_path, "state.pkl")
    assert (info.complete, info.reason) == (False, "not a complete zip archive or pickle")
    (tmp_path / "state.pkl").write_bytes(b"{\"iter_num\": 3}.")  # ends with '.', no pickle header
    assert not look(tmp_path, "state.pkl")[0].complete


def test_reading_step_key_never_runs_a_global(tmp_path):
    class Boom:
        def __reduce__(self):
            return (subprocess.call, (["sh", "-c", f"touch {tmp_path}/ran"],))

    (tmp_path / "ckpt.pkl").write_bytes(pickle.dumps({"iter_num": 5, "x": Boom()}, protocol=2))
    [info] = look(tmp_path, "ckpt.pkl")
    assert (info.complete, info.step) == (True, 5)
    assert not (tmp_path / "ran").exists()
    # The same in the pickles of a legacy torch.save file (its object, and its list of storage
    # keys).
    legacy = (pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
              + pickle.dumps({"protocol_version": 1001}, protocol=2)
              + pickle.dumps({"iter_num": 6, "x": Boom()}, protocol=2)
              + pickle.dumps([Boom()], protocol=2))
    (tmp_path / "legacy.pt").write_bytes(legacy)
    assert not look(tmp_path, "legacy.pt")[0].complete  # its key list names no storage
    assert not (tmp_path / "ran").exists()


def test_the_step_is_unknown_without_a_name_step_or_step_key_and_says_why(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(nanogpt_bytes(40))
    [info] = look(tmp_path, "ckpt.pt", step_key=None)
    assert (info.complete, info.step_known) == (True, False)
    assert info.step_note == "the name has no step and checkpoint.step_key is not set"
    [info] = look(tmp_path, "ckpt.pt", step_key="global_step")
    assert (info.complete, info.step_known) == (True, False)
    assert info.step_note == "no int under 'global_step' could be read from the file"


def test_step_from_the_name():
    assert step_from_name("model_{step}.pt", "model_120.pt") == 120
    assert step_from_name("model_{step}.pt", "model_best.pt") is None
    assert step_from_name("ckpt-*.pt", "ckpt-0300.pt") == 300  # a wildcard that matched only digits
    assert step_from_name("ckpt-*.pt", "ckpt-v2-final.pt") is None  # not a step: unknown, not 2
    assert step_from_name("ckpt.pt", "ckpt.pt") is None
    assert step_from_name("ep*_it{step}.pt", "ep3_it900.pt") == 900


def test_the_glob_orders_by_step_and_the_name_wins_over_step_key(tmp_path):
    for name, it in (
        ("model_100.pt", 1), ("model_20.pt", 2), ("model_300.pt", 3), ("notes.txt", 0)):
        (tmp_path / name).write_bytes(nanogpt_bytes(it) if name.endswith(".pt") else b"x")
    (tmp_path / "model_400.pt").write_bytes(nanogpt_bytes(4)[:-10])  # being written
    found = look(tmp_path, "model_{step}.pt")
    assert [(c.path.name, c.step, c.complete) for c in found] == [
        ("model_20.pt", 20, True), ("model_100.pt", 100, True), ("model_300.pt", 300, True),
        ("model_400.pt", 400, False)]


def test_a_glob_in_the_folder_part(tmp_path):
    for run, it in (("run-a", 5), ("run-b", 9)):
        (tmp_path / run / "out").mkdir(parents=True)
        (tmp_path / run / "out" / "ckpt.pt").write_bytes(nanogpt_bytes(it))
    layout = FileLayout(str(tmp_path / "run-*" / "out" / "ckpt.pt"), "iter_num")
    assert [p.split("/")[-3] for p in matching_files(layout, LOCAL)] == ["run-a", "run-b"]
    assert [c.step for c in list_files(layout, LOCAL, file_sizes(layout, LOCAL))] == [5, 9]
    assert fixed_folder(layout.pattern) == str(tmp_path)
    assert fixed_folder("/w/out/ckpt-*.pt") == "/w/out"


def test_a_file_whose_size_changes_between_two_looks_is_not_complete(tmp_path):
    path = tmp_path / "ckpt.pkl"
    path.write_bytes(pickle.dumps({"iter_num": 10, "w": [0] * 10}, protocol=2))
    layout = FileLayout(str(path), "iter_num")
    pauses: list[float] = []

    def sleep_while_it_is_rewritten(seconds):  # a whole file at each look, but not the same size
        pauses.append(seconds)
        path.write_bytes(pickle.dumps({"iter_num": 20, "w": [0] * 1000}, protocol=2))

    [info] = looked_twice(layout, LOCAL, sleep_while_it_is_rewritten, settle_s=0.5)
    assert (info.complete, pauses) == (False, [0.5])
    assert info.reason.startswith("its size changed between two looks")
    [info] = looked_twice(layout, LOCAL, pauses.append)  # still now
    assert (info.complete, info.step) == (True, 20)
    assert looked_twice(FileLayout(str(tmp_path / "none-*.pt")), LOCAL, pauses.append) == []
    assert pauses == [0.5, 0.5]  # no pause when nothing matches


def test_a_restart_keeps_a_checkpoint_no_dir_layout_reads_and_names_the_setting(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    data = nanogpt_bytes(150)
    (out / "ckpt.pt").write_bytes(data)
    (out / "log.txt").write_text("kept where it is")
    setting = setting_of(str(out), None, None, str(tmp_path), guarded=True)
    # not a restart
    assert resume_point(setting, LOCAL, 0, resume=True, sleep=pytest.fail).events == []
    point = resume_point(setting, LOCAL, 1, resume=True, sleep=pytest.fail)
    assert point.info is None
    [(kind, message), (last, why)] = point.events
    assert kind == UNREADABLE and "set checkpoint.file: out/ckpt.pt" in message
    assert last == FROM_SCRATCH and "attempt 1 starts from scratch" in why
    assert (out / INCOMPLETE_DIR / "ckpt.pt.attempt-1").read_bytes() == data
    assert sorted(p.name for p in out.iterdir()) == [INCOMPLETE_DIR, "log.txt"]


def test_without_a_resume_setting_nothing_is_moved_but_a_restart_from_scratch_is_said(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(nanogpt_bytes(1))
    setting = setting_of(str(tmp_path), None, None, str(tmp_path), guarded=False)
    [(kind, message)] = resume_point(setting, LOCAL, 1, resume=True, sleep=pytest.fail).events
    # said, not moved
    assert kind == FROM_SCRATCH and f"{tmp_path / 'ckpt.pt'} left in place" in message
    assert (tmp_path / "ckpt.pt").exists()
    assert resume_point(setting, LOCAL, 0, resume=True, sleep=pytest.fail).events == []


def test_the_file_layout_resumes_the_complete_file_and_never_moves_it(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ckpt.pt").write_bytes(nanogpt_bytes(150))
    setting = setting_of(str(tmp_path / "out"), str(tmp_path / "out" / "ckpt.pt"), "iter_num",
                         str(tmp_path), guarded=True)
    pauses: list[float] = []
    point = resume_point(setting, LOCAL, 2, resume=True, sleep=pauses.append)
    assert (point.info.path.name, point.info.step, point.events, pauses) == (
        "ckpt.pt", 150, [], [0.5])
    (tmp_path / "out" / "ckpt.pt").write_bytes(nanogpt_bytes(200)[:-50])  # cut off by the hang
    point = resume_point(setting, LOCAL, 3, resume=True, sleep=pauses.append)
    assert (point.info is None
            and [k for k, _ in point.events] == ["checkpoint_moved_aside", FROM_SCRATCH])
    assert (tmp_path / "out" / INCOMPLETE_DIR / "ckpt.pt.attempt-3").exists()


def test_the_file_layout_module_does_not_import_torch():
    code = ("import sys, fsdp_orch.checkpoints.single_file, fsdp_orch.checkpoints.resume; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_status_says_when_a_checkpoint_step_is_unknown_and_why():
    from fsdp_orch.cli.status_table import detail_lines, format_jobs
    from fsdp_orch.control.follow import progress_line
    from fsdp_orch.record import event_types
    from fsdp_orch.record.fold import fold

    why = "the name has no step and checkpoint.step_key is not set"
    status = fold([event_types.Submitted(at=1.0, job="j1", name="n", cluster="local", run_dir="/r"),
                   event_types.CheckpointCommitted(at=2.0, step=None, path="/w/out/ckpt.pt",
                                                   step_note=why)], "j1")
    assert status is not None
    doc = status.to_json()
    assert doc["last_checkpoint_step"] is None
    assert doc["last_checkpoint"] == {"path": "/w/out/ckpt.pt", "step": None, "step_known": False,
                                      "step_unknown_because": why}
    assert format_jobs([status]).splitlines()[1].split()[-3] == "?"  # the CKPT column
    assert f"checkpoint: /w/out/ckpt.pt (step unknown: {why})" in detail_lines(status)
    assert progress_line(status).endswith("checkpoint (step unknown)")
    later = fold([event_types.Submitted(at=1.0, job="j1", name="n", cluster="local", run_dir="/r"),
                  event_types.CheckpointCommitted(at=2.0, step=None, path="/w/out/ckpt.pt",
                                                  step_note=why),
                  event_types.CheckpointCommitted(at=3.0, step=30, path="/w/out/ckpt.pt")], "j1")
    assert later is not None and later.to_json()["last_checkpoint"]["step_unknown_because"] is None


def test_a_legacy_file_whose_pickles_are_longer_than_the_first_read(tmp_path):
    import torch

    state = {f"layer{i}.weight": torch.zeros(2) for i in range(6000)}  # about 1 MB of pickle
    torch.save({"model": state, "iter_num": 77}, tmp_path / "ckpt.pt",
               _use_new_zipfile_serialization=False)
    [info] = look(tmp_path, "ckpt.pt")
    assert (info.complete, info.step) == (True, 77)
