"""The estimate checked against a real run: the job's model, FSDP options, LoRA and step exactly as
``tracked_run`` measures them under ``FakeTensorMode`` (``tracked_step``, shared), but with real CPU
tensors, sharded by ``fully_shard`` over a real gloo process group, one process a rank under
torchrun. Rank 0 writes its peak tracked bytes by category, for each job file, as one JSON object
keyed by the file as given:

    torchrun --standalone --nproc-per-node 2 -m fsdp_orch.fit.real_run job.yaml --out peak.json

Only models that fit in this machine's memory can run: this is how the small models of
``tests/integration/test_fit_real.py`` are measured. The job's ranks must be torchrun's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

MODULE = "fsdp_orch.fit.real_run"


def command(job_files: list[str], ranks: int, out: str) -> list[str]:
    """The argv that measures ``job_files`` for real on ``ranks`` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", "-m", MODULE, *job_files, "--out", out]


def measure_real(job_file: str, overrides: list[str]) -> dict[str, Any]:
    """This rank's peak by category for ``job_file``, over the default process group."""
    import torch

    from fsdp_orch.fit.setup import fit_setup
    from fsdp_orch.fit.tracked_run import tracked_step
    from fsdp_orch.jobspec.loading import load_job
    from fsdp_orch.vocab.errors import InputError

    job, _ = load_job(Path(job_file), overrides)
    setup = fit_setup(job, int(os.environ["LOCAL_WORLD_SIZE"]), job_file)
    world = int(os.environ["WORLD_SIZE"])
    if setup.world_size != world:
        raise InputError(f"the job has {setup.world_size} ranks and torchrun started {world}",
                         file=job_file, field="procs_per_node")
    torch.manual_seed(0)
    return tracked_step(setup, str(Path(job_file).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"torchrun ... -m {MODULE}", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job files with a fit: block")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a job field, as submit's --set")
    p.add_argument("--out", required=True, help="the JSON file rank 0 writes")
    args = p.parse_args(argv)
    if "LOCAL_WORLD_SIZE" not in os.environ:
        p.error("run it under torchrun: torchrun --standalone --nproc-per-node N -m "
                f"{MODULE} JOB --out FILE")

    import torch.distributed as dist

    from fsdp_orch.places.private import write_atomically
    from fsdp_orch.vocab.errors import FsdpOrchError

    dist.init_process_group("gloo")
    try:
        measured = {job: measure_real(job, args.set) for job in args.jobs}
        if dist.get_rank() == 0:
            write_atomically(Path(args.out), json.dumps(measured, indent=2) + "\n", mode=0o600)
        dist.barrier()
    except FsdpOrchError as exc:  # the same on every rank: one line, from rank 0
        if dist.get_rank() == 0:
            print(f"{MODULE}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
