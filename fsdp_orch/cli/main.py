"""The ``fsdp-orch`` command line. Thin: parse arguments, call the library, print.

Only the standard library is imported at start-up; each command imports what it needs, so
``fsdp-orch --help`` and ``fsdp-orch status`` stay fast on a login node (no torch, no submitit).
"""

from __future__ import annotations

import os
import sys

from fsdp_orch.vocab.errors import FsdpOrchError, InputError, JobNotFound
from fsdp_orch.vocab.inputs import job_id as checked_job_id
from fsdp_orch.vocab.version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_WAIT_TIMED_OUT = 0, 1, 2, 3


def _open_index():  # type: ignore[no-untyped-def]
    """The index of the event logs under $FSDP_ORCH_HOME (os.path, not pathlib: `status` starts fast)."""
    from fsdp_orch.record.index import open_index

    return open_index()


# The commands that read or write $FSDP_ORCH_HOME: it must be the caller's own (see places/private).
_USE_HOME = ("submit", "status", "logs", "events", "cancel", "schedule", "scheduler", "report")


def _private_home() -> None:
    from fsdp_orch.places.home import home_dir, local_store_folders
    from fsdp_orch.places.private import ensure_private_root

    home = home_dir()
    ensure_private_root(home, create=False)  # made 0700 by whatever first writes there
    apart = local_store_folders(home)
    if apart:
        ensure_private_root(apart[0], above=apart[1:2] if os.environ.get("XDG_RUNTIME_DIR") else apart[1:],
                            create=False)


def _resolve_id(index, job_id: str) -> str:  # type: ignore[no-untyped-def]
    found = index.store.find_job_id(job_id)
    if found is None:
        index.ingest()  # submitted from another login node since the last look
        found = index.store.find_job_id(job_id)
    if found is None:
        raise JobNotFound(job_id)
    index.ingest([found])
    return found


# --- commands -------------------------------------------------------------------------------

