"""A plain torchrun FSDP2 training script (the shape of PyTorch's FSDP2 and DCP tutorials).

A small transformer language model on synthetic tokens, ``fully_shard`` on each block and then
the root, AdamW, and Distributed Checkpoint (DCP) saves every ``--save-every`` steps into
``<--checkpoint-dir>/step-<N>/`` (DCP writes ``.metadata`` last). ``--resume <dir>/step-<N>``
loads that checkpoint and goes on from step N+1.

    torchrun --nproc-per-node 2 train.py --steps 200 --save-every 50 --checkpoint-dir ckpt
    torchrun --nproc-per-node 2 train.py --steps 300 --checkpoint-dir ckpt --resume ckpt/step-200
"""

from __future__ import annotations

import argparse
import os
import re
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        x = self.tok(tokens) + self.pos(torch.arange(seq))
        for layer in self.layers:
            x = layer(x, mask)
        return self.out(self.norm(x))


class AppState(Stateful):
    """What DCP saves and loads: the model and optimizer state dicts (sharded)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict: dict) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
        )


def get_batch(step: int, rank: int, batch: int, seq_len: int, vocab: int) -> torch.Tensor:
    """Seeded by (step, rank), so a resumed run sees the same data: counting sequences."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 5, (batch, 1), generator=g)
    return (start + stride * torch.arange(seq_len + 1)) % vocab


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--checkpoint-dir", default="ckpt")
    p.add_argument("--resume", default=None, help="a step-<N> checkpoint folder to load")
    p.add_argument("--sleep-per-step", type=float, default=0.0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    model = Transformer(args.vocab, args.dim, args.layers, args.heads, args.seq_len)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())  # DTensor numel: the full size
        print(f"world_size={world} params={n:,} steps={args.steps}", flush=True)

    start = 0
    if args.resume:
        match = re.search(r"step-(\d+)$", os.path.normpath(args.resume))
        if match is None:
            raise SystemExit(f"--resume must name a step-<N> folder, got {args.resume!r}")
        start = int(match.group(1))
        state = {"app": AppState(model, optimizer)}
        dcp.load(state, checkpoint_id=args.resume)
        if rank == 0:
            print(f"resumed from {args.resume} at step {start}", flush=True)

    model.train()
    t0 = time.perf_counter()
    for step in range(start + 1, args.steps + 1):
        data = get_batch(step, rank, args.batch_size, args.seq_len, args.vocab)
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), data[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)

        if step % args.log_every == 0 or step == args.steps:
            dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
            if rank == 0:
                rate = (step - start) / (time.perf_counter() - t0)
                print(f"step {step}/{args.steps} loss {loss.item():.4f} ({rate:.1f} steps/s)",
                      flush=True)
        if step % args.save_every == 0 or step == args.steps:
            path = os.path.join(args.checkpoint_dir, f"step-{step}")
            dcp.save({"app": AppState(model, optimizer)}, checkpoint_id=path)
            if rank == 0:
                print(f"saved checkpoint {path}", flush=True)

    if rank == 0:
        print("training done", flush=True)
    dist.barrier()  # no rank tears down gloo while another still talks
    # torch 2.13 + gloo: a collective issued during backward holds a Python object that gloo's
    # worker thread must release with the GIL. Give it the GIL before the interpreter exits, or
    # the process can abort at exit ("terminate called without an active exception").
    time.sleep(0.5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
