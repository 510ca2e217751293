"""The frozen submission: everything needed to plan any attempt of a job, fixed at submit time
(job.yaml may change later), under the job id drawn before its first plan. ``plan_for`` is the
one place an attempt is planned; each attempt's plan is made once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan, attempt_dir_of, make_plan
from fsdp_orch.launch.plan_inputs import KindPlanning, PlanContext
from fsdp_orch.launch.render import Artifact, KindArtifacts, render_plan
from fsdp_orch.places.builtin import bootstrap_site_dir

SUBMISSION_FILE = "submission.json"


P = TypeVar("P", bound=ProfileBase)  # a kind's own profile model


@dataclass(frozen=True)
class AttemptInputs:
    """What an attempt's plan takes beyond its submission and number: where it resumes from, its
    rendezvous port, this machine's GPU (a local profile's ``device: auto``), the hosts left out
    and the workers it was given, and the job's time between failures so far (``mtbf_s``, for
    ``checkpoint.interval: auto``; None before the first failure)."""

    resume_from: str | None = None
    resume_step: int | None = None
    rdzv_port: int | None = None
    local_has_gpu: bool = False
    excluded_hosts: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    mtbf_s: float | None = None


@dataclass(frozen=True)
class PlannedAttempt:
    """An attempt's plan and the artifacts rendered from it: what a kind starts exactly."""

    plan: LaunchPlan
    artifacts: list[Artifact]


class PlanningKind(KindPlanning[P], KindArtifacts, Protocol[P]):
    """What a submission needs of its cluster kind: the profile model, planning and artifacts.
    ``P``: the kind's profile model (a submission holds any kind's, as ``ProfileBase``)."""

    name: str
    profile_model: type[P]


