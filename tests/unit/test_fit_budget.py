"""``fsdp-orch fit``'s pure parts: memory sizes as users write them, how a job's FSDP options become
the ranks' mesh, and how one rank's tracked peak becomes each GPU's budget, with every part fake
tensors cannot see added as a stated model."""

from __future__ import annotations

import pytest

from fsdp_orch.fit.adapters_math import quant_state_bytes
from fsdp_orch.fit.budget import (
    ALLOCATOR_SLACK,
    CUDA_CONTEXT_GIB,
    GIB,
    MEASURED_ERROR,
    NCCL_GIB,
    PAGED,
    as_json,
    budget,
)
from fsdp_orch.fit.setup import fit_setup, unmodelled
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.jobspec.sizes import parse_size
from fsdp_orch.vocab.errors import InputError


@pytest.mark.parametrize("given,expected", [
    ("80GB", 80 << 30), ("24 GiB", 24 << 30), ("512MB", 512 << 20), ("1.5g", 3 << 29),
    (1024, 1024)])
def test_sizes_are_read_as_gpu_vendors_and_schedulers_count_them(given, expected) -> None:
    assert parse_size(given) == expected


@pytest.mark.parametrize("given", [
    "80 parsecs", "", "-1GB", 0, True, "GB",
    "9" * 400, "0.5", 0.5, "\u0669\u0664\u0666\u0664", "2048PB", 10**20, float("inf")])
def test_a_size_that_is_not_one_says_what_was_expected(given) -> None:
    with pytest.raises(ValueError, match="expected a memory size like 80GB"):
        parse_size(given)


def job(strategy: str = "FULL_SHARD", **fsdp: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "script": "t.py", "nodes": 2,
                                   "fsdp": {"sharding_strategy": strategy, **fsdp},
                                   "fit": {"model": "config.json"}})


@pytest.mark.parametrize("strategy,mesh,reshard", [
    ("FULL_SHARD", (16,), True), ("SHARD_GRAD_OP", (16,), False), ("NO_SHARD", (16, 1), False),
    ("HYBRID_SHARD", (2, 8), True), ("HYBRID_SHARD_ZERO2", (2, 8), False)])
def test_each_strategy_shards_over_the_ranks_fsdp_would(strategy, mesh, reshard) -> None:
    setup = fit_setup(job(strategy), 8, "job.yaml")
    assert setup.world_size == 16
    assert setup.mesh_shape == mesh and setup.reshard_after_forward is reshard


def test_a_job_without_a_fit_block_names_the_field() -> None:
    plain = JobSpec.model_validate({"name": "j", "script": "t.py"})
    with pytest.raises(InputError) as caught:
        fit_setup(plain, 1, "job.yaml")
    assert caught.value.field == "fit" and caught.value.file == "job.yaml"
    assert "fit: {model: PATH}" in str(caught.value)


PEAK = {"sharded_param": 10 * GIB, "unsharded_param": 2 * GIB, "buffer": 0,
        "sharded_grad": 1 * GIB, "unsharded_grad": 0, "act": 20 * GIB, "inp": 0,
        "all_gather": 2 * GIB, "reduce_scatter": 1 * GIB, "opt": 2 * GIB, "temp": 3 * GIB,
        "total": 41 * GIB}


def test_the_budget_is_the_tracked_peak_by_row_plus_each_stated_model() -> None:
    b = budget({k: int(v) for k, v in PEAK.items()}, offload=False, procs_per_node=8,
               process_groups=1, gpu_memory=80 << 30)
    assert b.rows == {"parameters": 12, "gradients": 1, "optimizer state": 2, "activations": 20,
                      "communication buffers": 3, "temporary": 3}
    slack = 41 * ALLOCATOR_SLACK
    assert b.peak_gib == pytest.approx(41 + CUDA_CONTEXT_GIB + NCCL_GIB + slack)
    assert b.fits and b.verdict == f"fits: {b.peak_gib / 80:.0%} of 80.0 GiB"
    assert as_json(b)["peak_gib_per_gpu"] == round(b.peak_gib, 2)
    assert b.cpu_ram_gib_per_node is None


def test_offloaded_shards_leave_the_gpu_for_the_nodes_ram() -> None:
    b = budget({k: int(v) for k, v in PEAK.items()}, offload=True, procs_per_node=8,
               process_groups=2, gpu_memory=24 << 30)
    assert b.rows["parameters"] == 2 and b.rows["gradients"] == 0
    assert b.rows["optimizer state"] == 0
    assert b.cpu_ram_gib_per_node == pytest.approx((10 + 1 + 2) * 8)
    assert b.other["NCCL buffers"] == 2 * NCCL_GIB  # HSDP: two process groups


def test_a_peak_past_the_gpu_does_not_fit_and_none_is_said_without_its_size() -> None:
    over = budget({"act": int(90 * GIB)}, offload=False, procs_per_node=1, process_groups=1,
                  gpu_memory=80 << 30)
    assert over.fits is False and over.refused and over.verdict.startswith("does not fit: ")
    unknown = budget({"act": int(GIB)}, offload=False, procs_per_node=1, process_groups=1)
    assert unknown.fits is None and "gpu_memory" in unknown.verdict


def test_nf4_constants_are_a_byte_a_block_of_64_with_nested_quantization() -> None:
    weights = 64 * 256 * 1000
    assert quant_state_bytes(weights, double_quant=True) == 256 * 1000 + 1000 * 4
    assert quant_state_bytes(weights, double_quant=False) == 256 * 1000 * 4