def cmd_render(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fsdp_orch.control.job_control import plan_job
    from fsdp_orch.launch.plan import shown_plan
    from fsdp_orch.launch.render import write_artifacts

    planned = plan_job(Path(args.job), args.cluster, overrides=args.set,
                       accelerate_config=args.accelerate_config, job_id=args.job_id,
                       attempt=args.attempt)
    _say(planned.plan.notices)
    _say([planned.plan.standby_reason])
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


def cmd_submit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fsdp_orch.control.job_control import check_submission, plan_job, submit

    timeout = _wait_timeout(args)
    if args.init_from is not None:  # before the index is opened: bad input writes nothing
        from fsdp_orch.vocab.inputs import init_from

        init_from(args.init_from)
    if args.idempotency_key is not None and not args.idempotency_key.strip():
        raise InputError(f"expected a non-empty key; got {args.idempotency_key!r}", field="--idempotency-key")
    if args.init_optimizer and not args.init_from:
        raise InputError("only with --init-from (the checkpoint whose optimizer state to take)",
                         field="--init-optimizer")
    if args.resume and args.fresh:
        raise InputError("expected one of --resume (continue the checkpoint there) or --fresh (move it aside "
                         "and start over), not both", field="--resume/--fresh")
    choice = "resume" if args.resume else "fresh" if args.fresh else None
    check_submission(Path(args.job), args.cluster, overrides=args.set, accelerate_config=args.accelerate_config)
    # What the launch changes of the job's settings, as planned on this machine (the supervisor
    # records it as the job's launch_changed events).
    notices = plan_job(Path(args.job), args.cluster, overrides=args.set,
                       accelerate_config=args.accelerate_config).plan.notices
    with _open_index() as index:
        store = index.store
        job_id, created = submit(index, Path(args.job), args.cluster, overrides=args.set,
                                 accelerate_config=args.accelerate_config,
                                 idempotency_key=args.idempotency_key, init_from=args.init_from,
                                 init_optimizer=args.init_optimizer, checkpoint_choice=choice,
                                 say=lambda line: _say([line]))
        if created:
            _say(notices)
        if not args.wait:
            _print_submitted(args, job_id, created, store)
            return EXIT_OK
        if not args.json:
            print(job_id if created else f"{job_id} (already submitted with this idempotency key)",
                  flush=True)
        from fsdp_orch.control.follow import wait_for
        from fsdp_orch.vocab.states import TERMINAL_NAMES

        state = wait_for(index, job_id, show_progress=not args.json and sys.stderr.isatty(),
                         quiet=args.json, timeout=timeout)
        if args.json:
            print(store.status_json(job_id))
        else:
            _print_table([store.job(job_id)])
        if state not in TERMINAL_NAMES:
            print(f"fsdp-orch: stopped waiting after --timeout {args.timeout}; job {job_id} is {state} and "
                  "goes on (fsdp-orch status / wait with the Python API)", file=sys.stderr)
            return EXIT_WAIT_TIMED_OUT
        return EXIT_OK if state == "SUCCEEDED" else EXIT_JOB_FAILED


def _say(lines: tuple[str, ...] | list[str]) -> None:
    """What submit and render tell the user beside their output (stderr, one line each)."""
    for line in lines:
        print(f"fsdp-orch: {line}", file=sys.stderr, flush=True)


def _wait_timeout(args: argparse.Namespace) -> float | None:
    """Seconds ``submit --wait`` waits (``--timeout``); None: until the job ends."""
    if args.timeout is None:
        return None
    if not args.wait:
        raise InputError("only with --wait (how long to wait for the job to end)", field="--timeout")
    from fsdp_orch.jobspec.durations import parse_duration

    try:
        return parse_duration(args.timeout)
    except ValueError as exc:
        raise InputError(str(exc), field="--timeout") from None


def _print_submitted(args: argparse.Namespace, job_id: str, created: bool, store) -> None:  # type: ignore[no-untyped-def]
    import json

    if args.json:
        print(json.dumps({"id": job_id, "created": created}))
    else:
        print(job_id)


def cmd_status(args: argparse.Namespace) -> int:
    if args.job_id is not None:  # `status ""` is a mistake (an unset variable), not "every job"
        checked_job_id(args.job_id)
    with _open_index() as index:
        store = index.store
        if args.job_id is not None:
            job_id = _resolve_id(index, args.job_id)
            from fsdp_orch.control.liveness import refresh

            refresh(index, [job_id])
            if args.json:
                print(store.status_json(job_id))
            else:
                _print_table([store.job(job_id)], detail=True)
            return EXIT_OK
        from fsdp_orch.control.liveness import refresh

        index.ingest()
        refresh(index, None)
        if args.json:
            sys.stdout.flush()
            sys.stdout.buffer.write(store.status_json_bytes() + b"\n")
            return EXIT_OK
        _print_table(store.jobs(limit=None if args.all else args.limit))
        return EXIT_OK


def _print_table(jobs, detail: bool = False) -> None:  # type: ignore[no-untyped-def]
    from fsdp_orch.cli.status_table import format_jobs

    print(format_jobs(jobs, detail=detail))


def cmd_logs(args: argparse.Namespace) -> int:
    from fsdp_orch.control.logs import show_logs

    checked_job_id(args.job_id)
    with _open_index() as index:
        job_id = _resolve_id(index, args.job_id)
        return show_logs(index, job_id, rank=args.rank, node=args.node, attempt=args.attempt, follow=args.follow)


def cmd_events(args: argparse.Namespace) -> int:
    from fsdp_orch.cli.event_lines import show_events

    checked_job_id(args.job_id)
    with _open_index() as index:
        job_id = _resolve_id(index, args.job_id)
        run_dir = index.store.run_dir(job_id)
    show_events(run_dir, as_json=args.json, follow=args.follow)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from fsdp_orch.places.private import write_private
    from fsdp_orch.record.event_types import parse_event
    from fsdp_orch.record.events import read_job
    from fsdp_orch.record.fold import fold_lines
    from fsdp_orch.report.page import render

    checked_job_id(args.job_id)
    with _open_index() as index:
        job_id = _resolve_id(index, args.job_id)
        run_dir = index.store.run_dir(job_id)
    lines = read_job(run_dir)[0]
    status = fold_lines(lines, job_id)  # what status --json says, folded from the same lines as the page
    if status is None:
        raise JobNotFound(job_id)
    events = [e for e in (parse_event(line) for line in lines) if e is not None]
    out = args.out or f"report-{job_id}.html"
    if os.path.isdir(out):
        raise InputError("expected a file to write, not a directory", field="--out", file=out)
    try:
        write_private(out, render(status, events))
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc.strerror}", field="--out", file=out) from None
    print(out)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from fsdp_orch.cli.doctor import run_doctor

    text, ok = run_doctor(args.cluster, args.json)
    print(text)
    return EXIT_OK if ok else EXIT_JOB_FAILED


def cmd_cancel(args: argparse.Namespace) -> int:
    from fsdp_orch.control.job_control import cancel

    checked_job_id(args.job_id)  # an empty id is a prefix of every id: never cancel "some job"
    with _open_index() as index:
        job_id = _resolve_id(index, args.job_id)
        print(cancel(index, job_id))
    return EXIT_OK


