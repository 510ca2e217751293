"""``fsdp-orch report``: one self-contained HTML page of a job."""

from __future__ import annotations

import os

from fsdp_orch.cli.common import EXIT_OK, JOB_ID_HELP, open_index, resolve_id
from fsdp_orch.vocab.errors import InputError, JobNotFound
from fsdp_orch.vocab.inputs import job_id as checked_job_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "write one self-contained HTML page of a job: timeline, loss, goodput, failures, notices"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_id", metavar="JOB_ID", help=JOB_ID_HELP)
    p.add_argument("--out", metavar="FILE",
                   help="where to write it (default: report-JOB_ID.html here)")


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.places.private import write_private
    from fsdp_orch.record.event_types import parse_event
    from fsdp_orch.record.events import read_job
    from fsdp_orch.record.fold import fold_lines
    from fsdp_orch.record.loss_points import read_points
    from fsdp_orch.report.page import render

    checked_job_id(args.job_id)
    with open_index(read_only=True) as index:
        job_id = resolve_id(index, args.job_id)
        run_dir = index.store.run_dir(job_id)
        assert run_dir is not None  # resolve_id found it
    lines = read_job(run_dir)[0]
    # what status --json says, folded from the same lines as the page
    status = fold_lines(lines, job_id)
    if status is None:
        raise JobNotFound(job_id)
    events = [e for e in (parse_event(line) for line in lines) if e is not None]
    out = args.out or f"report-{job_id}.html"
    if os.path.isdir(out):
        raise InputError("expected a file to write, not a directory", field="--out", file=out)
    try:
        write_private(out, render(status, events, read_points(run_dir)))
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc.strerror}", field="--out",
                         file=out) from None
    print(out)
    return EXIT_OK
