"""``fsdp-orch status``: the jobs (a table, or ``--json``),
each kind's active jobs settled first."""

from __future__ import annotations

import sys

from fsdp_orch.cli.common import EXIT_OK, JOB_ID_HELP, open_index, print_table, resolve_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace

HELP = "show jobs (a table, or --json); with JOB_ID, one job in detail"
USES_HOME = True
STATUS_LIMIT = 30  # rows of the status table without --all


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job_id", nargs="?", metavar="JOB_ID",
                   help=f"{JOB_ID_HELP}; none: every job")
    p.add_argument("--json", action="store_true",
                   help="JSON: a list of all jobs, or one object with JOB_ID")
    p.add_argument("--all", action="store_true", help="table: show every job, not only the latest")
    from fsdp_orch.cli.arg_types import whole

    p.add_argument("--limit", type=whole(1), default=STATUS_LIMIT,
                   help=f"table: how many recent jobs (default {STATUS_LIMIT})")


def run(args: argparse.Namespace) -> int:
    if args.job_id is not None:  # `status ""` is a mistake (an unset variable), not "every job"
        from fsdp_orch.vocab.inputs import job_id as checked_job_id  # its regexes: only with an id

        checked_job_id(args.job_id)
    with open_index(read_only=True) as index:
        store = index.store
        if args.job_id is not None:
            job_id = resolve_id(index, args.job_id)
            from fsdp_orch.control.liveness import refresh

            refresh(index, [job_id])
            if args.json:
                print(store.status_json(job_id))
            else:
                shown = store.job_as_shown(job_id)
                assert shown is not None  # resolve_id found it
                print_table([shown], detail=True)
            return EXIT_OK
        from fsdp_orch.control.liveness import refresh

        index.ingest()
        refresh(index, None)
        if args.json:
            sys.stdout.flush()
            out = sys.stdout.buffer
            listing = store.status_json_bytes()
            assert listing is not None  # None only for a job_id not found
            out.write(listing)  # `+ b"\n"` would copy megabytes (7 ms)
            out.write(b"\n")
            out.flush()
            return EXIT_OK
        print_table(store.jobs(limit=None if args.all else args.limit))
        return EXIT_OK


def plain(argv: list[str]) -> SimpleNamespace | None:
    """``status`` and ``status --json``, what pipelines poll, without argparse (a fifth of the
    call's time); None for any other command line."""
    if argv not in (["status"], ["status", "--json"]):
        return None
    from types import SimpleNamespace

    return SimpleNamespace(command="status", func=run, job_id=None, json=len(argv) == 2,
                           all=False, limit=STATUS_LIMIT)
