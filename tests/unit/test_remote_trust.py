"""``places.remote_trust``: the StrictModes rule as the shell on an SSH host runs it (here, with
``sh``, on this machine's folders)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fsdp_orch.places.remote_trust import REFUSED_EXIT, check_command, make_and_check_command


def run(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)


def test_a_folder_of_yours_passes_and_one_others_can_write_is_refused(tmp_path: Path) -> None:
    mine, open_ = tmp_path / "mine", tmp_path / "open"
    mine.mkdir(mode=0o700)
    open_.mkdir()
    open_.chmod(0o777)
    assert run(check_command(str(mine), "run folder")).returncode == 0
    refused = run(check_command(str(open_ / "runs" / "x"), "run folder"))
    assert refused.returncode == REFUSED_EXIT
    assert refused.stderr.startswith(f"refused run folder {open_}/runs/x on ")
    assert f"{open_} can be written by others (owner uid 0 (root), mode 0777)" in refused.stderr


def test_a_sticky_scratch_passes_above_a_folder_made_there(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    made = run(make_and_check_command(str(scratch / "work" / "runs" / "abc"), "run folder"))
    assert made.returncode == 0, made.stderr
    assert (scratch / "work" / "runs" / "abc").stat().st_mode & 0o777 == 0o700
    # the sticky folder itself is no place for the run folder: others can add to it
    assert run(check_command(str(scratch), "run folder")).returncode == REFUSED_EXIT
