"""A small transformer language model on synthetic tokens, sharded with fsdp_orch.runtime.

Deterministic: the batch of step s on rank r is a pure function of (seed, s, r), and checkpoints
hold the optimizer state and RNG states, so a run resumed from a checkpoint reaches the same
final loss and weights, bit for bit, as a run that never stopped.

On fewer ranks (an elastic job, ``nodes: 1-2``, that lost a node) the data keeps the layout the run
started with, which the checkpoint carries: each step still trains on the blocks of all the
original ranks (block b is the batch rank b had), a rank now taking several, and the loss is
weighted so that the gradient stays the mean over the whole step's data. The resumed run sees the
same sequences in the same steps as one that never shrank, and ends at the same loss up to the
order of floating-point sums.

    torchrun --standalone --nproc-per-node 2 train.py --steps 300  # or: fsdp-orch submit job.yaml

Rank 0 prints ``step=N loss=L`` per step and at the end writes result.json (final loss, final
step, SHA-256 of the full parameters) into $FSDP_ORCH_RUN_DIR, or the current directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fsdp_orch import runtime


class Block(nn.Module):
    """Pre-norm decoder block: causal self-attention and an MLP, no dropout."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads)
                   .permute(2, 0, 3, 1, 4))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def batch(seed: int, step: int, rank: int, args: argparse.Namespace):
    """Sequences that count up from a random start by a random stride (mod vocab): learnable."""
    key = hashlib.sha256(f"{seed}/{step}/{rank}".encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
    n = args.seq_len + 1
    start = torch.randint(0, args.vocab, (args.batch_size, 1), generator=g)
    stride = torch.randint(1, 8, (args.batch_size, 1), generator=g)
    seq = (start + stride * torch.arange(n)) % args.vocab
    noise = torch.rand(args.batch_size, n, generator=g) < 0.05
    seq = torch.where(noise, torch.randint(0, args.vocab, (args.batch_size, n), generator=g), seq)
    return seq[:, :-1], seq[:, 1:]


def param_sha256(job: runtime.Job, model: nn.Module) -> str | None:
    """SHA-256 over the full (gathered) parameters, in name order; on rank 0, else None."""
    full = job.full_state(model)
    if full is None:
        return None
    h = hashlib.sha256()
    for name in sorted(full):
        value = full[name]
        assert isinstance(value, torch.Tensor)
        t = value.detach().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="stand-in for a slower model")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic kernels only: on a GPU the embedding and attention backward "
                        "otherwise add with atomics, so a resumed run is close to, not "
                        "equal to, one that never stopped")
    return p


def model_for_fit() -> TinyLM:
    """The model the job's args make, for its ``fit: {model: train:model_for_fit}``: ``fsdp-orch
    fit`` builds it under FakeTensorMode, with the job's script and args as ``sys.argv``."""
    args, _ = arguments().parse_known_args()
    return TinyLM(args.vocab, args.dim, args.layers, args.heads, args.seq_len)


def main() -> None:
    args = arguments().parse_args()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts
        torch.use_deterministic_algorithms(True)

    job = runtime.setup()
    torch.manual_seed(args.seed)
    model = job.shard(lambda: TinyLM(args.vocab, args.dim, args.layers, args.heads, args.seq_len))
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # Saved with each checkpoint: the loss, so a finished run can report it, and the number of data
    # blocks per step (the world size the run started with), so that a resume keeps the data order.
    progress: dict[str, float | int | None] = {"loss": None, "data_ranks": job.world_size}
    ckpt = job.checkpointer(model, optim, extras=progress)
    start = ckpt.restore()
    data_ranks = max(int(progress["data_ranks"] or 1), job.world_size)  # more ranks: laid out anew
    progress["data_ranks"] = data_ranks
    blocks = list(range(job.rank, data_ranks, job.world_size))
    # FSDP averages the ranks' gradients: a rank with more than its share of the blocks weighs more.
    weight = len(blocks) * job.world_size / data_ranks

    step_seconds: list[float] = []
    for step in range(start + 1, args.steps + 1):
        began = time.perf_counter()
        parts = [batch(args.seed, step, block, args) for block in blocks]
        tokens = job.place_batch(torch.cat([p[0] for p in parts]))
        targets = job.place_batch(torch.cat([p[1] for p in parts]))
        logits = model(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), targets.reshape(-1))
        if weight != 1:
            loss = loss * weight
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        job.sync()  # on XLA: run this step's graph now
        progress["loss"] = job.mean(loss)
        if job.is_main:
            print(f"step={step} loss={progress['loss']:.6f}", flush=True)
        job.step_done(step, progress["loss"])  # the loss read above waited for the device
        step_seconds.append(time.perf_counter() - began)
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)

    digest = param_sha256(job, model)
    job.finish(args.steps)
    if job.is_main:
        out = Path(os.environ.get("FSDP_ORCH_RUN_DIR") or ".").expanduser() / "result.json"
        out.write_text(json.dumps({
            "final_loss": progress["loss"], "final_step": args.steps, "param_sha256": digest,
            "resumed_from": start, "world_size": job.world_size, "data_ranks": data_ranks,
            "saved_world_size": ckpt.saved_world_size,
            "plan": job.plan.as_dict() if job.plan else None,
            "save_block_seconds": ckpt.block_seconds, "load_seconds": ckpt.load_seconds,
            "step_seconds_median": statistics.median(step_seconds) if step_seconds else None,
            "max_memory_allocated": (torch.cuda.max_memory_allocated(job.device)
                                     if job.device.type == "cuda" else None),
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
