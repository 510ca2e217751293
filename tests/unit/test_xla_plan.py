"""FSDP on XLA: what the runtime would build from the job's fsdp: options (torch_xla cannot be
installed here, so the plan is tested, not a TPU run), the refusal of PJRT_DEVICE=TPU without
torch_xla, the CPU stand-in, and XlaFullyShardedDataParallel's per-rank checkpoint state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from fsdp_orch.jobspec.fsdp_options import FsdpOptions
from fsdp_orch.runtime.dist import TorchXlaUnavailable, check_xla_world, xla_choice
from fsdp_orch.runtime.fsdp import layers_to_checkpoint, wrap_targets
from fsdp_orch.runtime.settings import from_env
from fsdp_orch.runtime.xla_fsdp import _first_tensor
from fsdp_orch.runtime.xla_plan import (
    CHECKPOINT_PER_RANK,
    CHECKPOINT_SPMD,
    FSDP_V1,
    FSDP_V2,
    plan_xla_wrap,
)
from fsdp_orch.supervise.diagnose import diagnose_text
from fsdp_orch.vocab.errors import InputError

REPO = Path(__file__).resolve().parents[2]
V1 = {"xla_fsdp_v2": False}


def plan(devices: int = 8, processes: int = 2, **fsdp):
    return plan_xla_wrap(FsdpOptions.model_validate(fsdp), devices=devices, processes=processes)


def refusal(devices: int = 8, processes: int = 2, **fsdp) -> InputError:
    with pytest.raises(InputError) as caught:
        plan(devices, processes, **fsdp)
    return caught.value


# --- which wrapper, the mesh ---------------------------------------------------------------------

def test_default_is_fsdp_v2_under_spmd_on_an_fsdp_mesh_of_every_device():
    p = plan(devices=32, processes=8)  # a v4-64 slice: 8 hosts, one process each, 32 chips
    assert (p.wrapper, p.spmd, p.process_group) == (FSDP_V2, True, "gloo")
    assert p.mesh_shape == (32, 1) and p.mesh_axis_names == ("fsdp", "tensor")
    assert p.kwargs() == {} and p.checkpoint_method == CHECKPOINT_SPMD
    assert p.auto_wrap_policy == "TRANSFORMER_BASED_WRAP" and p.min_num_params is None
    assert p.broadcast_from_process_0 and not p.grad_ckpt
    assert not plan(devices=4, processes=1).broadcast_from_process_0  # nothing to broadcast to


def test_v1_is_xla_fully_sharded_data_parallel_one_process_per_device():
    p = plan(devices=8, processes=8, **V1)
    assert (p.wrapper, p.spmd, p.process_group) == (FSDP_V1, False, "xla")
    assert p.mesh_shape is None and p.mesh_axis_names is None
    assert p.kwargs() == {"reshard_after_forward": True}  # FULL_SHARD
    assert p.checkpoint_method == CHECKPOINT_PER_RANK


def test_v1_refuses_fewer_processes_than_devices():
    error = refusal(devices=8, processes=2, **V1)
    assert error.field == "fsdp.xla_fsdp_v2"
    assert "one process per XLA device" in str(error) and "torch_xla.launch" in str(error)


# --- xla_fsdp_settings ----------------------------------------------------------------------------

def test_v1_settings_are_checked_and_translated():
    p = plan(8, 8, **V1, sharding_strategy="SHARD_GRAD_OP", xla_fsdp_settings={
        "compute_dtype": "bf16", "buffer_dtype": "float32", "shard_param_on_dim_0": True,
        "pin_layout_in_collective_ops": False, "flatten_parameters": False,
        "reduce_scatter_bucket_size_mb": 25})
    assert p.kwargs() == {"compute_dtype": "bfloat16", "buffer_dtype": "float32",
                          "shard_param_on_dim_0": True, "pin_layout_in_collective_ops": False,
                          "flatten_parameters": False, "reduce_scatter_bucket_size_mb": 25,
                          "reshard_after_forward": False}
    assert json.loads(json.dumps(p.as_dict()))["wrapper_kwargs"]  # dtypes as names: plain JSON


def test_v1_general_options_imply_settings_the_spec_did_not_write():
    assert plan(8, 8, **V1, mixed_precision="bf16").kwargs()["compute_dtype"] == "bfloat16"
    assert plan(8, 8, **V1, reshard_after_forward=False).kwargs()["reshard_after_forward"] is False
    # The setting wins over what the default strategy (FULL_SHARD) implies.
    assert plan(8, 8, **V1, xla_fsdp_settings={"reshard_after_forward": False}
                ).kwargs()["reshard_after_forward"] is False


@pytest.mark.parametrize(("fsdp", "field", "message"), [
    ({"xla_fsdp_settings": {"shard_param_on_dim0": True}}, "shard_param_on_dim0",
     "did you mean 'shard_param_on_dim_0'"),
    ({"xla_fsdp_settings": {"zero_stage": 3}}, "zero_stage",
     "unknown setting of XlaFullyShardedDataParallel"),
    ({"xla_fsdp_settings": {"flatten_parameters": "yes"}}, "flatten_parameters",
     "expected true or false"),
    ({"xla_fsdp_settings": {"compute_dtype": "bfloat8"}}, "compute_dtype", "expected a dtype name"),
    ({"xla_fsdp_settings": {"reduce_scatter_bucket_size_mb": -1}}, "reduce_scatter_bucket_size_mb",
     "expected a whole number"),
    ({"xla_fsdp_settings": {"auto_wrap_policy": "x"}}, "auto_wrap_policy", "fsdp.auto_wrap_policy"),
    ({"xla_fsdp_settings": {"sharding_groups": [[0, 1]]}}, "sharding_groups", "model parallelism"),
    ({"mixed_precision": "bf16", "xla_fsdp_settings": {"compute_dtype": "float32"}},
     "compute_dtype", "contradicts fsdp.mixed_precision"),
    ({"sharding_strategy": "SHARD_GRAD_OP", "xla_fsdp_settings": {"reshard_after_forward": True}},
     "reshard_after_forward", "contradicts fsdp.sharding_strategy"),
    ({"reshard_after_forward": True, "xla_fsdp_settings": {"reshard_after_forward": False}},
     "reshard_after_forward", "contradicts fsdp.reshard_after_forward"),
])
def test_bad_v1_settings_are_refused_naming_the_setting(fsdp, field, message):
    error = refusal(8, 8, **V1, **fsdp)
    assert error.field == f"fsdp.xla_fsdp_settings.{field}"
    assert message in str(error) and str(error).startswith(f"fsdp.xla_fsdp_settings.{field}: ")


def test_fsdp_v2_takes_no_settings_and_says_how_to_use_them():
    error = refusal(xla_fsdp_settings={"compute_dtype": "bfloat16"})
    assert error.field == "fsdp.xla_fsdp_settings.compute_dtype"
    assert "set fsdp.xla_fsdp_v2: false" in str(error)
    assert "did you mean" in str(refusal(xla_fsdp_settings={"compute_dtyp": "bfloat16"}))


@pytest.mark.parametrize(("fsdp", "field"), [
    ({"sharding_strategy": "HYBRID_SHARD"}, "fsdp.sharding_strategy"),
    ({"sharding_strategy": "NO_SHARD", **V1}, "fsdp.sharding_strategy"),
    ({"sharding_strategy": "SHARD_GRAD_OP"}, "fsdp.sharding_strategy"),  # v2 only shards fully
    ({"reshard_after_forward": False}, "fsdp.reshard_after_forward"),
    ({"offload_params": True}, "fsdp.offload_params"),
])
def test_options_xla_cannot_honour_are_refused(fsdp, field):
    assert refusal(8, 8, **fsdp).field == field


def test_options_xla_ignores_are_noted():
    notes = " ".join(plan(mixed_precision="bf16", forward_prefetch=True,
                          state_dict_type="FULL_STATE_DICT").notes)
    assert "torch.autocast('xla', dtype=torch.bfloat16)" in notes
    assert "forward_prefetch" in notes and "FULL_STATE_DICT" in notes and "shard_batch" in notes


# --- wrapping and gradient checkpointing ----------------------------------------------------------

class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Linear(8, 8)

    def forward(self, x):
        return self.mlp(self.attn(x))


class TinyModel(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_grad_ckpt_checkpoints_each_layer_that_is_wrapped():
    options = FsdpOptions(xla_fsdp_grad_ckpt=True)
    assert plan(**options.model_dump()).grad_ckpt
    model = TinyModel()
    targets = wrap_targets(model, options)
    assert targets == ["blocks.0", "blocks.1"]
    assert layers_to_checkpoint(model, ["Block"], targets) == ["blocks.0", "blocks.1"]
    # Without layer classes: the outermost wrapped modules (no checkpoint inside a checkpoint).
    assert layers_to_checkpoint(model, [], ["blocks.0.attn", "blocks.0", "embed"]) == [
        "blocks.0", "embed"]


def test_activation_checkpointing_means_grad_ckpt_on_xla():
    p = plan(activation_checkpointing=True)
    assert p.grad_ckpt and any("checkpoint_module" in note for note in p.notes)


def test_size_based_wrap_carries_its_threshold():
    p = plan(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=1000, **V1, devices=4, processes=4)
    assert (p.auto_wrap_policy, p.min_num_params) == ("SIZE_BASED_WRAP", 1000)


def test_fsdp_v2_shards_the_output_tensor_with_a_batch_dimension():
    logits, loss = torch.zeros(2, 3), torch.tensor(1.0)
    assert _first_tensor(logits) is logits
    assert _first_tensor((loss, logits)) is logits  # a 0-dim loss has no batch to shard
    assert _first_tensor({"loss": loss, "logits": logits, "hidden": torch.zeros(2)}) is logits
    assert _first_tensor(None) is None and _first_tensor(loss) is None


# --- from the spec to the runtime ---------------------------------------------------------------

def test_the_spec_fsdp_block_reaches_the_plan(tmp_path: Path):
    written = FsdpOptions.model_validate({"fsdp_xla_fsdp_v2": False, "xla_fsdp_grad_ckpt": True,
                                          "xla_fsdp_settings": {"compute_dtype": "bfloat16",
                                                                "reshard_after_forward": False}})
    spec = tmp_path / "job.json"  # as fsdp_orch.launch.plan.spec_json writes it: every field
    spec.write_text(json.dumps({"name": "t", "script": "train.py",
                                "fsdp": written.model_dump(mode="json")}))
    options = from_env({"FSDP_ORCH_SPEC": str(spec)}).fsdp
    p = plan_xla_wrap(options, devices=4, processes=4)
    assert p.wrapper == FSDP_V1 and p.grad_ckpt
    assert p.kwargs() == {"compute_dtype": "bfloat16", "reshard_after_forward": False}
    assert FsdpOptions().xla_fsdp_v2 is True
    with pytest.raises(ValueError, match="xla_fsdp_v2"):
        FsdpOptions.model_validate({"xla_fsdp_v2": "maybe"})


# --- dist: PJRT_DEVICE --------------------------------------------------------------------------

@pytest.mark.parametrize(("pjrt", "installed", "choice"), [
    (None, False, "torch"), ("", True, "torch"),
    ("TPU", True, "xla"), ("TPU", False, "missing"), ("CUDA", False, "missing"),
    ("CPU", False, "torch"),  # the CPU stand-in for a TPU VM: the gloo path
    ("cpu", True, "xla"),  # torch_xla on CPU, asked for
])
def test_where_a_process_runs(pjrt, installed, choice):
    assert xla_choice(pjrt, installed) == choice


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FSDP_ORCH_", "PJRT_", "RANK", "WORLD_SIZE", "LOCAL_",
                                  "MASTER_"))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**clean, **env},
                          capture_output=True, text=True, timeout=180, cwd=REPO)


def test_tpu_without_torch_xla_fails_with_one_clear_error_that_is_not_retried():
    proc = run_python("from fsdp_orch import runtime\nruntime.setup()\n", PJRT_DEVICE="TPU")
    assert proc.returncode == 1, proc.stderr
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        f"fsdp_orch.runtime.dist.TorchXlaUnavailable: PJRT_DEVICE=TPU but torch_xla is not "
        f"installed in {sys.executable}; install the torch_xla built for torch {version} "
        f"(pip install 'torch_xla[tpu]=={version}.*')")
    diagnosis = diagnose_text(proc.stderr)
    assert (diagnosis.category, diagnosis.retryable) == ("user_code_error", False)


def test_cpu_stand_in_without_torch_xla_runs_the_gloo_path():
    proc = run_python("""
        from fsdp_orch import runtime
        job = runtime.setup()
        print(job.info.backend, job.info.device, job.info.xla_spmd, job.world_size)
        job.finish()
        """, PJRT_DEVICE="CPU")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["gloo", "cpu", "False", "1"]


def test_importing_the_runtime_does_not_import_torch_xla(tmp_path: Path):
    # A torch_xla that fails when imported: only find_spec may look at it.
    (tmp_path / "torch_xla").mkdir()
    (tmp_path / "torch_xla" / "__init__.py").write_text(
        "raise RuntimeError('torch_xla imported')\n")
    proc = run_python("""
        import sys
        import fsdp_orch.runtime.dist, fsdp_orch.runtime.fsdp, fsdp_orch.runtime.checkpoint
        import fsdp_orch.runtime.job, fsdp_orch.runtime.xla_fsdp
        from fsdp_orch import runtime
        runtime.Job, runtime.Checkpointer, runtime.ShardPlan
        assert "torch_xla" not in sys.modules
        """, PYTHONPATH=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    proc = run_python("""
        import sys
        import fsdp_orch.runtime.xla_plan
        assert "torch" not in sys.modules, "xla_plan must stay torch-free"
        """)
    assert proc.returncode == 0, proc.stderr


# --- XlaFullyShardedDataParallel's checkpoint state, on CPU ---------------------------------------

PER_RANK_ROUND_TRIP = """
import sys
from pathlib import Path
import torch, torch.distributed as dist
from torch import nn
from fsdp_orch.checkpoints.folders import list_checkpoints
from fsdp_orch.runtime.checkpoint import Checkpointer
from fsdp_orch.runtime.dist import DistInfo
from fsdp_orch.runtime.xla_fsdp import PerRankState

