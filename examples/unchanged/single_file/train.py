"""A torchrun DDP script that keeps its checkpoint the way nanoGPT's train.py does: one file,
``out/ckpt.pt``, rewritten by rank 0 every ``eval_interval`` iterations with ``torch.save`` (model,
optimizer, ``iter_num``...), and resumed with ``--init_from=resume``. Settings are nanoGPT-style
``--key=value`` overrides of the globals below.

    torchrun --nproc-per-node 2 train.py --max_iters=60 --eval_interval=20
    torchrun --nproc-per-node 2 train.py --max_iters=60 --init_from=resume

Every save also appends ``<iter_num> <sha256>`` to ``out/saved.log`` (a record to check that a
restart never wrote an older checkpoint over a newer one).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

out_dir = "out"
init_from = "scratch"  # 'scratch' or 'resume'
max_iters = 60
eval_interval = 20
log_interval = 10
batch_size = 16
block_size = 16
vocab_size = 64
n_embd = 32
learning_rate = 1e-3
sleep_per_iter = 0.0


def configure(argv: list[str]) -> None:
    """nanoGPT's configurator in brief: ``--key=value`` sets an existing global of the same type."""
    for arg in argv:
        key, _, value = arg.removeprefix("--").partition("=")
        if key not in globals() or not value:
            sys.exit(f"unknown or empty setting: {arg}")
        globals()[key] = type(globals()[key])(value)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        return self.head(x + self.mlp(x))


def get_batch(it: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded sequences whose next token is the current one plus one."""
    g = torch.Generator().manual_seed(it * 100 + rank)
    x = torch.randint(0, vocab_size, (batch_size, block_size), generator=g)
    return x, (x + 1) % vocab_size


def save(model: nn.Module, optimizer: torch.optim.Optimizer, iter_num: int) -> None:
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "model_args": {"n_embd": n_embd, "vocab_size": vocab_size}, "iter_num": iter_num,
                  "best_val_loss": 0.0, "config": {"learning_rate": learning_rate}}
    print(f"saving checkpoint to {out_dir}", flush=True)
    path = os.path.join(out_dir, "ckpt.pt")
    torch.save(checkpoint, path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(out_dir, "saved.log"), "a") as f:
        f.write(f"{iter_num} {digest}\n")


def main() -> None:
    configure(sys.argv[1:])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1337)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    iter_num = 0
    if init_from == "resume":
        checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        iter_num = checkpoint["iter_num"]
        if rank == 0:
            print(f"resuming from iteration {iter_num}", flush=True)
    elif rank == 0:
        print("initializing a new model from scratch", flush=True)
    if rank == 0:
        os.makedirs(out_dir, exist_ok=True)
    ddp = DDP(model)

    while iter_num < max_iters:
        if iter_num % eval_interval == 0 and iter_num > 0 and rank == 0:
            save(model, optimizer, iter_num)
        x, y = get_batch(iter_num, rank)
        loss = F.cross_entropy(ddp(x).view(-1, vocab_size), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        iter_num += 1
        if rank == 0 and iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}", flush=True)
        time.sleep(sleep_per_iter)
    if rank == 0:
        save(model, optimizer, iter_num)
        print("training done", flush=True)
    dist.barrier()
    time.sleep(0.5)  # torch 2.13 + gloo: see examples/unchanged/README.md
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
