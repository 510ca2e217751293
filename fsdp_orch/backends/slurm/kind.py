"""The SLURM kind. ``submit`` hands the rendered batch script (``sbatch.sh`` in the run directory)
to ``sbatch``; in the allocation it runs the fsdp-orch supervisor on the first node, which runs each
attempt as a job step across all nodes (``slurm_allocation``). A hang or crash ends the step and
starts a new one in the same allocation; the signal before the time limit (or a preemption) requeues
the job, and the next allocation resumes from the latest complete checkpoint."""

from __future__ import annotations

import os
import re
import stat
import time
from functools import partial
from pathlib import Path

from fsdp_orch.backends.base import ClusterKind
from fsdp_orch.backends.slurm import allocation as slurm_allocation
from fsdp_orch.backends.slurm import gres
from fsdp_orch.backends.slurm.doctor import slurm_checks
from fsdp_orch.backends.slurm.parse import (
    JOB_NAME_PREFIX,
    SACCT_FIELDS,
    SlurmJob,
    latest_by_job,
    parse_sacct,
)
from fsdp_orch.backends.slurm.profile import SlurmProfile
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import Placement, PlanContext, fixed_node_count
from fsdp_orch.launch.render import Artifact, Templates, write_artifacts
from fsdp_orch.launch.submission import PlannedAttempt, Submission
from fsdp_orch.observe.command import Runner, run, run_command
from fsdp_orch.places import secrets
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.backoff import SLURM_STEPS_GONE, Clock, Sleep, retrying
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.hints import hint_for
from fsdp_orch.vocab.states import JobState

BATCH_SCRIPT = slurm_allocation.BATCH_SCRIPT
GRES_TIMEOUT_S = 15.0


def batch_script_path(plan: LaunchPlan) -> str:
    return f"{plan.run_dir}/{BATCH_SCRIPT}"


def step_nodes(nodes: int, allocation: tuple[str, ...],
               left_out: tuple[str, ...]) -> tuple[str, ...]:
    """The nodes an attempt's job step runs on: the first ``nodes`` of the allocation's nodes
    (``allocation``, the supervisor's own node first: the rendezvous runs there) less those left
    out. () where the allocation is not known (``render``) or holds no spare: the step takes them
    all. An InputError when too few are left: the job must go back through the queue without
    them."""
    if len(allocation) <= nodes:
        return ()
    left = [name for name in allocation if name not in left_out]
    if allocation[0] in left_out or len(left) < nodes:
        gone = ", ".join(name for name in allocation if name in left_out)
        why = (f"the supervisor's own node {allocation[0]} is among them"
               if allocation[0] in left_out
               else f"{len(left)} healthy node(s) of {len(allocation)}")
        raise InputError(f"no spare node left in the allocation: {gone} left out, {why}; the job "
                         f"needs {nodes} (nodes: {nodes})", field="spare_nodes")
    return tuple(left[:nodes])


