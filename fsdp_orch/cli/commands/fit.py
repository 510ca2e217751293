"""``fsdp-orch fit``: each GPU's peak memory for a job on a cluster, estimated here, without a GPU
(``fsdp_orch.fit``). The only command that imports torch. From a CLI without torch (``pipx``), it
runs itself on the profile's ``python:`` where that one is on this machine and has torch and
fsdp-orch (the training environment); otherwise it says how to make it run."""

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
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # the CLI from pipx: found, not imported
        return _with_the_profiles_python(args)
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
        from fsdp_orch.backends.registry import load_profile

        profile, _ = load_profile(args.cluster)  # what the report calls a rank: a GPU or not
        sys.stdout.write(report_text(args.job, args.cluster, found, suggestions,
                                     device=str(getattr(profile, "device", "gpu")),
                                     one_node=profile.kind == "local"))
    return EXIT_DOES_NOT_FIT if found.budget.refused else EXIT_OK


# Set in the environment of a fit run again on the profile's python: never a second hop.
FROM_ENV = "FSDP_ORCH_FIT_FROM"


def fit_argv(args: argparse.Namespace) -> list[str]:
    """The command's arguments, as parsed, for the same command on another python."""
    argv = [args.job, "--cluster", args.cluster]
    for item in args.set:
        argv += ["--set", item]
    if args.accelerate_config:
        argv += ["--accelerate-config", args.accelerate_config]
    if args.gpu_memory is not None:
        argv += ["--gpu-memory", args.gpu_memory]
    flags = (("json", "--json"), ("no_cache", "--no-cache"), ("suggest", "--suggest"),
             ("every_layer", "--every-layer"))
    return argv + [flag for name, flag in flags if getattr(args, name)]


def _with_the_profiles_python(args: argparse.Namespace) -> int:
    """``fit`` where this python has no torch: on the profile's python when it is here, is not
    this one, and has torch and fsdp-orch (said on stderr); else an InputError (exit 2) naming
    this python and the three ways to run it."""
    import os
    import shlex
    import subprocess

    from fsdp_orch.backends.registry import load_profile
    from fsdp_orch.places.python_env import executable_here, is_this_python, what_python_has
    from fsdp_orch.vocab.errors import InputError

    profile, _ = load_profile(args.cluster)
    python = profile.python
    found = executable_here(python)
    tried = ""
    if found and not is_this_python(found) and not os.environ.get(FROM_ENV):
        has = what_python_has(found)
        if not has.missing:
            sys.stderr.write(f"fsdp-orch fit: {sys.executable} (the CLI's) has no torch: measuring "
                             f"with the profile's python {found}\n")
            sys.stderr.flush()
            env = {**os.environ, FROM_ENV: sys.executable or "python"}
            return subprocess.call([found, "-m", "fsdp_orch", "fit", *fit_argv(args)], env=env)
        tried = f", nor has the profile's python {python} ({' and '.join(has.missing)} missing)"
    elif not found:
        tried = f"; the profile's python {python} is not on this machine"
    example = found if found and not is_this_python(found) else "/path/to/train/bin/python"
    again = shlex.join([example, "-m", "fsdp_orch", "fit", *fit_argv(args)])
    raise InputError(f"fit measures the model with torch, and this CLI's python {sys.executable} "
                     f"has none{tried}: run it with your training environment's python "
                     f"({again}), set python: in the profile to that python (fit then runs on "
                     "it), or add torch to the CLI's environment (pipx inject fsdp-orch torch "
                     "transformers)", field="fit")
