"""Parsing SLURM's output: pure functions of text, tested against
output captured from a real cluster.

One ``sacct`` call covers every job of a refresh; a SLURM job id that was reused for someone else's
job is recognised by its job name, which we set to ``fsdp-orch-<our id>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.vocab.states import JobState

JOB_NAME_PREFIX = "fsdp-orch-"
SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "ExitCode", "Submit", "Start", "End", "NodeList")

# SLURM's job states (sacct/squeue) -> ours. Unknown states map to None: leave our state alone.
SLURM_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.RESTARTING,
    "REQUEUE_HOLD": JobState.RESTARTING, "REQUEUE_FED": JobState.RESTARTING,
    "RESIZING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING, "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING, "SIGNALING": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED, "CANCELLED": JobState.CANCELLED, "FAILED": JobState.FAILED,
    "TIMEOUT": JobState.FAILED, "NODE_FAIL": JobState.FAILED, "OUT_OF_MEMORY": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED, "DEADLINE": JobState.FAILED, "PREEMPTED": JobState.RESTARTING,
}


@dataclass(frozen=True)
class SlurmJob:
    job_id: str  # SLURM's id, with ".N" for a step
    name: str
    state: str  # SLURM's own word, e.g. "CANCELLED" (the " by 0" tail removed)
    exit_code: str
    submit: str
    start: str
    end: str
    nodes: str

    @property
    def ours(self) -> str | None:
        """Our job id, when the SLURM job was named by fsdp-orch."""
        return self.name[len(JOB_NAME_PREFIX):] if self.name.startswith(JOB_NAME_PREFIX) else None

    @property
    def mapped_state(self) -> JobState | None:
        return SLURM_STATES.get(self.state)

    @property
    def is_step(self) -> bool:
        return "." in self.job_id


def parse_sacct(text: str) -> list[SlurmJob]:
    """``sacct --parsable2 --noheader -o <SACCT_FIELDS>`` output, one SlurmJob per line."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            continue
        job_id, name, state, exit_code, submit, start, end, nodes = parts
        jobs.append(SlurmJob(job_id, name, state.split(" ", 1)[0], exit_code, submit, start, end,
                             nodes))
    return jobs


def latest_by_job(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    """The allocation records (not steps) by SLURM id; sacct lists a requeued job once per run, the
    newest last."""
    out: dict[str, SlurmJob] = {}
    for job in jobs:
        if not job.is_step:
            out[job.job_id] = job
    return out


def steps_of(jobs: list[SlurmJob], slurm_id: str) -> list[SlurmJob]:
    return [j for j in jobs if j.job_id.startswith(slurm_id + ".")]
