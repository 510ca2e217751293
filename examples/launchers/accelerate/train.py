"""A small Accelerate training script run by fsdp-orch with ``launcher: accelerate``.

Accelerate does the distribution (FSDP from the config on GPUs; on CPU, fsdp-orch renders a
MULTI_CPU config and Accelerate uses DDP over gloo). fsdp-orch needs only two things from the
script: a heartbeat per step and checkpoints it can find. Checkpoints are Accelerate's
``save_state`` folders named ``checkpoint-<step>``, marked complete with ``trainer_state.json``
(as the Hugging Face Trainer does), which is what ``fsdp_orch.checkpoints`` looks for.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn

from fsdp_orch.checkpoints.folders import checkpoint_info, latest_complete, list_checkpoints
from fsdp_orch.runtime.heartbeat import heartbeat


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, dim: int = 32, classes: int = 4):
        super().__init__()
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def batch(step: int, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Points whose class is the quadrant of their first two coordinates: learnable, seeded."""
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(64, 32, generator=g)
    y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
    return x.to(device), y.to(device)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--keep-last", type=int, default=2)
    args = p.parse_args()

    accelerator = Accelerator()
    accelerator.print(f"distributed_type={accelerator.distributed_type.value} "
                      f"num_processes={accelerator.num_processes}")
    torch.manual_seed(0)
    model = Net()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optim = accelerator.prepare(model, optim)

    ckpt_dir = Path(os.path.expanduser(os.environ.get("FSDP_ORCH_CHECKPOINT_DIR", "checkpoints")))
    resume = os.environ.get("FSDP_ORCH_RESUME", "auto")
    start = 0
    latest = None
    if resume == "auto":
        latest = latest_complete(ckpt_dir)
    elif resume != "never":
        latest = checkpoint_info(Path(resume).expanduser())
    if latest is not None and latest.complete:
        accelerator.load_state(str(latest.path))
        start = latest.step
        accelerator.print(f"resumed from {latest.path} (step {start})")

    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, accelerator.process_index, accelerator.device)
        loss = F.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optim.step()
        optim.zero_grad()
        heartbeat(step, loss.item())
        accelerator.print(f"step={step} loss={loss.item():.6f}")
        if step % args.save_every == 0 or step == args.steps:
            heartbeat(step, state="saving")
            path = ckpt_dir / f"checkpoint-{step}"
            accelerator.save_state(str(path))
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:  # the completeness marker, written last
                (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
                for old in [c for c in list_checkpoints(ckpt_dir) if c.complete][:-args.keep_last]:
                    shutil.rmtree(old.path)
            accelerator.wait_for_everyone()
    heartbeat(args.steps, state="done")
    accelerator.end_training()


if __name__ == "__main__":
    main()
