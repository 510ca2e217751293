"""A training loop in the shape of transformers' no-trainer examples (run_glue_no_trainer.py and its
siblings), on synthetic data: `--checkpointing_steps N` saves `accelerator.save_state` folders named
`step_{completed_steps}` (or `epoch_{epoch}` with "epoch") under `--output_dir`, and
`--resume_from_checkpoint PATH` loads one, works out the epoch and step from its name and skips the
batches already seen.

    accelerate launch train.py --output_dir out --checkpointing_steps 20 --max_train_steps 120
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", type=str, default=None)
    p.add_argument("--checkpointing_steps", type=str, default=None,
                   help="save the state every n steps, or 'epoch' at the end of each epoch")
    p.add_argument("--resume_from_checkpoint", type=str, default=None)
    p.add_argument("--max_train_steps", type=int, default=120)
    p.add_argument("--num_train_epochs", type=int, default=100)
    p.add_argument("--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    set_seed(args.seed)

    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(2048, 64, generator=g)
    y = (x[:, 0] > 0).long()
    train_dataloader = DataLoader(TensorDataset(x, y), batch_size=args.per_device_train_batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    num_update_steps_per_epoch = len(train_dataloader) // args.gradient_accumulation_steps

    checkpointing_steps = args.checkpointing_steps
    if checkpointing_steps is not None and checkpointing_steps.isdigit():
        checkpointing_steps = int(checkpointing_steps)

    completed_steps = 0
    starting_epoch = 0
    resume_step = None
    if args.resume_from_checkpoint:
        checkpoint_path = args.resume_from_checkpoint
        path = os.path.basename(args.resume_from_checkpoint.rstrip("/"))
        accelerator.print(f"Resumed from checkpoint: {checkpoint_path}")
        accelerator.load_state(checkpoint_path)
        training_difference = os.path.splitext(path)[0]
        if "epoch" in training_difference:
            starting_epoch = int(training_difference.replace("epoch_", "")) + 1
            completed_steps = starting_epoch * num_update_steps_per_epoch
        else:
            resume_step = int(training_difference.replace("step_", "")) * args.gradient_accumulation_steps
            starting_epoch = resume_step // len(train_dataloader)
            completed_steps = resume_step // args.gradient_accumulation_steps
            resume_step -= starting_epoch * len(train_dataloader)

    model.train()
    for epoch in range(starting_epoch, args.num_train_epochs):
        if args.resume_from_checkpoint and epoch == starting_epoch and resume_step is not None:
            active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
        else:
            active_dataloader = train_dataloader
        for batch_x, batch_y in active_dataloader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(batch_x), batch_y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                completed_steps += 1
                if completed_steps % 10 == 0:
                    accelerator.print(f"step {completed_steps} loss {loss.item():.4f}")
            if isinstance(checkpointing_steps, int) and completed_steps % checkpointing_steps == 0 \
                    and accelerator.sync_gradients:
                output_dir = f"step_{completed_steps}"
                if args.output_dir is not None:
                    output_dir = os.path.join(args.output_dir, output_dir)
                accelerator.save_state(output_dir)
                accelerator.print(f"saved state {output_dir}")
            if completed_steps >= args.max_train_steps:
                break
        if checkpointing_steps == "epoch":
            output_dir = f"epoch_{epoch}"
            if args.output_dir is not None:
                output_dir = os.path.join(args.output_dir, output_dir)
            accelerator.save_state(output_dir)
        if completed_steps >= args.max_train_steps:
            break

    accelerator.wait_for_everyone()
    accelerator.print(f"training done at step {completed_steps}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
