"""``fsdp-orch schedule``: recurring jobs (add, list, remove, pause, resume, events)."""

from __future__ import annotations

from fsdp_orch.cli.common import EXIT_OK, add_job_options

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from fsdp_orch.jobspec.schedule import Schedule

HELP = "recurring jobs: add, list, remove, pause, resume, events"
USES_HOME = True
NAME_HELP = "the schedule's name: letters, digits, ., _ and -, starting with a letter or digit"


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="schedule_command", metavar="ACTION")
    actions.required = True
    a = actions.add_parser("add", help="submit JOB_YAML at each tick of a cron expression")
    a.add_argument("name", metavar="NAME", help=NAME_HELP)
    add_job_options(a)
    a.add_argument("--cron", required=True, metavar="EXPR",
                   help="five cron fields, e.g. '0 3 * * *'")
    a.add_argument("--tz", metavar="ZONE",
                   help="the time zone the cron's hours are in (IANA name; default UTC)")
    a.add_argument("--concurrency", metavar="forbid|replace|allow",
                   help="a tick while the previous run is active: skip it (forbid, default), "
                        "cancel the previous run (replace), or run both (allow)")
    a.add_argument("--init-from-previous", action="store_true",
                   help="each run starts from the latest checkpoint of the last successful run")
    from fsdp_orch.cli.arg_types import whole

    a.add_argument("--max-catch-up", type=whole(), metavar="N",
                   help="ticks missed while no scheduler ran: run at most N of them, the newest "
                        "(default 1; 0: none)")
    a.add_argument("--json", action="store_true",
                   help="print the new schedule as one JSON object")
    a = actions.add_parser("list", help="the schedules, their last and next ticks")
    a.add_argument("--json", action="store_true", help="print a JSON list, one object a schedule")
    for action, text in (("remove", "delete a schedule (its jobs are kept)"),
                         ("pause", "stop submitting ticks"),
                         ("resume", "submit ticks again, from now on (paused ticks are not run)")):
        actions.add_parser(action, help=text).add_argument("name", metavar="NAME",
                                                           help=NAME_HELP)
    a = actions.add_parser("events", help="what a schedule did: ticks submitted, skipped, missed")
    a.add_argument("name", metavar="NAME", help=NAME_HELP)
    a.add_argument("--json", action="store_true", help="one JSON object per line, as written")


def _schedule_of(args: argparse.Namespace) -> Schedule:
    """``schedule add``'s arguments as the schedule model (the one place they meet); a bad value is
    named by the argument it came from. An option not given (None) takes the model's default."""
    from fsdp_orch.jobspec.schedule import parse_schedule

    given = {  # field: (the argument, its value)
        "name": ("NAME", args.name), "cron": ("--cron", args.cron), "tz": ("--tz", args.tz),
        "cluster": ("--cluster", args.cluster), "job_file": ("JOB_YAML", args.job),
        "concurrency": ("--concurrency", args.concurrency),
        "init_from_previous": ("--init-from-previous", args.init_from_previous),
        "max_catch_up": ("--max-catch-up", args.max_catch_up), "overrides": ("--set", args.set),
        "accelerate_config": ("--accelerate-config", args.accelerate_config)}
    return parse_schedule({field: value for field, (_, value) in given.items()
                           if value is not None},
                          labels={field: arg for field, (arg, _) in given.items()})


def run(args: argparse.Namespace) -> int:
    import json

    from fsdp_orch.schedule import commands

    action = args.schedule_command
    if action == "add":
        schedule = commands.add_schedule(_schedule_of(args))
        row = next(r for r in commands.schedule_rows() if r["name"] == schedule.name)
        print(json.dumps(row) if args.json else f"{schedule.name}: next tick {row['next_tick']}")
    elif action == "list":
        rows = commands.schedule_rows()
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            from fsdp_orch.cli.status_table import format_rows

            print(format_rows(["name", "cron", "tz", "cluster", "concurrency", "state", "last_tick",
                               "last_job", "next_tick"], rows))
    elif action == "remove":
        commands.book().remove(args.name)
        print(f"removed schedule {args.name} (its jobs are kept)")
    elif action in ("pause", "resume"):
        commands.set_paused(args.name, paused=action == "pause")
        print(f"{args.name}: {'paused' if action == 'pause' else 'active'}")
    elif action == "events":
        from fsdp_orch.cli.event_lines import SCHEDULE_SHOWN, format_event

        for event in commands.book().events(args.name):
            print(json.dumps(event) if args.json else format_event(event, SCHEDULE_SHOWN))
    return EXIT_OK