@dataclass(frozen=True)
class Submission:
    job_id: str
    cluster: str
    job: JobSpec
    profile: ProfileBase
    job_dir: str
    run_root: str  # $FSDP_ORCH_HOME, or the profile's shared_dir: runs/<job id> is under it
    kind: PlanningKind[Any]
    supervisor_command: tuple[str, ...] | None = None  # the supervisor's argv, less the job id
    profile_template: str | None = None
    # The template folders found at submit (project, home), absolute: every attempt renders with
    # them, wherever its supervisor runs. None (a submission recorded before): the current folder's.
    template_dirs: tuple[str, ...] | None = None
    # a warm start: the checkpoint the job starts from (submit --init-from)
    init_from: str | None = None
    init_step: int | None = None
    init_optimizer: bool = False
    # checkpoints in <checkpoint dir>/<job id> (warm starts, schedules)
    checkpoint_per_job: bool = False
    # the plans made of this submission, by attempt and inputs (``plan_for``)
    _plans: dict[tuple[int, AttemptInputs], LaunchPlan] = field(
        default_factory=dict, init=False, compare=False, repr=False)

    def to_json(self) -> str:
        return json.dumps({
            "job_id": self.job_id, "cluster": self.cluster, "job_dir": self.job_dir,
            "run_root": self.run_root, "profile_template": self.profile_template,
            "template_dirs": self.template_dirs,
            "supervisor_command": self.supervisor_command,
            "init_from": self.init_from, "init_step": self.init_step,
            "init_optimizer": self.init_optimizer,
            "checkpoint_per_job": self.checkpoint_per_job,
            "job": self.job.model_dump(mode="json"),
            "profile": self.profile.model_dump(mode="json"),
        }, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, kind: PlanningKind[Any]) -> Submission:
        """``kind`` is the cluster kind the job was recorded with (the store's ``kind`` column)."""
        data = json.loads(text)
        profile = kind.profile_model.model_validate(data["profile"])
        return cls(job_id=data["job_id"], cluster=data["cluster"],
                   job=JobSpec.model_validate(data["job"]), profile=profile,
                   job_dir=data["job_dir"], run_root=data["run_root"], kind=kind,
                   supervisor_command=tuple(data.get("supervisor_command") or ()) or None,
                   profile_template=data.get("profile_template"),
                   template_dirs=(tuple(data["template_dirs"])
                                  if data.get("template_dirs") is not None else None),
                   init_from=data.get("init_from"),
                   init_step=data.get("init_step"), init_optimizer=bool(data.get("init_optimizer")),
                   checkpoint_per_job=bool(data.get("checkpoint_per_job")))

    @property
    def run_dir(self) -> Path:
        return Path(self.run_root) / "runs" / self.job_id

    def save(self) -> Path:
        """Write ``submission.json`` into the run folder (made 0700,
        the file 0600: it holds env values)."""
        from fsdp_orch.places.private import ensure_private_root, make_private_dirs, write_private

        ensure_private_root(str(self.run_dir.parent), above=[self.run_root])  # <run root>/runs
        make_private_dirs(str(self.run_dir))
        path = self.run_dir / SUBMISSION_FILE
        write_private(str(path), self.to_json())
        return path

    @staticmethod
    def kind_name(run_dir: Path) -> str:
        """The cluster kind a saved submission was made for."""
        return str(json.loads((run_dir / SUBMISSION_FILE).read_text())["profile"]["kind"])

    @classmethod
    def load(cls, run_dir: Path, kind: PlanningKind[Any]) -> Submission:
        return cls.from_json((run_dir / SUBMISSION_FILE).read_text(), kind)

    def context(self, attempt: int, inputs: AttemptInputs = AttemptInputs()) -> PlanContext:
        return PlanContext(job_id=self.job_id, attempt=attempt, run_root=self.run_root,
                           job_dir=self.job_dir, resume_from=inputs.resume_from,
                           resume_step=inputs.resume_step, rdzv_port=inputs.rdzv_port,
                           local_has_gpu=inputs.local_has_gpu,
                           bootstrap_dir=str(bootstrap_site_dir()),
                           supervisor_command=self.supervisor_command,
                           excluded_hosts=inputs.excluded_hosts, workers=inputs.workers,
                           init_from=self.init_from, init_step=self.init_step,
                           init_optimizer=self.init_optimizer,
                           checkpoint_per_job=self.checkpoint_per_job, mtbf_s=inputs.mtbf_s)

    def plan_for(self, attempt: int, inputs: AttemptInputs = AttemptInputs()) -> LaunchPlan:
        """Attempt ``attempt``'s plan: the one place any attempt is planned. Made once for each
        attempt and inputs (kept with this submission). InputError when it cannot be placed (too
        few hosts left once ``inputs.excluded_hosts`` are left out)."""
        key = (attempt, inputs)
        plan = self._plans.get(key)
        if plan is None:
            plan = make_plan(self.job, self.profile, self.cluster, self.context(attempt, inputs),
                             self.kind)
            self._plans[key] = plan
        return plan

    def planned_attempt(self, attempt: int,
                        inputs: AttemptInputs = AttemptInputs()) -> PlannedAttempt:
        """Attempt ``attempt``'s plan (``plan_for``) with its artifacts rendered."""
        plan = self.plan_for(attempt, inputs)
        return PlannedAttempt(plan, self.render(plan))

    def render(self, plan: LaunchPlan) -> list[Artifact]:
        template = Path(self.profile_template) if self.profile_template else None
        search = None if self.template_dirs is None else [Path(d) for d in self.template_dirs]
        return render_plan(plan, self.kind, profile_template=template, search=search)

    @property
    def base_plan(self) -> LaunchPlan:
        """Attempt 0 with nothing to resume: what every attempt
        shares (checkpoint dir, world size)."""
        return self.plan_for(0)

    @property
    def checkpoint_dir(self) -> str:
        return self.base_plan.checkpoint_dir

    @property
    def world_size(self) -> int:
        """At the job's full size (an attempt on fewer nodes has its own plan's)."""
        return self.base_plan.world_size

    def attempt_dir(self, attempt: int) -> str:
        return attempt_dir_of(self.base_plan.run_dir, attempt)
