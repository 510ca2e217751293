"""``fsdp-orch events``: a job's event log."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK, JOB_ID_HELP, open_index, resolve_id
from fsdp_orch.vocab.inputs import job_id as checked_job_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "a job's event log: submitted, attempts, checkpoints, failures, notices, restarts, the end"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_id", metavar="JOB_ID", help=JOB_ID_HELP)
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing new events until the job ends")
    p.add_argument("--json", action="store_true", help="one JSON object per line, as written")


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.cli.event_lines import show_events

    checked_job_id(args.job_id)
    with open_index(read_only=True) as index:
        job_id = resolve_id(index, args.job_id)
        run_dir = index.store.run_dir(job_id)
        assert run_dir is not None  # resolve_id found it
    show_events(run_dir, as_json=args.json, follow=args.follow)
    return EXIT_OK
