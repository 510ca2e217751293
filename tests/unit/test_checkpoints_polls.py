"""The supervisor's polls of a job's checkpoints (fsdp_orch.checkpoints.polls): a checkpoint.file
counts once its size held since the previous poll, and a file whose step nothing tells gets a new
mark (-N for the Nth save seen) with each save, the same one while it is not saved again."""

from __future__ import annotations

import pickle
from pathlib import Path

from fsdp_orch.checkpoints.polls import PolledCheckpoints
from fsdp_orch.checkpoints.single_file import FileLayout
from fsdp_orch.checkpoints.source import FileSource, source_of
from fsdp_orch.checkpoints.storage import LOCAL


def save(path: Path, iter_num: int, padding: int = 0) -> None:
    path.write_bytes(pickle.dumps({"iter_num": iter_num, "pad": [0] * padding}, protocol=2))


def test_a_file_counts_once_its_size_held_since_the_previous_poll(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    save(path, 10)
    polled = PolledCheckpoints(lambda: FileSource(FileLayout(str(path), "iter_num"), str(tmp_path),
                                                  LOCAL))
    assert polled.latest().step == 10  # the first poll: one look as both
    save(path, 20, padding=100)  # rewritten between two polls
    assert polled.latest() is None
    assert polled.latest().step == 20  # held still since


def test_saves_of_a_file_of_unknown_step_get_a_new_mark_each(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    save(path, 1)
    polled = PolledCheckpoints(lambda: FileSource(FileLayout(str(path)), str(tmp_path), LOCAL))
    first = polled.latest()
    assert first is not None and not first.step_known
    assert polled.mark(first) == -1
    assert polled.mark(polled.latest()) == -1  # the same save
    save(path, 2, padding=10)
    polled.latest()  # the size changed: not complete yet
    assert polled.mark(polled.latest()) == -2
    assert polled.mark(None) is None


def test_a_folder_is_polled_without_a_size_look(tmp_path: Path) -> None:
    step = tmp_path / "step-7"
    step.mkdir()
    (step / ".metadata").write_bytes(b"pickled metadata")
    source = source_of(str(tmp_path), None, LOCAL)
    assert source.sizes() == {}
    polled = PolledCheckpoints(lambda: source)
    info = polled.latest()
    assert info is not None and polled.mark(info) == 7
