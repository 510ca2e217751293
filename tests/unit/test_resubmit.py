"""A new submission over a checkpoint folder that already holds a complete checkpoint (pure parts):
which job wrote it, and the refusal to silently continue a job that ended SUCCEEDED."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_orch.checkpoints.aside import PREVIOUS_DIR
from fsdp_orch.control.resubmit import (
    Existing,
    decide,
    existing_checkpoint,
    said,
    start_fresh,
    writer_of,
)
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.errors import InputError


def job(job_id: str, checkpoint_dir: str, created: float, state: str = "SUCCEEDED",
        step: int | None = 20) -> JobStatus:
    return JobStatus(job_id, f"name-{job_id}", "local", "local", f"/runs/{job_id}", created,
                     state=state,
                     last_checkpoint_step=step,
                     spec_json=json.dumps({"_resolved": {"checkpoint_dir": checkpoint_dir}}))


def test_the_writer_is_the_newest_job_that_recorded_a_checkpoint_there() -> None:
    jobs = [job("a", "/ck", 1), job("b", "/ck", 2), job("c", "/ck", 3, state="FAILED", step=None),
            job("d", "/other", 4)]
    assert writer_of("/ck", jobs).id == "b"  # c used the folder but never recorded a checkpoint
    assert writer_of("/ck", jobs[2:3]).id == "c"
    assert writer_of("/nowhere", jobs) is None
    # the checkpoint found: only a job that recorded it wrote it (issue 42: a planted step-400 was
    # said to be "written by job b", which never reached step 400)
    assert writer_of("/ck", jobs, step=20).id == "b"
    assert writer_of("/ck", jobs, step=400, path="/ck/step-00000400") is None


def test_a_succeeded_writer_is_refused_without_a_choice_naming_both_flags() -> None:
    existing = Existing("/ck/step-00000020", 20, job("a", "/ck", 1))
    with pytest.raises(InputError) as raised:
        decide(existing, None, "--resume/--fresh")
    message = str(raised.value)
    assert ("--resume" in message and "--fresh" in message and "job a" in message
            and "step 20" in message)
    assert decide(existing, "resume", "f") == "resume" and decide(existing, "fresh", "f") == "fresh"


def test_other_writers_are_resumed_and_said() -> None:
    failed = Existing("/ck/step-00000010", 10, job("a", "/ck", 1, state="FAILED"))
    assert decide(failed, None, "f") == "resume"
    assert said(failed, "resume") == (
        "resuming from /ck/step-00000010 (step 10, written by job a (name-a, FAILED))")
    unknown = Existing("/ck/last.ckpt", None, None)
    assert decide(unknown, None, "f") == "resume"
    assert ("step unknown" in said(unknown, "resume")
            and "not written by a job fsdp-orch knows" in said(unknown, "resume"))
    assert decide(None, None, "f") is None


def test_fresh_moves_every_checkpoint_aside_and_keeps_it(tmp_path: Path) -> None:
    for step in (10, 20):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"w" * step)
        (folder / "trainer_state.json").write_text("{}")
    found = existing_checkpoint(str(tmp_path), [])
    assert found is not None and found.step == 20
    moved_to = start_fresh(str(tmp_path), "newjob")
    assert moved_to == str(tmp_path / PREVIOUS_DIR)
    assert sorted(p.name for p in (tmp_path / PREVIOUS_DIR).iterdir()) == [
        "checkpoint-10.newjob", "checkpoint-20.newjob"]
    assert ((tmp_path / PREVIOUS_DIR / "checkpoint-20.newjob" / "model.safetensors").read_bytes()
            == b"w" * 20)
    assert existing_checkpoint(str(tmp_path), []) is None  # the new job starts over


def test_a_checkpoint_file_is_found_said_and_moved_by_fresh(tmp_path: Path) -> None:
    import pickle

    from fsdp_orch.checkpoints.single_file import FileLayout

    out = tmp_path / "out"
    out.mkdir()
    data = pickle.dumps({"iter_num": 300, "model": [0.5] * 10}, protocol=2)
    (out / "ckpt.pt").write_bytes(data)
    layout = FileLayout(str(out / "ckpt.pt"), "iter_num")
    assert existing_checkpoint(str(out), []) is None  # no folder layout reads it
    writer = job("a", str(out), 1, step=None)
    # a file of unknown step still makes a writer
    writer.last_checkpoint_path = str(out / "ckpt.pt")
    found = existing_checkpoint(str(out), [writer], layout)
    assert (found is not None
            and (found.path, found.step, found.writer.id) == (str(out / "ckpt.pt"), 300, "a"))
    start_fresh(str(out), "newjob", layout)
    assert (out / PREVIOUS_DIR / "ckpt.pt.newjob").read_bytes() == data
    assert existing_checkpoint(str(out), [], layout) is None