class SlurmKind(ClusterKind[SlurmProfile]):
    name = "slurm"
    profile_model = SlurmProfile
    main_template = "slurm-node.sh.j2"
    # The supervisor runs in the allocation, on the profile's python (control.planning): the login
    # node's interpreter, a pipx venv there, need not exist on the nodes.
    supervisor_on_a_node = True

    def place(self, job: JobSpec, profile: SlurmProfile, cluster: str,
              ctx: PlanContext) -> Placement:
        fixed_node_count(job, "a SLURM allocation keeps its node count (spare_nodes: K "
                              "allocates K more, for the attempts after a node is lost)")
        return Placement(nnodes=job.nodes,
                         nproc_per_node=job.procs_per_node or profile.default_procs_per_node(),
                         device="cuda" if profile.gpus_per_node else "cpu", rdzv_host=None,
                         checkpoint_on_request=True,
                         standby=profile.container is None, standby_hosted=True,
                         standby_cold_because=(
                             "the keeper host would have to run in the profile's container "
                             "(not built)" if profile.container is not None else ""),
                         spare_nodes=profile.spares_for(job.spare_nodes),
                         node_names=step_nodes(job.nodes, ctx.workers, ctx.excluded_hosts))

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        """The batch script sbatch is given (one per job: the supervisor in the allocation), and the
        script every node runs for an attempt."""
        if not plan.supervisor_command:
            raise InputError("a SLURM job needs the supervisor's command for its batch script")
        return [Artifact(batch_script_path(plan),
                         templates("slurm.sbatch.j2", job_name=JOB_NAME_PREFIX + plan.job_id),
                         True),
                Artifact(f"{plan.attempt_dir}/{slurm_allocation.NODE_SCRIPT}",
                         templates(templates.main), True)]

    def attempt_launcher(self, submission: Submission) -> slurm_allocation.SlurmStepLauncher:
        return slurm_allocation.SlurmStepLauncher(submission)

    def allocation_ending(self) -> bool:
        return slurm_allocation.allocation_ending()

    def doctor(self, profile: SlurmProfile, torch_version: str | None, run: Runner) -> list[Check]:
        return slurm_checks(profile, torch_version, run)

    def gpu_memory(self, profile: SlurmProfile, run: Runner) -> tuple[int | None, str | None]:
        """From the partition's GRES (``sinfo``): one read-only call, not retried (a submit
        waits on it). A profile that asks for no GPUs runs its jobs on none: nothing to say."""
        if not profile.gpus_per_node:
            return None, None
        argv = gres.sinfo_argv(profile.partition)
        result = run(argv, GRES_TIMEOUT_S)
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
            return None, f"no GPU memory from SLURM: {' '.join(argv)} failed: {said[-1][:200]}"
        return gres.partition_gpu_memory(result.stdout, profile.partition)

    def start(self, index: JobIndex, submission: Submission, first: PlannedAttempt) -> None:
        batch = [a for a in first.artifacts if a.path == batch_script_path(first.plan)]
        write_artifacts(batch)
        # The values that came by reference travel in the allocation's environment (sbatch exports
        # its own, --export=ALL); srun hands them to every step. None is left in the home after.
        env = {**os.environ, **secrets.read(submission.job_id, "env")}
        try:
            out = run_command(["sbatch", "--parsable", batch[0].path], runner=partial(run, env=env))
        finally:
            secrets.forget(submission.job_id, "env")
        index.journal(submission.job_id).scheduled(f"slurm:{out.strip().split(';')[0]}")

    def refresh(self, index: JobIndex, rows: list[JobStatus]) -> list[str]:
        return refresh(index, rows)

    def cancel(self, index: JobIndex, row: JobStatus) -> str:
        job_id = row.id
        ended = index.request_cancel(job_id)
        if ended:
            return f"{job_id} already ended ({ended})"
        slurm_id = slurm_job_id(row.backend_ref)
        if slurm_id:
            run_command(["scancel", slurm_id])
            steps_gone(slurm_id)
        return f"{job_id} cancelled (SLURM job {slurm_id})"


def steps_gone(slurm_id: str, within: float = 60.0, runner: Runner | None = None,
               clock: Clock = time.monotonic, sleep: Sleep = time.sleep) -> bool:
    """After scancel: SLURM marks the job CANCELLED at once, and its steps take up to KillWait to go
    away. squeue, every half second, until none is left (True) or ``within`` seconds have passed."""
    squeue = slurm_allocation.query_runner(runner, sleep)
    poll = retrying(SLURM_STEPS_GONE, sleep=sleep, not_yet=bool, deadline=clock() + within,
                    clock=clock)
    return not poll(lambda: squeue(["squeue", "-h", "-s", "-j", slurm_id], 60.0).stdout.strip())


def slurm_job_id(ref: str | None) -> str | None:
    m = re.match(r"slurm:(\d+)", ref or "")
    return m.group(1) if m else None


def query(slurm_ids: list[str], runner: Runner | None = None,
          sleep: Sleep = time.sleep) -> dict[str, SlurmJob]:
    """One sacct call for all the given SLURM jobs: {slurm id: its allocation record}. A call that
    fails on the way to the accounting database is made again (``allocation.query_runner``)."""
    if not slurm_ids:
        return {}
    out = run_command(["sacct", "--parsable2", "--noheader", "-X", "-j", ",".join(slurm_ids),
                       "-o", ",".join(SACCT_FIELDS)],
                      runner=slurm_allocation.query_runner(runner, sleep))
    return latest_by_job(parse_sacct(out))