def test_each_statistic_holds_the_one_below_it_and_the_verdict_holds_the_process() -> None:
    """max_memory_allocated: the tracked tensors; reserved: and the allocator's slack; the
    process (what nvidia-smi shows, and what must fit): and the CUDA context and NCCL."""
    b = budget({k: int(v) for k, v in PEAK.items()}, offload=False, procs_per_node=8,
               process_groups=1, quant_state_bytes=GIB, gpu_memory=80 << 30)
    assert b.allocated_gib == pytest.approx(41 + 1)  # the nf4 constants are tensors too
    assert b.reserved_gib == pytest.approx(42 * (1 + ALLOCATOR_SLACK))
    assert b.peak_gib == pytest.approx(b.reserved_gib + CUDA_CONTEXT_GIB + NCCL_GIB)
    said = as_json(b)
    assert said["max_memory_allocated_gib"] == round(b.allocated_gib, 2)
    assert said["max_memory_reserved_gib"] == round(b.reserved_gib, 2)


@pytest.mark.parametrize("peak_gib,fits,refused,says", [
    (20.0, True, False, "fits: "),
    (25.0, False, False, "may not fit: "),  # 104%: within the estimate's measured error
    (24 * (1 + MEASURED_ERROR) + 0.5, False, True, "does not fit: ")])
def test_only_a_peak_past_the_estimates_measured_error_is_refused(peak_gib, fits, refused,
                                                                   says) -> None:
    stated = CUDA_CONTEXT_GIB + NCCL_GIB
    tracked = (peak_gib - stated) / (1 + ALLOCATOR_SLACK)
    b = budget({"act": int(tracked * GIB)}, offload=False, procs_per_node=1, process_groups=1,
               gpu_memory=24 << 30)
    assert b.peak_gib == pytest.approx(peak_gib, abs=1e-6)
    assert (b.fits, b.refused) == (fits, refused) and b.verdict.startswith(says), b.verdict
    if not refused and not fits:
        assert f"measured error ({MEASURED_ERROR:.0%}): not refused" in b.verdict


def test_optimizer_offload_moves_only_the_state_and_a_paged_state_leaves_the_allocator() -> None:
    peak = {k: int(v) for k, v in PEAK.items()}
    moved = budget(peak, offload=False, procs_per_node=8, process_groups=1,
                   optimizer_offload=True)
    assert moved.rows["optimizer state"] == 0 and moved.rows["parameters"] == 12
    assert moved.cpu_ram_gib_per_node == pytest.approx(2 * 8)
    assert moved.offloaded == "optimizer state"
    paged = budget(peak, offload=False, procs_per_node=8, process_groups=1,
                   paged_optimizer=True)
    assert paged.rows["optimizer state"] == 0 and paged.allocated_gib == pytest.approx(39)
    assert paged.other[PAGED] == pytest.approx(2)  # in the process, outside the allocator
    assert paged.peak_gib == pytest.approx(paged.reserved_gib + CUDA_CONTEXT_GIB + NCCL_GIB + 2)


def test_a_knob_the_estimate_does_not_model_is_named_with_what_was_measured() -> None:
    compiled = JobSpec.model_validate({"name": "j", "script": "t.py",
                                       "fsdp": {"forward_prefetch": True},
                                       "fit": {"model": "config.json", "compile": True}})
    said = unmodelled(fit_setup(compiled, 8, "job.yaml"), compiled)
    assert any("fit.compile" in line and "eager" in line for line in said)
    assert any("fsdp.forward_prefetch" in line and "FSDP2" in line for line in said)
    fsdp1 = job(version=1, forward_prefetch=True)
    assert unmodelled(fit_setup(fsdp1, 8, "job.yaml"), fsdp1) == []  # FSDP1 runs it


def test_a_batch_or_sequence_length_the_jobs_args_give_otherwise_is_named() -> None:
    """The estimate is for the fit block's batch_size and seq_len; where the job's args give the
    script others by a common flag, fit says which it measured. The args also key the cache for a
    factory (which may read them), not for a Hugging Face config (which cannot)."""
    from fsdp_orch.fit.setup import args_disagree

    def setup_of(args: list[str], model: str = "train:model_for_fit"):  # type: ignore[no-untyped-def]
        spec = JobSpec.model_validate({"name": "j", "script": "train.py", "args": args,
                                       "fit": {"model": model, "batch_size": 8, "seq_len": 64}})
        return fit_setup(spec, 1, "job.yaml")

    said = args_disagree(setup_of(["--steps", "9", "--seq-len", "512", "--batch-size=8"]))
    assert said == ["fit.seq_len is 64, and the job's args give --seq-len 512: measured at 64 "
                    "(set fit.seq_len: 512 to measure what the ranks run)"]
    assert args_disagree(setup_of(["--per_device_train_batch_size", "2", "--max_seq_length", "64"])
                         ) == ["fit.batch_size is 8, and the job's args give "
                               "--per_device_train_batch_size 2: measured at 8 (set "
                               "fit.batch_size: 2 to measure what the ranks run)"]
    assert args_disagree(setup_of(["--seq-len", "64", "--batch-size"])) == []
    assert setup_of(["--dim", "1"]).key() != setup_of(["--dim", "2"]).key()
    assert setup_of(["--dim", "1"], "config.json").key() == setup_of(["--dim", "2"],
                                                                     "config.json").key()
