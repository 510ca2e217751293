"""The Python API: what the CLI does, for a pipeline written in Python
(an Airflow task, a notebook).

    import fsdp_orch

    job = fsdp_orch.submit("job.yaml", cluster="slurm", overrides={"args": ["--lr", "3e-4"]})
    status = job.wait(timeout=6 * 3600)      # the dict `fsdp-orch status ID --json` prints
    if status["state"] != "SUCCEEDED": ...

It works on ``$FSDP_ORCH_HOME`` and finds cluster profiles from the current directory, as the CLI
does, and returns the objects the CLI prints as JSON. Bad input raises the CLI's typed errors
(``InputError``: file, line, field); a job that does not fit its cluster's GPUs raises
``JobDoesNotFit`` (an ``InputError``, with the estimate and what would make it fit), as the CLI
refuses it; a job that fails raises nothing, its status says FAILED. A wait that runs out raises
``WaitTimedOut`` (the CLI's exit 3), with the status at that moment. Nothing is printed: what the
CLI says on stderr at submit is the handle's ``notes``.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fsdp_orch.control.fit_gate import JobDoesNotFit
from fsdp_orch.control.submit_request import API_WORDS, SubmitRequest
from fsdp_orch.vocab import inputs
from fsdp_orch.vocab.errors import FsdpOrchError, InputError, JobNotFound

Overrides = Mapping[str, Any] | Sequence[str]


class WaitTimedOut(FsdpOrchError):
    """``Job.wait(timeout)`` ran out before the job ended;
    the job goes on. ``status``: as it was."""

    exit_code = 3

    def __init__(self, job_id: str, timeout: float, status: dict[str, Any]):
        self.job_id, self.timeout, self.status = job_id, timeout, status
        super().__init__(f"job {job_id} is still {status.get('state')} "
                         f"after {timeout:g}s; it goes on")


def _override_lines(overrides: Overrides | None) -> list[str]:
    """``--set`` lines from a mapping (values written as YAML flow) or from ``k=v`` strings."""
    expected = "a mapping {'restart.max_restarts': 5} or a list of 'KEY.PATH=VALUE' strings"
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        for key in overrides:
            inputs.of_type(key, str, "overrides", f"{expected}; a key that is a string")
        try:
            # JSON is YAML
            return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
        except (TypeError, ValueError) as exc:
            raise InputError("expected values JSON can write (text, numbers, lists, mappings); "
                             f"{exc}", field="overrides") from None
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise InputError(f"expected {expected}; got {type(overrides).__name__} {overrides!r}",
                         field="overrides")
    return [str(inputs.of_type(line, str, "overrides", expected)) for line in overrides]


def _path(value: object, field: str, optional: bool = False) -> str | None:
    """A file argument: a non-empty str or os.PathLike, as text."""
    inputs.of_type(value, (str, os.PathLike), field, "a file path (str or pathlib.Path)", optional)
    if value is None:
        return None
    text = os.fspath(value)  # type: ignore[call-overload]
    if not isinstance(text, str) or not text:
        raise InputError(f"expected a file path; got {value!r}", field=field)
    return text


def _timeout(value: object) -> float | None:
    return None if value is None else inputs.seconds(value, "timeout")


class Job:
    """A submitted job, by id. Every call reads the job's current record."""

    def __init__(self, job_id: str, created: bool = True, notes: Sequence[str] = ()):
        self.id = inputs.job_id(job_id, field="job_id")  # "" would match any job by prefix
        self.created = created  # False: an earlier submit with the same idempotency key made it
        # what submit said of it, a line each, as the CLI's stderr has them: the fit check's
        # verdict (or why there is none), the checkpoint it resumes, what the launch changes
        self.notes = list(notes)

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    def status(self) -> dict[str, Any]:
        """What ``fsdp-orch status ID --json`` prints (state, attempts, progress, failures ...)."""
        from fsdp_orch.control.liveness import refresh
        from fsdp_orch.record.index import open_index

        with open_index() as index:
            index.ingest([self.id])
            if index.store.job(self.id) is None:
                raise JobNotFound(self.id)
            refresh(index, [self.id])
            return json.loads(index.store.status_json(self.id) or "{}")

    def wait(self, timeout: float | None = None, interval: float = 1.0) -> dict[str, Any]:
        """Block until the job ends; its final status.
        ``WaitTimedOut`` after ``timeout`` seconds."""
        timeout = _timeout(timeout)
        if inputs.seconds(interval, "interval") <= 0:
            raise InputError(f"expected a number of seconds above 0; got {interval!r}",
                             field="interval")
        from fsdp_orch.control.follow import wait_for
        from fsdp_orch.record.index import open_index
        from fsdp_orch.vocab.states import TERMINAL_NAMES

        with open_index() as index:
            state = wait_for(index, self.id, quiet=True, show_progress=False, interval=interval,
                             timeout=timeout)
        status = self.status()
        if state not in TERMINAL_NAMES and status.get("state") not in TERMINAL_NAMES:
            raise WaitTimedOut(self.id, float(timeout or 0), status)
        return status

    def cancel(self) -> str:
        """Stop the job everywhere; the line ``fsdp-orch cancel`` prints."""
        from fsdp_orch.control.job_control import cancel
        from fsdp_orch.record.index import open_index

        with open_index() as index:
            index.ingest([self.id])
            return cancel(index, self.id)

    def logs(self, rank: int | None = None, attempt: int | None = None) -> str:
        """What ``fsdp-orch logs ID`` prints (the latest attempt; ``rank``: one rank's lines)."""
        inputs.of_type(rank, int, "rank", "a global rank (an int) or None", optional=True)
        inputs.of_type(attempt, int, "attempt", "an attempt number (an int) or None", optional=True)
        from fsdp_orch.control.logs import show_logs
        from fsdp_orch.record.index import open_index

        out = io.StringIO()
        with open_index() as index:
            index.ingest([self.id])
            if index.store.job(self.id) is None:
                raise JobNotFound(self.id)
            show_logs(index, self.id, rank=rank, attempt=attempt, out=out)
        return out.getvalue()

    def events(self) -> list[dict[str, Any]]:
        """The job's events in time order, as ``fsdp-orch events ID --json`` prints them."""
        from fsdp_orch.record.events import read_job
        from fsdp_orch.vocab.redact import shown_event

        return [shown_event(event) for event in read_job(self.status()["run_dir"])[0]]


