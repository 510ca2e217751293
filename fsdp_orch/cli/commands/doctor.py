"""``fsdp-orch doctor``: what a job needs here (and on ``--cluster``), each check with a fix."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_JOB_FAILED, EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "check what a job needs here (and on --cluster NAME), each with a fix"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", help="also check this cluster profile's machines")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: ok, and each check with its fix")


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.cli.doctor import run_doctor

    text, ok = run_doctor(args.cluster, args.json)
    print(text)
    return EXIT_OK if ok else EXIT_JOB_FAILED
