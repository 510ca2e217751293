"""What the runtime reads from its environment (FSDP_ORCH_* and job.json) and the NCCL defaults it
sets. No process group here; test_runtime_fsdp runs the same contract under torchrun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_orch.observe.nccl_env import apply_env_defaults, nccl_env_defaults
from fsdp_orch.runtime.settings import from_env


def write_spec(path: Path, **fields) -> Path:
    data = {"name": "j", "script": "train.py", "_resolved": {"checkpoint_dir": "/ckpt/from-spec",
                                                             "job_id": "abc", "nnodes": 1}}
    data.update(fields)
    path.write_text(json.dumps(data))
    return path


def test_without_fsdp_orch_the_documented_defaults_apply():
    s = from_env({})
    assert s.fsdp.sharding_strategy == "FULL_SHARD"
    assert s.checkpoint_dir == Path("checkpoints") and s.resume == "auto"
    assert (s.attempt, s.run_dir, s.fault) == (0, None, None)
    assert not s.under_fsdp_orch


def test_job_json_options_and_env_paths_are_read_with_env_winning(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    spec = write_spec(tmp_path / "job.json", fsdp={"fsdp_sharding_strategy": 2},
                      checkpoint={"interval": 7, "resume": "never"},
                      watch={"collective_timeout": "90s"})
    s = from_env({"FSDP_ORCH_SPEC": str(spec), "FSDP_ORCH_ATTEMPT": "3",
                  "FSDP_ORCH_RUN_DIR": "~/runs/abc", "FSDP_ORCH_CHECKPOINT_DIR": "~/ckpts",
                  "FSDP_ORCH_RESUME": "auto", "FSDP_ORCH_FAULT": "hang:step=1:rank=0"})
    assert s.fsdp.sharding_strategy == "SHARD_GRAD_OP"  # accelerate's number and fsdp_ name
    assert s.checkpoint.interval == 7 and s.watch.collective_timeout == 90.0
    assert s.resume == "auto"  # the supervisor's FSDP_ORCH_RESUME beats the spec's default
    assert s.attempt == 3 and s.job_id == "abc"
    assert s.run_dir == tmp_path / "runs" / "abc"  # ~ expanded
    assert s.checkpoint_dir == tmp_path / "ckpts"
    assert s.fault == "hang:step=1:rank=0"
    assert from_env({"FSDP_ORCH_SPEC": str(spec)}).checkpoint_dir == Path("/ckpt/from-spec")


def test_bad_inputs_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="FSDP_ORCH_SPEC=.*cannot read"):
        from_env({"FSDP_ORCH_SPEC": str(tmp_path / "missing.json")})
    spec = write_spec(tmp_path / "job.json", fsdp={"sharding_strategy": "SHARD_EVERYTHING"})
    with pytest.raises(ValueError, match="sharding_strategy"):
        from_env({"FSDP_ORCH_SPEC": str(spec)})
    with pytest.raises(ValueError, match="FSDP_ORCH_ATTEMPT"):
        from_env({"FSDP_ORCH_ATTEMPT": "first"})


def test_nccl_defaults_fill_only_what_the_user_left_unset(tmp_path):
    env = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "50", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    apply_env_defaults(nccl_env_defaults(str(tmp_path)), env)
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "50" and "TORCH_FR_BUFFER_SIZE" not in env
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    prefix = str(tmp_path / "flight_recorder_rank_")
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == prefix == env["TORCH_FR_DUMP_TEMP_FILE"]
