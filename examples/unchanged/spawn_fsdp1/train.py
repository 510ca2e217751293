"""The PyTorch FSDP (FSDP1) MNIST tutorial's shape, on CPU with gloo and synthetic images.

Started once with plain ``python train.py``; it spawns one worker per rank with
``torch.multiprocessing.spawn``. MASTER_ADDR, MASTER_PORT and WORLD_SIZE (or NPROC_PER_NODE)
come from the environment when set, else localhost:12355 and 2 workers.

    python train.py --epochs 3 --batches-per-epoch 20
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from torch.optim.lr_scheduler import StepLR


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
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def synthetic_mnist(num: int, seed: int) -> torch.utils.data.TensorDataset:
    """MNIST-shaped noise with a bright 7x7 patch whose position is the label (0-9)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (num,), generator=g)
    images = torch.rand(num, 1, 28, 28, generator=g)
    for i, label in enumerate(labels.tolist()):
        row, col = divmod(label, 4)
        images[i, 0, row * 7:row * 7 + 7, col * 7:col * 7 + 7] += 0.5
    return torch.utils.data.TensorDataset((images - 0.1307) / 0.3081, labels)


def train(args, model, rank, world_size, train_loader, optimizer, epoch, sampler):
    model.train()
    ddp_loss = torch.zeros(2)
    sampler.set_epoch(epoch)
    for data, target in train_loader:
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target, reduction="sum")
        loss.backward()
        optimizer.step()
        ddp_loss[0] += loss.item()
        ddp_loss[1] += len(data)
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)

    dist.all_reduce(ddp_loss, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(f"Train Epoch: {epoch} \tLoss: {ddp_loss[0] / ddp_loss[1]:.6f}", flush=True)


def fsdp_main(local_rank, world_size, args):
    # one node: rank == local_rank; several nodes (NODE_RANK set): offset by the node's ranks
    rank = int(os.environ.get("NODE_RANK", "0")) * args.nprocs + local_rank
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(args.seed)

    dataset = synthetic_mnist(args.batch_size * args.batches_per_epoch * world_size, args.seed)
    sampler = torch.utils.data.distributed.DistributedSampler(
        dataset, rank=rank, num_replicas=world_size, shuffle=True
    )
    train_loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, sampler=sampler
    )
    my_auto_wrap_policy = functools.partial(size_based_auto_wrap_policy, min_num_params=100)

    model = FSDP(Net(), auto_wrap_policy=my_auto_wrap_policy, device_id=torch.device("cpu"))
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)

    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train(args, model, rank, world_size, train_loader, optimizer, epoch, sampler)
        scheduler.step()
    if rank == 0:
        steps = args.epochs * args.batches_per_epoch
        print(f"{steps} steps in {time.perf_counter() - t0:.1f}s", flush=True)

    if args.save_model:
        # use a barrier to make sure training is done on all ranks
        dist.barrier()
        states = model.state_dict()
        if rank == 0:
            torch.save(states, "mnist_cnn.pt")
            print("saved mnist_cnn.pt", flush=True)

    dist.barrier()  # no rank tears down gloo while another still talks
    # torch 2.13 + gloo: a collective issued during backward holds a Python object that gloo's
    # worker thread must release with the GIL. Give it the GIL before the interpreter exits, or
    # the process can abort at exit ("terminate called without an active exception").
    time.sleep(0.5)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description="PyTorch MNIST FSDP example (synthetic data)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches-per-epoch", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sleep-per-step", type=float, default=0.0)
    parser.add_argument("--save-model", action="store_true", default=False)
    args = parser.parse_args()

    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    world_size = int(os.environ.get("WORLD_SIZE") or os.environ.get("NPROC_PER_NODE") or 2)
    args.nprocs = int(os.environ.get("NPROC_PER_NODE") or world_size)
    mp.spawn(fsdp_main, args=(world_size, args), nprocs=args.nprocs, join=True)


if __name__ == "__main__":
    main()
