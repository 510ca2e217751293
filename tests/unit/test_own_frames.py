"""fsdp-orch's own frames are never the user's frame, wherever that copy of fsdp-orch lives: a
``module:`` job started from the warm standby, whose ranks ran fsdp-orch from another folder than
the supervisor's (an SSH host's copy in the run folder, another checkout or environment on the
nodes). The dump is real: ``tests/fixtures/stacks/pyspy-standby-module-own-copy.txt`` (README)."""

from __future__ import annotations

from pathlib import Path

from fsdp_orch.observe.stack_parse import parse_pyspy_dump
from fsdp_orch.observe.user_frame import (
    describe_stuck,
    display_path,
    innermost_user_frame,
    is_library_file,
    is_own_file,
)

DUMP = Path(__file__).resolve().parents[1] / "fixtures" / "stacks" / (
    "pyspy-standby-module-own-copy.txt")
STDLIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"
SITE = "/work/main/.venv/lib/python3.11/site-packages"
# The supervisor's own fsdp_orch: not the copy the ranks ran (/tmp/w5/copy/fsdp_orch)
ROOTS = (STDLIB, SITE, "/work/main/fsdp_orch")


def test_a_module_job_from_the_standby_names_the_users_module_not_the_bootstrap():
    threads = parse_pyspy_dump(DUMP.read_text())
    frame = innermost_user_frame(threads, ROOTS)
    assert frame is not None and frame.file == "/tmp/w5/mod/pkg/train.py" and frame.line == 139
    line = describe_stuck(1, threads, ROOTS)
    assert line.startswith("rank 1 stuck at train.py:139 in main (innermost: "
                           "FaultInjector._fire at .../bootstrap/faults.py:192"), line


def test_the_keeper_and_runpy_are_never_the_users_frame():
    """The user's package installed (its frames library code too): nothing of the user's is left,
    and the keeper that ran it is not named in its place."""
    threads = parse_pyspy_dump(DUMP.read_text())
    assert innermost_user_frame(threads, (*ROOTS, "/tmp/w5/mod")) is None
    line = describe_stuck(1, threads, (*ROOTS, "/tmp/w5/mod"))
    assert "keeper.py" not in line and "no frame of user code" in line, line


def test_own_files_are_told_by_their_place_in_the_package():
    for own in ("/tmp/w5/copy/fsdp_orch/standby/keeper.py",
                "/scratch/runs/ab12/lib/fsdp_orch/bootstrap/agent.py",
                "/home/u/fsdp-orch/fsdp_orch/runtime/job.py",
                "/home/u/fsdp-orch/fsdp_orch/__main__.py"):
        assert is_own_file(own) and is_library_file(own, ()), own
    for user in ("/home/u/fsdp_orch/train.py", "/home/u/fsdp_orch_extra/standby/keeper.py",
                 "/home/u/proj/standby/keeper.py", "fsdp_orch", "train.py"):
        assert not is_own_file(user), user
    assert display_path("/tmp/w5/copy/fsdp_orch/standby/keeper.py", ROOTS) == (
        ".../standby/keeper.py")
