"""``fsdp-orch fit``: each GPU's peak memory for a job on a cluster, estimated here, without a GPU
(``fsdp_orch.fit``). The only command that imports torch, and only to measure (a cached estimate
needs none)."""

from __future__ import annotations

import json
import sys

from fsdp_orch.cli.common import EXIT_OK, GPU_MEMORY_HELP, add_job_options

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
                   help=GPU_MEMORY_HELP)
    p.add_argument("--no-cache", action="store_true", help="measure again, whatever is cached")
    p.add_argument("--suggest", action="store_true",
                   help="say what single change would lower the peak (offload, activation "
                        "checkpointing, strategy, tokens a GPU, nodes) even when the job fits; "
                        "they are given anyway when it does not fit")
    p.add_argument("--every-layer", action="store_true",
                   help="measure the model at its full depth (slower), not at two depths carried "
                        "to it")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fsdp_orch.cli.fit_report import report_json, report_text
    from fsdp_orch.fit.estimate import estimate, suggestions_for
    from fsdp_orch.fit.suggestions import wanted
    from fsdp_orch.jobspec.sizes import size_argument
    from fsdp_orch.places.builtin import home

    gpu_memory = None
    if args.gpu_memory is not None:
        gpu_memory = size_argument(args.gpu_memory, "--gpu-memory")
    found = estimate(Path(args.job), args.cluster, overrides=args.set, home=home(),
                     gpu_memory=gpu_memory, use_cache=not args.no_cache,
                     every_layer=args.every_layer)
    suggestions = None
    if wanted(found.budget, args.suggest):
        suggestions = suggestions_for(found, home=home(), use_cache=not args.no_cache,
                                      every_layer=args.every_layer)
    if args.json:
        out = report_json(args.job, args.cluster, found, suggestions)
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(report_text(args.job, args.cluster, found, suggestions))
    return EXIT_DOES_NOT_FIT if found.budget.fits is False else EXIT_OK
