"""A Lightning Fabric loop written as Fabric's docs show it: ``Fabric(accelerator, devices,
strategy)``, ``launch``, ``setup``/``setup_dataloaders``, ``fabric.backward``, a state dict saved with
``fabric.save`` every ``--save-every`` steps into ``ckpt/step-N.ckpt``, and its own resume: at start
it loads the newest save there (``fabric.load``) and goes on from its step. Rank 0 prints
``step N loss L`` after every optimizer step. Nothing tells a launcher where it saves.

    torchrun --nproc-per-node 2 train.py --steps 200 --save-every 25
"""

from __future__ import annotations

import argparse
import os
import re
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SAVE = re.compile(r"step-(\d+)\.ckpt")


def latest_save(folder: str) -> str | None:
    """The newest ``step-N.ckpt`` in ``folder``, or None."""
    found = [(int(m.group(1)), name) for name in os.listdir(folder)
             if (m := SAVE.fullmatch(name))] if os.path.isdir(folder) else []
    return os.path.join(folder, max(found)[1]) if found else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--save-every", type=int, default=25)
    p.add_argument("--ckpt-dir", default="ckpt")
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--sleep-per-step", type=float, default=0.0)
    args = p.parse_args()

    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "2"))
    fabric = L.Fabric(accelerator="cpu", devices=devices, strategy=args.strategy)
    fabric.launch()
    fabric.seed_everything(0)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 64, generator=g)
    y = (x[:, 0] > 0).long()
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)

    state = {"model": model, "optimizer": optimizer, "step": 0}
    resume = latest_save(args.ckpt_dir)
    if resume is not None:
        fabric.load(resume, state)
        fabric.print(f"resumed from {resume} at step {state['step']}")

    model.train()
    while state["step"] < args.steps:
        for xb, yb in loader:
            if state["step"] >= args.steps:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            fabric.backward(loss)
            optimizer.step()
            state["step"] += 1
            fabric.print(f"step {state['step']} loss {loss.item():.6f}", flush=True)
            if state["step"] % args.save_every == 0:
                fabric.save(os.path.join(args.ckpt_dir, f"step-{state['step']}.ckpt"), state)
            if args.sleep_per_step:
                time.sleep(args.sleep_per_step)
    fabric.print(f"training done at step {state['step']}", flush=True)
    fabric.barrier()
    # torch 2.13 + gloo: see examples/unchanged/README.md ("Why every torch script here ends ...")
    time.sleep(0.5)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