def cmd_diagnose(args: argparse.Namespace) -> int:
    import json

    from fsdp_orch.supervise.diagnose import diagnose_text

    results = []
    for name in args.files:
        try:
            with open(name, "rb") as f:
                text = f.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", file=name) from None
        results.append({"file": name, **diagnose_text(text).to_json()})
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
        return EXIT_OK
    for r in results:
        retry = "retryable" if r["retryable"] else "not retryable"
        where = f" (line {r['line']})" if r["line"] else ""
        print(f"{r['file']}: {r['category']} ({retry}){where}")
        if r["evidence"]:
            print(f"  {r['evidence']}")
        print(f"  hint: {r['hint']}")
    return EXIT_OK


def cmd_clusters(args: argparse.Namespace) -> int:
    import json

    from fsdp_orch.backends.registry import parse_profile
    from fsdp_orch.jobspec.profiles import discover

    refs = discover()
    rows = []
    for name, ref in sorted(refs.items()):
        try:
            profile = parse_profile(ref.path)
            kind, desc = profile.kind, profile.description
        except FsdpOrchError as exc:
            kind, desc = "?", f"invalid: {exc}"
        rows.append({"name": name, "kind": kind, "origin": ref.origin, "path": str(ref.path),
                     "description": desc})
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from fsdp_orch.cli.status_table import format_rows

    print(format_rows(["name", "kind", "origin", "path"], rows))
    return EXIT_OK


def _schedule_of(args: argparse.Namespace):  # type: ignore[no-untyped-def]
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
    return parse_schedule({field: value for field, (_, value) in given.items() if value is not None},
                          labels={field: arg for field, (arg, _) in given.items()})


def cmd_schedule(args: argparse.Namespace) -> int:
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


def cmd_scheduler(args: argparse.Namespace) -> int:
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
        scheduler = Scheduler(schedules, IndexJobs(index, pause_after_submit_hook()), clock, sleep, say)
        if args.once:
            scheduler.run_due()
            return EXIT_OK
        say(f"scheduler: {len(schedules.all())} schedule(s) in {schedules.root}")
        scheduler.run_forever()
    return EXIT_OK


# --- parser ---------------------------------------------------------------------------------

