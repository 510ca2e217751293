"""``fit``'s heading as a reader of a small model on a CPU profile reads it (issue 62): not "0.00 B
parameters", not GPUs where there are none, and no "twice the nodes" offered as if local had two."""

from __future__ import annotations

from types import SimpleNamespace

from fsdp_orch.cli.fit_report import count, heading


def found(params: int, trainable: int, procs: int = 2) -> SimpleNamespace:
    setup = SimpleNamespace(nodes=1, procs_per_node=procs, world_size=procs,
                            strategy="FULL_SHARD", mixed_precision="no",
                            activation_checkpointing=False, offload_params=False,
                            checkpointing="none", fsdp_version=2,
                            fit=SimpleNamespace(lora=None, model="train:model_for_fit",
                                                batch_size=8, seq_len=64, optimizer="adamw"))
    return SimpleNamespace(setup=setup, cached=True,
                           measured={"params": params, "trainable": trainable, "seconds": 1.0})


def test_a_small_models_parameters_are_counted_in_its_own_unit() -> None:
    assert [count(n) for n in (640, 52_300, 7_000_000, 1_240_000_000)] == [
        "640", "52.3 K", "7.0 M", "1.24 B"]
    lines = heading("job.yaml", "local", found(212_000, 212_000), "cpu")  # type: ignore[arg-type]
    assert "212.0 K parameters, 212.0 K trainable" in lines[1], lines
    assert "0.00 B" not in lines[1]


def test_a_cpu_profile_runs_processes_not_gpus() -> None:
    lines = heading("job.yaml", "local", found(10, 10), "cpu")  # type: ignore[arg-type]
    assert lines[0].startswith("job.yaml on local: 1 node x 2 CPU processes = 2 ranks"), lines
    gpu = heading("job.yaml", "big", found(10, 10, procs=8))  # type: ignore[arg-type]
    assert gpu[0].startswith("job.yaml on big: 1 node x 8 GPUs"), gpu
    assert "(s)" not in lines[0] + gpu[0]
