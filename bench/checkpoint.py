"""Sharded checkpoint throughput (2 ranks, gloo, CPU) against ``dd`` on the same disk, in one run.

* sync save MB/s vs ``dd if=/dev/zero bs=1M count=<same MB> conv=fsync`` (target ratio >= 0.5)
* load MB/s, with the checkpoint's pages dropped from the page cache first (posix_fadvise)
* async save: how long the training loop is blocked per save vs a sync save (target < 0.2)

The model is a stack of Linear layers of ``--mb`` MB, sharded with FULL_SHARD; a checkpoint holds
it and its AdamW state (3x the model). Run it plainly; it starts torchrun itself:

    .venv/bin/python bench/checkpoint.py [--mb 256] [--repeat 5] [--dir .bench/checkpoint]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def drop_cache(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def settle() -> None:
    """Let the disk finish earlier writes (and deletes) so they do not slow the next measurement."""
    os.sync()
    time.sleep(1.0)


def dd(target: Path, mb: int) -> float:
    """MB/s of dd writing ``mb`` MiB with an fsync at the end."""
    settle()
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mb}", "conv=fsync"],
                   check=True, capture_output=True)
    seconds = time.perf_counter() - started
    target.unlink()
    return mb * 2**20 / seconds / 1e6


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from fsdp_orch import runtime
    from fsdp_orch.runtime.checkpoint import Checkpointer

    job = runtime.setup()
    width = 2048
    layers = max(1, round(args.mb * 2**20 / 4 / (width * width + width)))
    torch.manual_seed(0)
    model = job.shard(nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(4, width)

    def train_step() -> None:
        model(x).sum().backward()
        optim.step()
        optim.zero_grad()

    train_step()  # the optimizer state exists from here on
    base = Path(args.dir)

    # Sync saves and loads, each save right after a dd of the same size (the disk's speed drifts
    # with what was written before, so the two are measured under the same conditions).
    sync = Checkpointer(model, optim, directory=base / "sync", info=job.info, keep_last=1)
    save_s, load_s, dd_mbps, size = [], [], [], 0
    local = sum(t.to_local().numel() * t.element_size() for t in model.state_dict().values())
    for i in range(1, args.repeat + 1):
        if job.is_main:  # model + AdamW's two moments: about 3x the parameters, all ranks
            dd_mbps.append(dd(base / "dd.bin", round(size / 2**20) if size else
                              round(3 * local * job.world_size / 2**20)))
            settle()
        dist.barrier()
        started = time.perf_counter()
        sync.save(i)
        dist.barrier()
        save_s.append(time.perf_counter() - started)
        path = base / "sync" / f"step-{i:08d}"
        size = dir_bytes(path)
        if job.is_main:
            drop_cache(path)
        dist.barrier()
        started = time.perf_counter()
        assert sync.restore() == i
        dist.barrier()
        load_s.append(time.perf_counter() - started)


    # Async saves: train between saves for 3x as long as a sync save takes (a realistic interval
    # lets the background write finish); count the time save() holds the loop.
    asyn = Checkpointer(model, optim, directory=base / "async", info=job.info, keep_last=1,
                        async_save=True)
    started = time.perf_counter()
    train_step()
    step_s = time.perf_counter() - started
    # Every rank must run the same number of steps (each has collectives): rank 0 decides.
    between = [max(1, math.ceil(3 * statistics.median(save_s) / step_s))]
    dist.broadcast_object_list(between, src=0)
    for i in range(1, args.repeat + 2):
        asyn.save(i)
        for _ in range(between[0]):
            train_step()
    asyn.finalize()
    blocked = asyn.block_seconds[1:]  # the first save also allocates its staging buffers

    if job.is_main:
        mb = size / 1e6
        save_mbps = mb / statistics.median(save_s)
        load_mbps = mb / statistics.median(load_s)
        dd_median = statistics.median(dd_mbps)
        ratio_dd = save_mbps / dd_median
        ratio_async = statistics.median(blocked) / statistics.median(save_s)
        print(f"checkpoint: {job.world_size} ranks (gloo, CPU), FULL_SHARD, model "
              f"{layers} x Linear({width}, {width}) = {mb / 3:.0f} MB, saved with AdamW state: "
              f"{mb:.0f} MB in {base}")
        print(f"dd bs=1M conv=fsync     {dd_median:8.1f} MB/s  (median of {args.repeat})")
        print(f"sync save               {save_mbps:8.1f} MB/s  (median "
              f"{statistics.median(save_s):.2f} s of {args.repeat})   ratio to dd {ratio_dd:.2f}  "
              "(target >= 0.5)")
        print(f"load (cold page cache)  {load_mbps:8.1f} MB/s  (median "
              f"{statistics.median(load_s):.2f} s)")
        waited = statistics.median(asyn.wait_seconds[1:])
        print(f"async save blocks       {statistics.median(blocked):8.3f} s   (sync "
              f"{statistics.median(save_s):.3f} s; of it waiting for the previous save "
              f"{waited:.3f} s; first async {asyn.block_seconds[0]:.3f} s)   ratio "
              f"{ratio_async:.3f}  (target < 0.2)")
        print("JSON "
              + json.dumps({"dd_mbps": dd_mbps, "save_mbps": save_mbps, "load_mbps": load_mbps,
                            "save_over_dd": ratio_dd, "async_block_over_sync": ratio_async,
                            "bytes": size, "save_s": save_s, "load_s": load_s,
                            "async_block_s": asyn.block_seconds,
                            "async_wait_s": asyn.wait_seconds}))
    job.finish()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=256, help="model size in MB (fp32 parameters)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dir", default=str(REPO / ".bench" / "checkpoint"))
    args = p.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return
    shutil.rmtree(args.dir, ignore_errors=True)
    Path(args.dir).mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", __file__, "--mb", str(args.mb), "--repeat",
                        str(args.repeat), "--dir", args.dir], env=env, check=True)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
