"""A plain Accelerate training script (the shape of Accelerate's nlp_example, on synthetic data).

The same file runs on one process, or under ``accelerate launch`` on several (on CPU, e.g.
``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 train.py``).

    accelerate launch train.py --steps 300
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, dim: int, classes: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.LayerNorm(4 * dim),
            nn.Linear(4 * dim, 4 * dim), nn.GELU(), nn.LayerNorm(4 * dim),
        )
        self.head = nn.Linear(4 * dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def synthetic_dataset(num: int, dim: int, seed: int) -> TensorDataset:
    """Seeded points whose class is the quadrant of their first two coordinates."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num, dim, generator=g)
    y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
    return TensorDataset(x, y)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    accelerator = Accelerator()
    accelerator.print(
        f"distributed_type={accelerator.distributed_type} num_processes={accelerator.num_processes}"
        f" device={accelerator.device}"
    )
    set_seed(args.seed)

    dataset = synthetic_dataset(16384, args.dim, args.seed)
    dataloader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = Net(args.dim, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)

    model.train()
    step = 0
    t0 = time.perf_counter()
    while step < args.steps:
        for x, y in dataloader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % args.log_every == 0 or step == args.steps:
                mean_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
                rate = step / (time.perf_counter() - t0)
                accelerator.print(
                    f"step {step}/{args.steps} loss {mean_loss:.4f} ({rate:.1f} steps/s)"
                )
            if step == args.steps:
                break

    accelerator.wait_for_everyone()
    accelerator.print("training done")
    # torch 2.13 + gloo: a collective issued during backward holds a Python object that gloo's
    # worker thread must release with the GIL. Give it the GIL before the interpreter exits, or
    # the process can abort at exit ("terminate called without an active exception").
    time.sleep(0.5)
    accelerator.end_training()


if __name__ == "__main__":
    main()
