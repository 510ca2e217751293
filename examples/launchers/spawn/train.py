"""The PyTorch FSDP MNIST tutorial's shape, on synthetic images: ``mp.spawn`` one worker per rank.

fsdp-orch's ``python`` launcher starts this once per node with MASTER_ADDR, MASTER_PORT,
NNODES, NODE_RANK and NPROC_PER_NODE set; each worker derives its rank and uses
``fsdp_orch.runtime`` for the process group, FSDP2, checkpoints and heartbeats.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR

from fsdp_orch import runtime


class Net(nn.Module):
    """The tutorial's MNIST network."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = self.dropout1(torch.flatten(x, 1))
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(step: int, rank: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """28x28 noise with a bright 7x7 patch at a position given by the label (0-9)."""
    g = torch.Generator().manual_seed(step * 7919 + rank)
    labels = torch.randint(0, 10, (batch_size,), generator=g)
    images = torch.rand(batch_size, 1, 28, 28, generator=g) * 0.3
    for i, label in enumerate(labels.tolist()):
        row, col = divmod(label, 4)
        images[i, 0, row * 7:row * 7 + 7, col * 7:col * 7 + 7] += 1.0
    return images, labels


def worker(local_rank: int, nproc: int, args: argparse.Namespace) -> None:
    node_rank = int(os.environ.get("NODE_RANK", "0"))
    nnodes = int(os.environ.get("NNODES", "1"))
    os.environ.update(RANK=str(node_rank * nproc + local_rank), LOCAL_RANK=str(local_rank),
                      WORLD_SIZE=str(nnodes * nproc), LOCAL_WORLD_SIZE=str(nproc))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")

    job = runtime.setup()
    torch.manual_seed(1)
    model = job.shard(Net)
    optim = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optim, step_size=10, gamma=0.7)
    ckpt = job.checkpointer(model, optim, extras={"scheduler": scheduler})
    start = ckpt.restore()
    model.train()
    for step in range(start + 1, args.steps + 1):
        images, labels = synthetic_mnist(step, job.rank, args.batch_size)
        loss = F.nll_loss(model(images.to(job.device)), labels.to(job.device))
        optim.zero_grad()
        loss.backward()
        optim.step()
        scheduler.step()
        if job.is_main:
            print(f"step={step} loss={loss.item():.6f} lr={scheduler.get_last_lr()[0]:g}",
                  flush=True)
        job.step_done(step, loss)
    job.finish()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    nproc = int(os.environ.get("NPROC_PER_NODE", "2"))
    mp.spawn(worker, args=(nproc, args), nprocs=nproc, join=True)


if __name__ == "__main__":
    main()