class Shard(nn.Linear):  # stands for a wrapped module: its state is this rank's shard
    def get_shard_metadata(self):
        return {"shard_info": {"weight": {"_orig_size": torch.Size([8, 4])}}, "flatten_info": {}}

def trained(seed):
    torch.manual_seed(seed)
    model = Shard(4, 4)
    optim = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optim.step()
    return model, optim

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
info = DistInfo(rank=0, world_size=1, local_rank=0, local_world_size=1,
                device=torch.device("cpu"), backend="xla")
directory = Path(sys.argv[1])
model, optim = trained(0)
ckpt = Checkpointer(model, optim, directory=directory, info=info,
                    sharded_state=PerRankState(model, optim, 0, 1))
ckpt.save(3)
[found] = list_checkpoints(directory)
assert (found.step, found.layout, found.complete) == (3, "dcp", True), found

other, other_optim = trained(1)
restored = Checkpointer(other, other_optim, directory=directory, info=info,
                        sharded_state=PerRankState(other, other_optim, 0, 1))
assert restored.restore() == 3
assert torch.equal(other.weight, model.weight) and torch.equal(other.bias, model.bias)
saved, loaded = optim.state_dict()["state"][0], other_optim.state_dict()["state"][0]
assert all(torch.equal(saved[k], loaded[k]) for k in saved)

