"""``fsdp-orch submit``: a job submitted (``--wait``: and followed to its end)."""

from __future__ import annotations

import sys

from fsdp_orch.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WAIT_TIMED_OUT,
    GPU_MEMORY_HELP,
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
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help=GPU_MEMORY_HELP + ", and of the cluster's GRES: what the fit check holds "
                        "the job against (not with --no-fit-check)")


def submit_request(args: argparse.Namespace) -> SubmitRequest:
    """The flags as the request the Python API makes too; its rules are checked in making it."""
    from pathlib import Path

    from fsdp_orch.control.submit_request import CLI_WORDS, SubmitRequest

    return SubmitRequest(
        Path(args.job), args.cluster, tuple(args.set), accelerate_config=args.accelerate_config,
        wait=args.wait, timeout=args.timeout, idempotency_key=args.idempotency_key,
        init_from=args.init_from, init_optimizer=args.init_optimizer, resume=args.resume,
        fresh=args.fresh, fit_check=not args.no_fit_check, gpu_memory=args.gpu_memory,
        words=CLI_WORDS)


def run(args: argparse.Namespace) -> int:
    from fsdp_orch.control.job_control import submit
    from fsdp_orch.control.planning import plan_submission
    from fsdp_orch.record.index import open_index_for_submit

    request = submit_request(args)
    planned = plan_submission(request)  # before the index is opened: bad input writes nothing
    checked = _fit_checked(args, request, planned)
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


def _fit_checked(args: argparse.Namespace, request: SubmitRequest,
                 planned: PlannedSubmission) -> PlannedSubmission | None:
    """The fit check (``control.fit_gate``), said on stderr. None: the job does not fit and is
    refused, its table and what would make it fit said first. Else the planned submission,
    carrying the estimate where there was one."""
    from fsdp_orch.control.fit_gate import JobDoesNotFit, fit_gated
    from fsdp_orch.places.builtin import home

    try:
        gated = fit_gated(request, planned, home=home())
    except JobDoesNotFit as refused:
        from fsdp_orch.cli.fit_report import report_text

        sys.stderr.write(report_text(args.job, args.cluster, refused.estimate,
                                     refused.suggestions))
        say([refused.detail])
        return None
    say(gated.notes)
    return gated.planned


def _wait(args: argparse.Namespace, index: JobIndex, job_id: str, created: bool,
          timeout: float | None) -> int:
    """``--wait``: follow the job to its end (or ``--timeout``), then print its status."""
    from fsdp_orch.control.follow import wait_for
    from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState

    if not args.json:
        print(job_id if created else f"{job_id} (already submitted with this idempotency key)",
              flush=True)
    state = wait_for(index, job_id, show_progress=not args.json and sys.stderr.isatty(),
                     quiet=args.json, say_failures=True, timeout=timeout)
    if args.json:
        print(index.store.status_json(job_id))
    else:
        shown = index.store.job_as_shown(job_id)
        assert shown is not None  # submitted into this index
        print_table([shown])
    if state not in TERMINAL_NAMES:
        print(f"fsdp-orch: stopped waiting after --timeout {args.timeout}; job {job_id} is {state} "
              "and goes on (fsdp-orch status / wait with the Python API)", file=sys.stderr)
        return EXIT_WAIT_TIMED_OUT
    return EXIT_OK if state == JobState.SUCCEEDED else EXIT_JOB_FAILED


def _print_submitted(args: argparse.Namespace, job_id: str, created: bool) -> None:
    if args.json:
        import json

        print(json.dumps({"id": job_id, "created": created}))
    else:
        print(job_id)
