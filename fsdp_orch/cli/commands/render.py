"""``fsdp-orch render``: every script and config submit would write or run; runs nothing."""

from __future__ import annotations

import sys

from fsdp_orch.cli.common import EXIT_OK, add_job_options, say
from fsdp_orch.vocab.errors import InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from fsdp_orch.control.planning import PlannedJob

HELP = "print every script and config submit would write or run; runs nothing"
USES_HOME = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_job_options(p)
    p.add_argument("--out", metavar="DIR",
                   help="write the artifacts into DIR instead of printing them")
    from fsdp_orch.cli.arg_types import job_id_text, whole

    p.add_argument("--job-id", default="JOBID", type=job_id_text,
                   help="job id to render with (default: JOBID)")
    p.add_argument("--attempt", type=whole(), default=0,
                   help="attempt number to render, from 0 (default: 0, the first)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fsdp_orch.control.planning import plan_job
    from fsdp_orch.launch.plan import shown_plan
    from fsdp_orch.launch.render import write_artifacts

    planned = plan_job(Path(args.job), args.cluster, overrides=args.set,
                       accelerate_config=args.accelerate_config, job_id=args.job_id,
                       attempt=args.attempt)
    say(planned.plan.notices)
    say(_entry_notes(planned))
    say([planned.plan.standby_reason])
    # A preview never holds a secret: references show where their values come from, and plain
    # values of secret-named variables and headers are masked (in files written with --out too).
    artifacts = planned.submission.render(shown_plan(planned.plan))
    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise InputError("expected a directory", field="--out", file=str(out))
        for path in write_artifacts(artifacts, out):
            print(path)
        return EXIT_OK
    for art in artifacts:
        sys.stdout.write(f"==> {art.path} <==\n{art.text}")
        if not art.text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.write("\n")
    return EXIT_OK


def _entry_notes(planned: PlannedJob) -> list[str]:
    """What the job's entry (read here) says of its spec: an ``fsdp:`` block it never reads, and a
    fault kind submit would refuse."""
    from fsdp_orch.control.entry_checks import fsdp_block_note, read_entry, unmet_fault

    entry = read_entry(planned.plan.job, planned.submission.job_dir)
    notes = [fsdp_block_note(planned.plan.job, entry)]
    refused = unmet_fault(dict(planned.plan.env), entry)
    if refused:
        notes.append(f"submit refuses env.FSDP_ORCH_FAULT: {refused}")
    return [note for note in notes if note]
