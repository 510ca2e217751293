"""The pure rules behind issue 67's smaller notices: a script's use of fsdp_orch.runtime read from
its source, the fault kinds it can meet, a Trainer's own --fsdp on CPU, the umask setting."""

from __future__ import annotations

import pytest

from fsdp_orch.bootstrap.user_umask import parse_umask, umask_text
from fsdp_orch.control.entry_checks import EntrySource, imports_runtime, unmet_fault
from fsdp_orch.launch.start_choices import trainer_fsdp_flag


def test_what_counts_as_importing_the_runtime():
    assert imports_runtime("from fsdp_orch import runtime\n")
    assert imports_runtime("from fsdp_orch import checkpoints, runtime as rt\n")
    assert imports_runtime("    import fsdp_orch.runtime.job\n")
    assert not imports_runtime("from transformers import Trainer\nimport fsdp_orchestra\n")
    assert not imports_runtime("from fsdp_orch.checkpoints.folders import latest_complete\n")


def test_only_a_runtime_only_kind_in_a_script_without_the_runtime_is_unmet():
    plain, ours = EntrySource("train.py", False), EntrySource("train.py", True)
    crash = {"FSDP_ORCH_FAULT": "hang:step=3:rank=1;checkpoint_crash:step=5:rank=0"}
    assert "checkpoint_crash happens inside a checkpoint save" in (unmet_fault(crash, plain) or "")
    assert unmet_fault(crash, ours) is None and unmet_fault(crash, None) is None
    assert unmet_fault({"FSDP_ORCH_FAULT": "hang:step=3:rank=1"}, plain) is None
    assert unmet_fault({}, plain) is None


@pytest.mark.parametrize(("args", "flag"), [
    (["--fsdp", "full_shard auto_wrap"], "--fsdp"), (["--fsdp_config=f.json"], "--fsdp_config"),
    (["--output_dir", "out", "--fsdp-config", "f.json"], "--fsdp-config"),
    (["--fsdp_min_num_params", "1"], None), (["--tag", "--fsdp-ish"], None)])
def test_a_trainers_fsdp_flags_are_found_in_the_args(args, flag):
    assert trainer_fsdp_flag(args) == flag


def test_umask_text():
    assert [parse_umask(t) for t in ("022", "0027", "77", "0", " 002 ")] == [0o22, 0o27, 0o77, 0, 2]
    assert [parse_umask(t) for t in ("0999", "1022", "abc", "", "00022")] == [None] * 5
    assert umask_text(0o22) == "0022"
