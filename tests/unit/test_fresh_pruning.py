"""``submit --fresh`` keeps a bounded number of earlier runs in ``.fsdp-orch-previous`` (issue 62:
158 MB after six runs of a tiny model, never pruned): which entries go (pure), and that only what
fsdp-orch moved there is ever deleted."""

from __future__ import annotations

import os
from pathlib import Path

from fsdp_orch.control.resubmit import prune_previous, pruned_said, to_prune

A, B, C, NEW = "a" * 12, "b" * 12, "c" * 12, "0123456789ab"
CREATED = {A: 100.0, B: 200.0, C: 300.0, NEW: 400.0}


def names(*jobs: str) -> list[str]:
    return [f"{n}.{j}" for j in jobs for n in ("step-00000005", "step-00000010")]


def test_the_oldest_runs_beyond_keep_go() -> None:
    assert to_prune(names(A, B, C, NEW), CREATED, 1, NEW) == names(C, B, A)
    assert to_prune(names(A, B, C, NEW), CREATED, 2, NEW) == names(B, A)
    assert to_prune(names(A, B, C, NEW), CREATED, 9, NEW) == []


def test_the_run_just_moved_is_always_kept() -> None:
    # even where the clock says it is not the newest, and whatever keep says
    created = {**CREATED, NEW: 1.0}
    assert to_prune(names(A, NEW), created, 1, NEW) == names(A)
    assert to_prune(names(A, NEW), CREATED, 0, NEW) == names(A)


def test_what_fsdp_orch_did_not_put_there_is_never_touched() -> None:
    strangers = ["mine", "notes.txt", f"step-1.{'d' * 12}",  # a job id no job of the index has
                 "step-1.abc", "step-1.AAAAAAAAAAAA"]
    assert to_prune([*strangers, *names(A, NEW)], CREATED, 1, NEW) == names(A)


def test_a_name_taken_twice_belongs_to_its_run() -> None:
    assert to_prune([f"step-5.{A}", f"step-5.{A}-1", f"step-5.{NEW}"], CREATED, 1, NEW) == [
        f"step-5.{A}", f"step-5.{A}-1"]


def test_prune_deletes_folders_and_files_never_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.bin").write_bytes(b"x")
    previous = tmp_path / ".fsdp-orch-previous"
    (previous / f"step-5.{A}").mkdir(parents=True)
    (previous / f"step-5.{A}" / "model.bin").write_bytes(b"w")
    (previous / f"ckpt.pt.{A}").write_bytes(b"w")
    os.symlink(outside, previous / f"step-9.{A}")
    (previous / f"step-5.{NEW}").mkdir()
    deleted = prune_previous(str(previous), CREATED, 1, NEW)
    assert sorted(deleted) == sorted([str(previous / f"ckpt.pt.{A}"),
                                      str(previous / f"step-5.{A}")])
    assert sorted(p.name for p in previous.iterdir()) == [f"step-5.{NEW}", f"step-9.{A}"]
    assert (outside / "keep.bin").read_bytes() == b"x"
    assert prune_previous(str(tmp_path / "none"), CREATED, 1, NEW) == []


def test_what_was_deleted_is_said() -> None:
    line = pruned_said(["/ck/.fsdp-orch-previous/step-5.x"], 1)
    assert "checkpoint.keep_previous=1" in line and "/ck/.fsdp-orch-previous/step-5.x" in line
