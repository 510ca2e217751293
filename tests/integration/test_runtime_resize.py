"""A checkpoint of 2 CPU ranks resumed on 1 (an elastic job that lost a node): DCP reshards the
model and optimizer, rank 0 restores its own RNG state and extras, and the demo keeps its data
order, so the run ends where an uninterrupted 2-rank run does, up to the order of floating-point
sums."""

from __future__ import annotations

import shutil

import pytest

from fsdp_orch.checkpoints.layouts.dcp import step_dir_name

# keep_last 4: the straight run keeps its step-4 checkpoint, the one the 1-rank run resumes from
CKPT = {"interval": 2, "keep_last": 4}
N = 8


@pytest.mark.slow
def test_two_ranks_resumed_on_one_train_on_the_same_data_to_the_same_loss(torchrun):
    straight = torchrun.run([*torchrun.small, "--steps", str(N)], checkpoint=CKPT,
                            name="straight").ok()
    assert straight.result["world_size"] == 2
    # The 2-rank checkpoint of step 4, as a 2-rank job that stopped there left it (one job fewer
    # than running that job: the straight run wrote the same checkpoint on its way to step N).
    run = torchrun.prepare([*torchrun.small, "--steps", str(N)], checkpoint=CKPT, name="shrunk",
                           attempt=1, nproc=1)
    shutil.copytree(straight.checkpoint_dir / step_dir_name(4),
                    run.checkpoint_dir / step_dir_name(4))
    second = torchrun.finish(torchrun.start(run)).ok()
    result = second.result
    assert (result["resumed_from"], result["world_size"], result["saved_world_size"]) == (4, 1, 2)
    assert result["data_ranks"] == 2  # still two blocks of data per step, both on rank 0 now
    assert "saved by 2 ranks and is restored on 1" in second.stderr
    assert "rank(s) 1 are not restored" in second.stderr
    assert [line.split()[0] for line in second.stdout.splitlines()] == [
        f"step={s}" for s in range(5, N + 1)]
    # Rank 1's half of each step was trained on by rank 0: the same data, the same mean gradient.
    assert result["final_loss"] == pytest.approx(straight.result["final_loss"], rel=1e-4)
