"""A torchrun DDP script whose rank 0 runs a long, pure-Python evaluation now and then.

Every ``--eval-every`` steps rank 0 "evaluates" for ``--eval-seconds``: a Python loop over many
small items (arithmetic on floats, ``.item()`` on small tensors) that keeps executing bytecode,
the way metric code over a validation set often does. The other ranks wait in
``dist.barrier()`` (a native wait) until rank 0 is done; then training goes on.

    torchrun --nproc-per-node 2 train.py --steps 200 --eval-every 100 --eval-seconds 15
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(dim: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, 4 * dim), nn.ReLU(),
        nn.Linear(4 * dim, classes),
    )


def get_batch(step: int, rank: int, batch: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded points whose class is the sign pattern of their first two coordinates."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(batch, dim, generator=g)
    y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
    return x, y


def evaluate(model: nn.Module, dim: int, seconds: float) -> tuple[float, int]:
    """Accuracy on a fixed validation set, computed item by item in Python, repeated (with
    running statistics) until ``seconds`` have passed."""
    x, y = get_batch(-1, 0, 512, dim)
    with torch.no_grad():
        logits = model(x)
    predictions = logits.argmax(dim=1)
    deadline = time.monotonic() + seconds
    passes = correct = seen = 0
    while True:
        for i in range(len(y)):
            correct += int(predictions[i].item() == y[i].item())
            seen += 1
            row = logits[i].tolist()
            margin = max(row) - sorted(row)[-2]
            passes += margin > 0.0
        if time.monotonic() >= deadline:
            return correct / seen, seen


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-seconds", type=float, default=15.0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(make_model(args.dim, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    for step in range(1, args.steps + 1):
        x, y = get_batch(step, rank, args.batch_size, args.dim)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step}/{args.steps} loss {loss.item():.4f}", flush=True)

        if step % args.eval_every == 0 and step < args.steps:
            if rank == 0:
                print(f"evaluating at step {step} for {args.eval_seconds:g}s", flush=True)
                t0 = time.monotonic()
                accuracy, items = evaluate(model.module, args.dim, args.eval_seconds)
                print(f"eval step {step}: accuracy {accuracy:.3f} over {items:,} items "
                      f"in {time.monotonic() - t0:.1f}s", flush=True)
            dist.barrier()  # the other ranks wait here for rank 0's evaluation

    if rank == 0:
        print("training done", flush=True)
    dist.barrier()
    # torch 2.13 + gloo: a collective issued during backward holds a Python object that gloo's
    # worker thread must release with the GIL. Give it the GIL before the interpreter exits, or
    # the process can abort at exit ("terminate called without an active exception").
    time.sleep(0.5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
