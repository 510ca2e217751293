"""A PyTorch Lightning script with Lightning's default folders: the logger writes
``lightning_logs/version_N/`` (N grows with every run) and ``ModelCheckpoint`` saves into its
``checkpoints/`` every ``--every-n-steps`` steps, with ``last.ckpt`` beside the newest one.
``--ckpt-path`` resumes (``trainer.fit(..., ckpt_path=...)``). DDP on CPU; under torchrun Lightning
takes the ranks torchrun started.

    torchrun --nproc-per-node 2 train.py --max-steps 120 --every-n-steps 20
"""

from __future__ import annotations

import argparse
import os

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, dim: int = 64, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(dim, 256), nn.GELU(), nn.Linear(256, 2))

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=120)
    p.add_argument("--every-n-steps", type=int, default=20)
    p.add_argument("--ckpt-path", default=None)
    args = p.parse_args()

    L.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 64, generator=g)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
        max_steps=args.max_steps, enable_progress_bar=True, enable_model_summary=False,
        log_every_n_steps=10,
        callbacks=[ModelCheckpoint(every_n_train_steps=args.every_n_steps, save_last=True)],
    )
    trainer.fit(Classifier(), loader, ckpt_path=args.ckpt_path)
    if trainer.is_global_zero:
        print(f"training done at step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
