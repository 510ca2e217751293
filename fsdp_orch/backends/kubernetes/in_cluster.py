"""The job's supervisor in the cluster (``supervisor.runs: cluster``), from the submitting machine's
side: ``submit`` makes the job's Secret (from the values that came by reference, which then leave
the private home) and the supervisor's Job; ``status`` settles a job whose supervisor's Job ended
or went away before the job's end was recorded (FAILED, with the supervisor's last line), as
SLURM's sacct settles an allocation; ``cancel`` waits for that supervisor to stop the attempt."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from fsdp_orch.backends.kubernetes.api import Api, create_all
from fsdp_orch.backends.kubernetes.manifest import (
    JOB_ID_LABEL,
    ROLE_LABEL,
    env_secret_manifest,
    env_secret_name,
    job_label,
    supervisor_job_name,
)
from fsdp_orch.backends.kubernetes.profile import KubernetesProfile
from fsdp_orch.checkpoints.storage import LOCAL
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.places import secrets
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.backoff import K8S_SUPERVISOR_POLL, retrying
from fsdp_orch.vocab.errors import FsdpOrchError, InputError
from fsdp_orch.vocab.states import JobState

log = logging.getLogger(__name__)

POD_WAIT_S = 15.0  # the Job controller makes a pod within a second; at twice the load, still
LAST_LINE_MAX = 300


def start_in_cluster(api: Api, profile: KubernetesProfile, plan: LaunchPlan,
                     supervisor: list[dict[str, Any]], pod_wait_s: float = POD_WAIT_S) -> None:
    """The job's Secret, then the supervisor's Job, whose pod must appear within ``pod_wait_s``
    (the server's dry run of a Job does not admit its pods: a service account that does not
    exist, a quota or a policy refuses them only now); all or none. The values that came by
    reference are forgotten here whatever happens: they are in the Secret, or the submit failed."""
    values = secrets.read(plan.job_id, "env")
    made: list[tuple[str, str]] = []
    try:
        if plan.secret_env:
            kept = {name: values[name] for name, _ in plan.secret_env if name in values}
            api.create(env_secret_manifest(plan, profile, kept))
            made.append(("Secret", env_secret_name(plan.job_id)))
        create_all(api, supervisor)
        made.append(("Job", supervisor_job_name(plan.job_id)))
        if not _pod_appears(api, plan.job_id, pod_wait_s):
            raise InputError(
                f"the supervisor's Job {supervisor_job_name(plan.job_id)} made no pod within "
                f"{pod_wait_s:g} s: the API server refuses its pod (a service account "
                f"{profile.supervisor.service_account!r} that does not exist in namespace "
                f"{profile.namespace}, a quota, an admission policy); nothing was left",
                field="supervisor.service_account")
    except BaseException:
        for kind, name in reversed(made):
            api.delete(kind, name, grace_s=0)
        raise
    finally:
        secrets.forget(plan.job_id, "env")


def _pod_appears(api: Api, job_id: str, within_s: float) -> bool:
    selector = f"{JOB_ID_LABEL}={job_label(job_id)},{ROLE_LABEL}=supervisor"
    poll = retrying(K8S_SUPERVISOR_POLL, sleep=time.sleep, not_yet=lambda pods: not pods,
                    deadline=time.monotonic() + within_s, clock=time.monotonic)
    return bool(poll(api.pods, selector))


def settle(index: JobIndex, row: JobStatus, api: Api) -> bool:
    """Whether the job was found without a supervisor: its Job ended or gone while the run folder
    records no end. An API server that does not answer settles nothing (no word is no verdict)."""
    try:
        ended = api.job_ended(supervisor_job_name(row.id))
    except FsdpOrchError as exc:
        log.debug(f"fsdp-orch: job {row.id}: the supervisor's Job not read: {exc}")
        return False
    if ended is None:
        return False
    index.ingest([row.id])  # the supervisor's own end, written just before its pod ended
    now = index.store.job(row.id)
    if now is None or now.ended:
        return False
    what = "is gone" if ended == "gone" else f"ended ({ended})"
    index.journal(row.id).set_state(JobState.FAILED, reason=(
        f"the supervisor's Job {supervisor_job_name(row.id)} {what} before the job's end was "
        f"recorded (it restarts up to supervisor.restarts times); its last line: "
        f"{last_line(Path(row.run_dir) / 'supervisor.log')}"))
    return True


def wait_for_supervisor(api: Api, job_id: str, within_s: float) -> None:
    """Until the supervisor's Job has ended or gone (it saw the cancel and stopped the attempt),
    or ``within_s`` seconds have passed; an API server that does not answer ends the wait."""
    poll = retrying(K8S_SUPERVISOR_POLL, sleep=time.sleep, not_yet=lambda ended: ended is None,
                    deadline=time.monotonic() + within_s, clock=time.monotonic)
    try:
        poll(api.job_ended, supervisor_job_name(job_id))
    except FsdpOrchError:
        pass


def last_line(path: Path) -> str:
    tail = LOCAL.read_tail(str(path), 4096)
    if tail is None:
        return "(no supervisor.log)"
    lines = tail.decode(errors="replace").strip().splitlines()
    return lines[-1][:LAST_LINE_MAX] if lines else "(supervisor.log is empty)"


__all__ = ["last_line", "settle", "start_in_cluster", "wait_for_supervisor"]