STATUS_LIMIT = 30  # rows of the status table without --all
_COMMANDS = ("render", "submit", "status", "logs", "events", "cancel", "diagnose", "clusters", "doctor",
             "schedule", "scheduler", "report")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="fsdp-orch",
        description="Run multi-node PyTorch FSDP jobs on real clusters and keep them alive.")
    parser.add_argument("--version", action="version", version=f"fsdp-orch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    real_add = sub.add_parser

    def add_parser(name: str, **kwargs):  # type: ignore[no-untyped-def]
        if only is not None and name != only:
            return argparse.ArgumentParser(add_help=False)  # built, never attached: cheap
        return real_add(name, **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    def job_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("job", metavar="JOB_YAML", help="the job spec")
        p.add_argument("--cluster", required=True, help="cluster profile name (see 'fsdp-orch clusters') or a YAML path")
        p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                       help="override a job spec field, e.g. --set nodes=2 (repeatable)")
        p.add_argument("--accelerate-config", metavar="FILE",
                       help="an 'accelerate config' YAML whose FSDP options fill the job's fsdp:")

    p = sub.add_parser("render", help="print every script and config submit would write or run; runs nothing")
    job_options(p)
    p.add_argument("--out", metavar="DIR", help="write the artifacts into DIR instead of printing them")
    p.add_argument("--job-id", default="JOBID", help="job id to render with (default: JOBID)")
    p.add_argument("--attempt", type=int, default=0, help="attempt number to render, from 0 (default: 0, the first)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("submit", help="submit a job; prints its id")
    job_options(p)
    p.add_argument("--wait", action="store_true", help="wait for the job to end; exit 1 if it failed or was cancelled")
    p.add_argument("--timeout", metavar="D", help="with --wait: wait at most D (90s, 30m, 2h); then exit 3, the "
                   "job goes on")
    p.add_argument("--json", action="store_true", help="print JSON ({\"id\": ...}; with --wait the final status)")
    p.add_argument("--idempotency-key", metavar="KEY",
                   help="submitting twice with the same key returns the first job instead of a new one")
    p.add_argument("--init-from", metavar="JOB_ID|PATH",
                   help="a warm start: begin at step 0 from the weights of that job's latest complete "
                        "checkpoint (or of that checkpoint, or the latest one in that folder)")
    p.add_argument("--init-optimizer", action="store_true",
                   help="with --init-from: take the optimizer state too (default: weights only)")
    p.add_argument("--resume", action="store_true",
                   help="the checkpoint folder holds a checkpoint of a job that ended SUCCEEDED: continue it")
    p.add_argument("--fresh", action="store_true",
                   help="move the checkpoints already in the checkpoint folder aside (kept) and start over")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="show jobs (a table, or --json)")
    p.add_argument("job_id", nargs="?", metavar="JOB_ID")
    p.add_argument("--json", action="store_true", help="JSON: a list of all jobs, or one object with JOB_ID")
    p.add_argument("--all", action="store_true", help="table: show every job, not only the latest")
    p.add_argument("--limit", type=int, default=STATUS_LIMIT,
                   help=f"table: how many recent jobs (default {STATUS_LIMIT})")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="show a job's per-rank output")
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the job ends")
    p.add_argument("--rank", type=int, help="only this global rank's lines (launcher: python keeps no "
                   "rank's output apart: see --node)")
    p.add_argument("--node", type=int, help="only this node's log (every rank on it)")
    p.add_argument("--attempt", type=int, help="this attempt, numbered from 0 as in 'events' (default: the latest)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("events", help="a job's event log: submitted, attempts, failures, restarts, the end")
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until the job ends")
    p.add_argument("--json", action="store_true", help="one JSON object per line, as written")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("report", help="write one self-contained HTML page of a job: timeline, loss, goodput, failures")
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("--out", metavar="FILE", help="where to write it (default: report-JOB_ID.html here)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("cancel", help="stop a job and every process it started")
    p.add_argument("job_id", metavar="JOB_ID")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("diagnose", help="classify the failure in log files (category, retryable, evidence)")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="one JSON object per file (a list for several files)")
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("doctor", help="check what a job needs here (and on --cluster NAME), each with a fix")
    p.add_argument("--cluster", help="also check this cluster profile's machines")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("clusters", help="list cluster profiles and where each came from")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_clusters)

    p = sub.add_parser("schedule", help="recurring jobs: add, list, remove, pause, resume, events")
    actions = p.add_subparsers(dest="schedule_command", metavar="ACTION")
    actions.required = True
    a = actions.add_parser("add", help="submit JOB_YAML at each tick of a cron expression")
    a.add_argument("name", metavar="NAME")
    job_options(a)
    a.add_argument("--cron", required=True, metavar="EXPR", help="five cron fields, e.g. '0 3 * * *'")
    a.add_argument("--tz", metavar="ZONE",
                   help="the time zone the cron's hours are in (IANA name; default UTC)")
    a.add_argument("--concurrency", metavar="forbid|replace|allow",
                   help="a tick while the previous run is active: skip it (forbid, default), cancel "
                        "the previous run (replace), or run both (allow)")
    a.add_argument("--init-from-previous", action="store_true",
                   help="each run starts from the latest checkpoint of the last successful run")
    a.add_argument("--max-catch-up", type=int, metavar="N",
                   help="ticks missed while no scheduler ran: run at most N of them, the newest "
                        "(default 1; 0: none)")
    a.add_argument("--json", action="store_true")
    a = actions.add_parser("list", help="the schedules, their last and next ticks")
    a.add_argument("--json", action="store_true")
    for action, text in (("remove", "delete a schedule (its jobs are kept)"),
                         ("pause", "stop submitting ticks"),
                         ("resume", "submit ticks again, from now on (paused ticks are not run)")):
        actions.add_parser(action, help=text).add_argument("name", metavar="NAME")
    a = actions.add_parser("events", help="what a schedule did: ticks submitted, skipped, missed")
    a.add_argument("name", metavar="NAME")
    a.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("scheduler", help="run the schedules' ticks (a foreground loop for systemd)")
    actions = p.add_subparsers(dest="scheduler_command", metavar="ACTION")
    actions.required = True
    a = actions.add_parser("run", help="submit each due tick; loop until stopped")
    a.add_argument("--once", action="store_true",
                   help="handle the ticks due now and exit (for a system cron entry every minute)")
    p.set_defaults(func=cmd_scheduler)

    return parser


def _plain_status(argv: list[str]):  # type: ignore[no-untyped-def]
    """``status`` and ``status --json``, what pipelines poll, without argparse (a fifth of the
    call's time); None for any other command line."""
    if argv not in (["status"], ["status", "--json"]):
        return None
    from types import SimpleNamespace

    return SimpleNamespace(command="status", func=cmd_status, job_id=None, json=len(argv) == 2,
                           all=False, limit=STATUS_LIMIT)


def main(argv: list[str] | None = None) -> int:
    os.umask(0o077)  # what the CLI and its children create is this user's alone (places/private)
    argv = sys.argv[1:] if argv is None else argv
    args = _plain_status(argv)
    if args is None:
        # Only the subcommand being run gets its parser built (start-up time on a login node).
        wanted = next((a for a in argv if not a.startswith("-")), None)
        parser = build_parser(only=wanted if wanted in _COMMANDS else None)
        args = parser.parse_args(argv)
    try:
        if getattr(args, "command", None) in _USE_HOME:
            _private_home()
        return int(args.func(args))
    except FsdpOrchError as exc:
        print(f"fsdp-orch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
