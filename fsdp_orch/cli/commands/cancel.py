"""``fsdp-orch cancel``: a job stopped, and every process it started."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK, JOB_ID_HELP, open_index, resolve_id
from fsdp_orch.vocab.inputs import job_id as checked_job_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "stop a job and every process it started"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_id", metavar="JOB_ID", help=JOB_ID_HELP)


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.control.job_control import cancel

    checked_job_id(args.job_id)  # an empty id is a prefix of every id: never cancel "some job"
    with open_index(read_only=True) as index:
        job_id = resolve_id(index, args.job_id)
        print(cancel(index, job_id))
    return EXIT_OK
