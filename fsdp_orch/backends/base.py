"""The small interface every cluster backend implements, and the frozen submission it works from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fsdp_orch.plan import LaunchPlan, PlanContext, make_plan
from fsdp_orch.profiles import PROFILE_MODELS, Profile
from fsdp_orch.render import Artifact, render_plan
from fsdp_orch.resources import bootstrap_site_dir
from fsdp_orch.spec import JobSpec

SUBMISSION_FILE = "submission.json"


@dataclass(frozen=True)
class Submission:
    """Everything needed to plan any attempt, frozen at submit time (job.yaml may change later)."""

    job_id: str
    cluster: str
    job: JobSpec
    profile: Profile
    job_dir: str
    home: str
    profile_template: str | None = None

    def to_json(self) -> str:
        return json.dumps({
            "job_id": self.job_id, "cluster": self.cluster, "job_dir": self.job_dir, "home": self.home,
            "profile_template": self.profile_template,
            "job": self.job.model_dump(mode="json"), "profile": self.profile.model_dump(mode="json"),
        }, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Submission:
        data = json.loads(text)
        profile_data = data["profile"]
        profile = PROFILE_MODELS[profile_data["kind"]].model_validate(profile_data)
        return cls(job_id=data["job_id"], cluster=data["cluster"], job=JobSpec.model_validate(data["job"]),
                   profile=profile, job_dir=data["job_dir"], home=data["home"],
                   profile_template=data.get("profile_template"))

    @property
    def run_dir(self) -> Path:
        return Path(self.home) / "runs" / self.job_id

    def save(self) -> Path:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / SUBMISSION_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, run_dir: Path) -> Submission:
        return cls.from_json((run_dir / SUBMISSION_FILE).read_text())

    def plan_only(self, attempt: int, *, resume_from: str | None = None, resume_step: int | None = None,
                  rdzv_port: int | None = None, local_has_gpu: bool = False) -> LaunchPlan:
        ctx = PlanContext(job_id=self.job_id, attempt=attempt, home=self.home, job_dir=self.job_dir,
                          resume_from=resume_from, resume_step=resume_step, rdzv_port=rdzv_port,
                          local_has_gpu=local_has_gpu, bootstrap_dir=str(bootstrap_site_dir()))
        return make_plan(self.job, self.profile, self.cluster, ctx)

    def plan(self, attempt: int, *, resume_from: str | None = None, resume_step: int | None = None,
             rdzv_port: int | None = None, local_has_gpu: bool = False) -> tuple[LaunchPlan, list[Artifact]]:
        plan = self.plan_only(attempt, resume_from=resume_from, resume_step=resume_step,
                              rdzv_port=rdzv_port, local_has_gpu=local_has_gpu)
        template = Path(self.profile_template) if self.profile_template else None
        return plan, render_plan(plan, profile_template=template)

    def job_checkpoint_dir(self) -> str:
        return self.plan_only(0).checkpoint_dir

    def attempt_dir(self, attempt: int) -> str:
        return self.plan_only(attempt).attempt_dir

    def world_size(self) -> int:
        return self.plan_only(0).world_size


class Backend(Protocol):
    """Start a submitted job's supervision, and cancel it. Attempts are run by the supervisor,
    through the launcher the backend gives it; ``adopt`` re-attaches to a running attempt."""

    kind: str

    def start(self, store: Any, submission: Submission) -> None: ...

    def cancel(self, store: Any, row: dict[str, Any]) -> str: ...

    def attempt_launcher(self, submission: Submission) -> Any: ...

    def adopt(self, submission: Submission, attempt: int, ref: str | None) -> Any: ...

    def port_for_attempt(self, attempt: int) -> int | None: ...
