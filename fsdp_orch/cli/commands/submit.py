"""``fsdp-orch submit``: a job submitted (``--wait``: and followed to its end)."""

from __future__ import annotations

import sys

from fsdp_orch.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WAIT_TIMED_OUT,
    add_job_options,
    print_table,
    say,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from fsdp_orch.control.planning import PlannedSubmission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.record.index import JobIndex

HELP = "submit a job; prints its id"
USES_HOME = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_job_options(p)
    p.add_argument("--wait", action="store_true",
                   help="wait for the job to end; exit 1 if it failed or was cancelled")
    p.add_argument("--timeout", metavar="D",
                   help="with --wait: wait at most D (90s, 30m, 2h); then exit 3, the "
                   "job goes on")
    p.add_argument("--json", action="store_true",
                   help="print JSON ({\"id\": ...}; with --wait the final status)")
    p.add_argument("--idempotency-key", metavar="KEY",
                   help="submitting twice with the same key returns the "
                        "first job instead of a new one")
    p.add_argument("--init-from", metavar="JOB_ID|PATH",
                   help="a warm start: begin at step 0 from the weights of that job's "
                        "latest complete checkpoint (or of that checkpoint, "
                        "or the latest one in that folder)")
    p.add_argument("--init-optimizer", action="store_true",
                   help="with --init-from: take the optimizer state too (default: weights only)")
    p.add_argument("--resume", action="store_true",
                   help="the checkpoint folder holds a checkpoint of a job that "
                        "ended SUCCEEDED: continue it")
    p.add_argument("--fresh", action="store_true",
                   help="move the checkpoints already in the checkpoint "
                        "folder aside (kept) and start over")
    p.add_argument("--no-fit-check", action="store_true",
                   help="submit a job with a fit: block without estimating first whether it fits "
                        "the cluster's GPUs (by default one that does not is refused, exit 2)")


def submit_request(args: argparse.Namespace) -> SubmitRequest:
    """The flags as the request the Python API makes too; its rules are checked in making it."""
    from pathlib import Path

    from fsdp_orch.control.submit_request import CLI_WORDS, SubmitRequest

    return SubmitRequest(
        Path(args.job), args.cluster, tuple(args.set), accelerate_config=args.accelerate_config,
        wait=args.wait, timeout=args.timeout, idempotency_key=args.idempotency_key,
        init_from=args.init_from, init_optimizer=args.init_optimizer, resume=args.resume,
        fresh=args.fresh, words=CLI_WORDS)


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.control.job_control import submit
    from fsdp_orch.control.planning import plan_submission
    from fsdp_orch.record.index import open_index_for_submit

    request = submit_request(args)
    planned = plan_submission(request)  # before the index is opened: bad input writes nothing
    if not args.no_fit_check and planned.submission.job.fit is not None:
        checked = _fit_checked(args, planned)
        if checked is None:
            return EXIT_USAGE
        planned = checked
    with open_index_for_submit() as index:
        job_id, created = submit(index, request, planned, say=lambda line: say([line]))
        if created:
            # What the launch changes of the job's settings, as planned (the supervisor records
            # it as the job's launch_changed events).
            say(planned.plan.notices)
        if not args.wait:
            _print_submitted(args, job_id, created)
            return EXIT_OK
        return _wait(args, index, job_id, created, request.wait_s)


def _fit_checked(args: argparse.Namespace,
                 planned: PlannedSubmission) -> PlannedSubmission | None:
    """The fit check (``fit.at_submit``). None: the job does not fit and is refused, its table and
    what would make it fit on stderr. Else one line says the verdict, or why there is none, and
    the planned submission carries the estimate (recorded with the job)."""
    from dataclasses import replace
    from pathlib import Path

    from fsdp_orch.cli.fit_report import report_text
    from fsdp_orch.fit.at_submit import Outcome, check_at_submit
    from fsdp_orch.places.builtin import home

    submission = planned.submission
    check = check_at_submit(submission.job, submission.profile, Path(args.job), home=home())
    found = check.found
    if check.outcome is Outcome.DOES_NOT_FIT and found is not None:
        sys.stderr.write(report_text(args.job, args.cluster, found, check.suggestions))
        say([f"not submitted: the job does not fit the GPUs of {args.cluster} "
             f"({found.budget.verdict}); change it as above, or submit with --no-fit-check"])
        return None
    say([check.note] if check.note else [])
    if found is None:
        return planned
    b = found.budget
    return replace(planned, fit_estimate=(round(b.peak_gib, 3), round(sum(b.rows.values()), 3),
                                          b.gpu_memory_gib))


def _wait(args: argparse.Namespace, index: JobIndex, job_id: str, created: bool,
          timeout: float | None) -> int:
    """``--wait``: follow the job to its end (or ``--timeout``), then print its status."""
    from fsdp_orch.control.follow import wait_for
    from fsdp_orch.vocab.states import TERMINAL_NAMES

    if not args.json:
        print(job_id if created else f"{job_id} (already submitted with this idempotency key)",
              flush=True)
    state = wait_for(index, job_id, show_progress=not args.json and sys.stderr.isatty(),
                     quiet=args.json, say_failures=True, timeout=timeout)
    if args.json:
        print(index.store.status_json(job_id))
    else:
        print_table([index.store.job_as_shown(job_id)])
    if state not in TERMINAL_NAMES:
        print(f"fsdp-orch: stopped waiting after --timeout {args.timeout}; job {job_id} is {state} "
              "and goes on (fsdp-orch status / wait with the Python API)", file=sys.stderr)
        return EXIT_WAIT_TIMED_OUT
    return EXIT_OK if state == "SUCCEEDED" else EXIT_JOB_FAILED


def _print_submitted(args: argparse.Namespace, job_id: str, created: bool) -> None:
    if args.json:
        import json

        print(json.dumps({"id": job_id, "created": created}))
    else:
        print(job_id)
