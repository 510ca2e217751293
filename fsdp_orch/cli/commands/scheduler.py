"""``fsdp-orch scheduler run``: the schedules' ticks, in a foreground loop (for systemd)."""

from __future__ import annotations

import sys

from fsdp_orch.cli.common import EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "run the schedules' ticks (a foreground loop for systemd)"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="scheduler_command", metavar="ACTION")
    actions.required = True
    a = actions.add_parser("run", help="submit each due tick; loop until stopped")
    a.add_argument("--once", action="store_true",
                   help="handle the ticks due now and exit (for a system cron entry every minute)")


def run(args: argparse.Namespace) -> int:
    import signal

    from fsdp_orch.record.index import open_index
    from fsdp_orch.schedule.clock import scheduler_clock
    from fsdp_orch.schedule.commands import book
    from fsdp_orch.schedule.jobs import IndexJobs, pause_after_submit_hook
    from fsdp_orch.schedule.scheduler import Scheduler

    clock, sleep = scheduler_clock()
    schedules = book()

    def say(line: str) -> None:
        print(line, flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # systemd's stop
    with schedules.lock(), open_index() as index:
        scheduler = Scheduler(schedules, IndexJobs(index, pause_after_submit_hook()), clock, sleep,
                              say)
        if args.once:
            scheduler.run_due()
            return EXIT_OK
        say(f"scheduler: {len(schedules.all())} schedule(s) in {schedules.root}")
        scheduler.run_forever()
    return EXIT_OK
