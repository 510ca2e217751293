"""``fsdp-orch submit``: a job submitted (``--wait``: and followed to its end)."""

from __future__ import annotations

import sys

from fsdp_orch.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_WAIT_TIMED_OUT,
    add_job_options,
    open_index,
    print_table,
    say,
)
from fsdp_orch.vocab.errors import InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

HELP = "submit a job; prints its id"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_job_options(p)
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


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fsdp_orch.control.job_control import check_submission, submit
    from fsdp_orch.control.planning import plan_job

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
    with open_index() as index:
        store = index.store
        job_id, created = submit(index, Path(args.job), args.cluster, overrides=args.set,
                                 accelerate_config=args.accelerate_config,
                                 idempotency_key=args.idempotency_key, init_from=args.init_from,
                                 init_optimizer=args.init_optimizer, checkpoint_choice=choice,
                                 say=lambda line: say([line]))
        if created:
            say(notices)
        if not args.wait:
            _print_submitted(args, job_id, created)
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
            print_table([store.job(job_id)])
        if state not in TERMINAL_NAMES:
            print(f"fsdp-orch: stopped waiting after --timeout {args.timeout}; job {job_id} is {state} and "
                  "goes on (fsdp-orch status / wait with the Python API)", file=sys.stderr)
            return EXIT_WAIT_TIMED_OUT
        return EXIT_OK if state == "SUCCEEDED" else EXIT_JOB_FAILED


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


def _print_submitted(args: argparse.Namespace, job_id: str, created: bool) -> None:
    if args.json:
        import json

        print(json.dumps({"id": job_id, "created": created}))
    else:
        print(job_id)
