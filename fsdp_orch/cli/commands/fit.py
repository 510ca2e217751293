"""``fsdp-orch fit``: each GPU's peak memory for a job on a cluster, estimated here, without a GPU
(``fsdp_orch.fit``). The only command that imports torch, and only to measure (a cached estimate
needs none)."""

from __future__ import annotations

import json
import sys

from fsdp_orch.cli.common import EXIT_OK, add_job_options

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "estimate each GPU's peak memory for a job on a cluster, before it waits in the queue"
USES_HOME = True
EXIT_DOES_NOT_FIT = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_job_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object (peak_gib_per_gpu, "
                   "per_gpu_gib, stated_gib, fits, ...)")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="each GPU's memory (80GB), in place of the profile's gpu_memory")
    p.add_argument("--no-cache", action="store_true", help="measure again, whatever is cached")
    p.add_argument("--every-layer", action="store_true",
                   help="measure the model at its full depth (slower), not at two depths carried "
                        "to it")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fsdp_orch.fit.budget import as_json, table
    from fsdp_orch.fit.estimate import estimate
    from fsdp_orch.jobspec.sizes import parse_size
    from fsdp_orch.places.builtin import home
    from fsdp_orch.vocab.errors import InputError

    gpu_memory = None
    if args.gpu_memory is not None:
        try:
            gpu_memory = parse_size(args.gpu_memory)
        except ValueError as exc:
            raise InputError(str(exc), field="--gpu-memory") from None
    found = estimate(Path(args.job), args.cluster, overrides=args.set, home=home(),
                     gpu_memory=gpu_memory, use_cache=not args.no_cache,
                     every_layer=args.every_layer)
    setup, measured, b = found.setup, found.measured, found.budget
    if args.json:
        out = {"job": args.job, "cluster": args.cluster, "ranks": setup.world_size,
               "nodes": setup.nodes, "procs_per_node": setup.procs_per_node,
               "strategy": setup.strategy, "parameters": measured["params"],
               "trainable_parameters": measured["trainable"], "cached": found.cached,
               "measured_s": measured["seconds"], "layers": measured.get("layers"), **as_json(b),
               "tracked_bytes": measured["peak"]}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        fit = setup.fit
        lora = ""
        if fit.lora is not None:
            lora = (f"; LoRA r={fit.lora.r} on {measured['adapted']} Linear layers"
                    + (" (base weights in nf4)" if fit.lora.quantize == "nf4" else ""))
        how = "cached" if found.cached else f"measured in {measured['seconds']:g} s"
        heading = [
            f"{args.job} on {args.cluster}: {setup.nodes} node(s) x {setup.procs_per_node} GPU(s)"
            f" = {setup.world_size} ranks, {setup.strategy}, mixed precision "
            f"{setup.mixed_precision}, activation checkpointing "
            f"{'on' if setup.activation_checkpointing else 'off'}, offload "
            f"{'on' if setup.offload_params else 'off'}",
            f"model {fit.model}: {measured['params'] / 1e9:.2f} B parameters, "
            f"{measured['trainable'] / 1e6:.1f} M trainable{lora}; batch {fit.batch_size} x "
            f"{fit.seq_len} tokens a GPU, {fit.optimizer}",
            f"one rank's tensors by FSDPMemTracker under FakeTensorMode ({how})",
        ]
        sys.stdout.write(table(b, heading))
    return EXIT_DOES_NOT_FIT if b.fits is False else EXIT_OK