elsewhere = Checkpointer(other, other_optim, directory=directory, info=info,
                         sharded_state=PerRankState(other, other_optim, 0, 2))
try:
    elsewhere.restore()
except Exception as exc:
    print(exc)
dist.destroy_process_group()
"""


def test_per_rank_state_saves_a_complete_checkpoint_and_restores_it(tmp_path: Path):
    proc = run_python(PER_RANK_ROUND_TRIP.replace("sys.argv[1]", repr(str(tmp_path / "ckpt"))))
    assert proc.returncode == 0, proc.stderr
    # Another world size: refused, naming the key that rank would need.
    assert "no checkpoint could be loaded" in proc.stdout
    assert "xla_fsdp_rank_0_of_2" in proc.stderr


def test_more_processes_than_the_pjrt_world_is_refused_not_trained_alone():
    # PJRT's CPU client: two processes under torchrun each saw a world of one (torch_xla 2.9.0)
    with pytest.raises(TorchXlaUnavailable, match=r"2 processes were started .* a world of 1: each "
                                                  r"process would train alone"):
        check_xla_world("2", 1, "CPU")
    check_xla_world("4", 4, "TPU")  # a TPU slice's PJRT world spans its workers
    check_xla_world(None, 1, "CPU")  # the xla or python launcher: no WORLD_SIZE, one process