def _request(job: str | os.PathLike[str], cluster: str, overrides: Overrides | None, wait: bool,
             timeout: float | None, idempotency_key: str | None, accelerate_config: str | None,
             init_from: str | None, init_optimizer: bool, resume: bool, fresh: bool,
             fit_check: bool, gpu_memory: str | int | None) -> SubmitRequest:
    """The arguments of ``submit`` as the request the CLI makes of its flags: each of the right
    type here, the rules for combining them the request's own (control/submit_request)."""
    job_file = _path(job, "job")
    inputs.of_type(cluster, str, "cluster", "a cluster profile name (a str)")
    lines = _override_lines(overrides)
    inputs.of_type(wait, bool, "wait", "True or False")
    seconds = _timeout(timeout)
    inputs.of_type(idempotency_key, str, "idempotency_key", "a str or None", optional=True)
    accelerate = _path(accelerate_config, "accelerate_config", optional=True)
    inputs.of_type(init_optimizer, bool, "init_optimizer", "True or False")
    inputs.of_type(resume, bool, "resume", "True or False")
    inputs.of_type(fresh, bool, "fresh", "True or False")
    inputs.of_type(fit_check, bool, "fit_check", "True or False")
    return SubmitRequest(
        Path(str(job_file)), cluster, tuple(lines), accelerate_config=accelerate, wait=wait,
        timeout=seconds, idempotency_key=idempotency_key, init_from=init_from,
        init_optimizer=init_optimizer, resume=resume, fresh=fresh, fit_check=fit_check,
        gpu_memory=gpu_memory, words=API_WORDS)


def submit(job: str | os.PathLike[str], cluster: str = "local", *,
           overrides: Overrides | None = None, wait: bool = False, timeout: float | None = None,
           idempotency_key: str | None = None, accelerate_config: str | None = None,
           init_from: str | None = None, init_optimizer: bool = False, resume: bool = False,
           fresh: bool = False, fit_check: bool = True,
           gpu_memory: str | int | None = None) -> Job:
    """Submit ``job`` (a job.yaml) to ``cluster``; with ``wait``, return once it ended (``timeout``:
    ``WaitTimedOut``). ``overrides``: ``{"args": [...], "restart.max_restarts": 5}`` or
    ``["k=v", ...]``, as ``--set``. ``init_from``: a job id or checkpoint to start from
    (``--init-from``). ``resume`` / ``fresh``: the checkpoint folder already holds a checkpoint of
    a job that ended SUCCEEDED: continue it, or move it aside (kept) and start over (``--resume`` /
    ``--fresh``); without either such a submission raises InputError. A job with a ``fit:`` block
    is estimated first, as the CLI does: ``JobDoesNotFit`` where it does not fit its GPUs (their
    memory: ``gpu_memory``, "80GB" or bytes, else the profile's or the cluster's), nothing
    submitted; ``fit_check=False`` skips that (``--no-fit-check``)."""
    # Every argument is checked, and the job planned, before the index is opened: bad input
    # submits and writes nothing.
    request = _request(job, cluster, overrides, wait, timeout, idempotency_key, accelerate_config,
                       init_from, init_optimizer, resume, fresh, fit_check, gpu_memory)
    from fsdp_orch.control.fit_gate import fit_gated
    from fsdp_orch.control.job_control import submit as submit_job
    from fsdp_orch.control.planning import plan_submission
    from fsdp_orch.places.builtin import home
    from fsdp_orch.record.index import open_index_for_submit

    gated = fit_gated(request, plan_submission(request), home=home())
    notes = list(gated.notes)
    with open_index_for_submit() as index:
        job_id, created = submit_job(index, request, gated.planned, say=notes.append)
    if created:
        notes += gated.planned.plan.notices
    handle = Job(job_id, created, notes)
    if wait:
        handle.wait(request.wait_s)
    return handle


__all__ = ["Job", "JobDoesNotFit", "WaitTimedOut", "submit"]
