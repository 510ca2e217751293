"""``fsdp-orch logs``: a job's per-rank output."""

from __future__ import annotations

from fsdp_orch.cli.common import JOB_ID_HELP, open_index, resolve_id
from fsdp_orch.vocab.inputs import job_id as checked_job_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "show a job's console output, node by node: the latest attempt's unless --attempt"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_id", metavar="JOB_ID", help=JOB_ID_HELP)
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing new output until the job ends")
    from fsdp_orch.cli.arg_types import whole

    p.add_argument("--rank", type=whole(),
                   help="only this global rank's lines (launcher: python keeps no "
                        "rank's output apart: see --node)")
    p.add_argument("--node", type=whole(), help="only this node's log (every rank on it)")
    p.add_argument("--attempt", type=whole(),
                   help="this attempt, numbered from 0 as in 'events' (default: the latest)")


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.control.logs import show_logs

    checked_job_id(args.job_id)
    with open_index(read_only=True) as index:
        job_id = resolve_id(index, args.job_id)
        return show_logs(index, job_id, rank=args.rank, node=args.node, attempt=args.attempt,
                         follow=args.follow)