# An allocation lost this way never reaches the supervisor's own restart logic.
LOST_ALLOCATION = frozenset({"NODE_FAIL", "BOOT_FAIL"})


def refresh(index: JobIndex, rows: list[JobStatus], *,
            query_fn=None, resubmit_fn=None) -> list[str]:
    """Settle active SLURM jobs whose allocation ended without the supervisor settling them
    (cancelled or failed while pending, node failure): one scheduler query for all of them. An
    allocation lost to a node failure is resubmitted while the restart budget allows. Returns the
    ids it changed."""
    by_slurm = {sid: row for row in rows if (sid := slurm_job_id(row.backend_ref))}
    changed: list[str] = []
    if not by_slurm:
        return changed
    records = (query_fn or query)(list(by_slurm))
    for sid, row in by_slurm.items():
        rec = records.get(sid)
        if rec is None or rec.ours != row.id:
            continue  # not (yet) in the accounting, or the id now belongs to someone else's job
        mapped = rec.mapped_state
        if (mapped in (JobState.PENDING, JobState.RESTARTING)
                and row.state == JobState.RUNNING.value):
            # back in the queue (requeued, preempted): the next allocation resumes from a checkpoint
            index.journal(row.id).requeued(f"SLURM job {sid} is {rec.state} again")
            changed.append(row.id)
            continue
        if mapped is None or not mapped.is_terminal():
            continue
        # the supervisor may have recorded the end in the run folder since the index last read it:
        # sacct's ending is then not a second one (a poll 2.6 s after the end recorded one, and its
        # JSON showed another end time and goodput than every later read: CI of e339dfa)
        index.ingest([row.id])
        fresh = index.store.job(row.id)
        if not fresh or fresh.state != row.state:
            continue
        changed.append(row.id)
        if rec.state in LOST_ALLOCATION and _resubmit(index, fresh, sid, rec.state, resubmit_fn):
            continue
        index.journal(row.id).set_state(
            mapped, reason=f"SLURM job {sid} ended {rec.state} (exit {rec.exit_code})"
            + batch_said(fresh.run_dir, sid))
    return changed


SETUP_LINE = "[fsdp-orch] node setup: "


def batch_said(run_dir: str | None, sid: str) -> str:
    """What the batch script said when it stopped before the supervisor started (``sbatch.sh``: the
    profile's python is not on the node, or lacks fsdp-orch), from ``slurm-<id>.out`` in the run
    folder: ": <its line>", or "" (no such line; the file not this user's own)."""
    if not run_dir:
        return ""
    path = os.path.join(run_dir, f"slurm-{sid}.out")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(0, st.st_size - 65536), os.SEEK_SET)
        text = os.read(fd, 65536).decode("utf-8", "replace")
    finally:
        os.close(fd)
    said = [line[len(SETUP_LINE):].strip() for line in text.splitlines()
            if line.startswith(SETUP_LINE)]
    return f": {said[-1][:500]}" if said else ""


def _resubmit(index: JobIndex, row: JobStatus, sid: str,
              slurm_state: str, resubmit_fn) -> bool:
    submission = Submission.load(Path(row.run_dir), KIND)
    policy = submission.job.restart
    attempt = max(0, int(row.attempts) - 1)
    allowed = (FailureCategory.PREEMPTION_OR_NODE_LOST in policy.retry_on
               and (policy.max_restarts is None or int(row.restarts) < policy.max_restarts))
    journal = index.journal(row.id)
    evidence = f"SLURM job {sid} ended {slurm_state}"
    journal.add_failure(attempt=attempt, category=FailureCategory.PREEMPTION_OR_NODE_LOST,
                        evidence=evidence, action="resubmit" if allowed else "give_up",
                        hint=hint_for(FailureCategory.PREEMPTION_OR_NODE_LOST, evidence))
    if not allowed:
        return False
    journal.end_attempt(attempt, None)
    journal.requeued(f"SLURM job {sid} ended {slurm_state}: resubmitted")
    (resubmit_fn or KIND.start)(index, submission, submission.planned_attempt(0))
    return True


KIND = SlurmKind()
