"""The local kind: this machine. A detached supervisor process runs each attempt's launch script
as its own process tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from fsdp_orch.backends.node_channel import AgentObservation
from fsdp_orch.backends.ports import free_port
from fsdp_orch.backends.supervised_here import SupervisedHere
from fsdp_orch.bootstrap.user_umask import parse_umask
from fsdp_orch.checkpoints.globs import is_pattern
from fsdp_orch.checkpoints.storage import LOCAL, Storage
from fsdp_orch.jobspec.limits import MAX_PROCS_PER_NODE, at_most
from fsdp_orch.jobspec.profiles import ProfileBase, host_address
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import Placement, PlanContext
from fsdp_orch.launch.render import Artifact, Templates, write_artifacts
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.proctree import job_processes, stop_job_processes
from fsdp_orch.places.private import make_folder_first, make_private_dirs, open_private
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.categories import NODE_LOST_EXIT
from fsdp_orch.vocab.errors import InputError


class LocalProfile(ProfileBase):
    kind: Literal["local"]
    device: Literal["auto", "cpu", "cuda"] = "auto"
    python: str = Field(default_factory=lambda: sys.executable or "python3")
    procs_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] | None = Field(default=None, gt=0)
    rdzv_host: str = "127.0.0.1"
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "accelerate", "python")

    @field_validator("rdzv_host")
    @classmethod
    def _host(cls, value: str) -> str:
        return host_address(value)

    def default_procs_per_node(self) -> int:
        return self.procs_per_node or 1


# The launch script runs under a small wrapper that writes its exit status to a file, so that a
# supervisor re-attaching after the first one died (it is not the parent) still learns the outcome.
_WRAPPER = 'bash "$1"; code=$?; echo "$code" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$code"'
LOST = -1000  # exit status of an attempt whose processes vanished without an exit record
EXIT_FILE = "exit-node-0"


class LocalAttempt(AgentObservation):
    def __init__(self, submission: Submission, attempt: int, pgid: int,
                 proc: subprocess.Popen | None = None):  # type: ignore[type-arg]
        attempt_dir = Path(submission.attempt_dir(attempt))
        super().__init__(submission.run_dir, attempt, attempt_dir, bind="127.0.0.1",
                         announce="127.0.0.1", node_timeout=submission.job.watch.node_timeout)
        self.job_id = submission.job_id
        self.pgid = pgid
        self.exit_file = attempt_dir / EXIT_FILE
        self.proc = proc  # None when adopted by a re-attached supervisor

    @property
    def ref(self) -> str:
        return f"pgid:{self.pgid}"

    def poll(self) -> int | None:
        if self.proc is not None:
            code = self.proc.poll()
        else:
            code = self._adopted_exit()
        code = self.judge_exit(code)
        if code is None or code == NODE_LOST_EXIT:
            return code
        # The launcher is gone; a worker it left behind would still hold ports or a GPU.
        if job_processes(self.job_id, self.attempt):
            stop_job_processes(self.job_id, self.attempt, grace=2.0)
        return code

    def _adopted_exit(self) -> int | None:
        try:
            return int(self.exit_file.read_text().strip())
        except (OSError, ValueError):
            pass
        if _group_alive(self.pgid) or job_processes(self.job_id, self.attempt):
            return None
        try:  # the wrapper may have finished between the two looks
            return int(self.exit_file.read_text().strip())
        except (OSError, ValueError):
            return LOST

    def stop(self, grace: float) -> None:
        self.stop_ranks(grace)
        stop_job_processes(self.job_id, self.attempt, grace=grace, pgid=self.pgid)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            try:
                os.killpg(self.pgid, 9)
            except (ProcessLookupError, PermissionError):
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class LocalLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission

    @property
    def checkpoints(self) -> Storage:
        return LOCAL

    def port_for_attempt(self, attempt: int) -> int:
        return free_port()

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        return ()  # this machine

    def leaves_out_nodes(self) -> bool:
        return False  # one machine

    def job_ending(self) -> None:
        """Every process of the job still running: the keeper the last attempt prepared for a next
        one, which would otherwise hold torch's memory for UNCLAIMED_S after the job's end."""
        stop_job_processes(self.submission.job_id, grace=2.0)

    def requeue_without(self, left_out: tuple[str, ...]) -> None:
        return None  # no scheduler to go back through

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> LocalAttempt:
        write_artifacts(artifacts)
        script = next(a.path for a in artifacts if a.name == LAUNCH_SCRIPT)
        console = Path(plan.attempt_dir) / "console-node-0.log"
        make_private_dirs(str(console.parent))
        exit_file = Path(plan.attempt_dir) / EXIT_FILE
        with os.fdopen(open_private(str(console), os.O_WRONLY | os.O_APPEND), "ab") as out:
            proc = subprocess.Popen(["bash", "-c", _WRAPPER, "fsdp-orch-attempt", script,
                                     str(exit_file)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=plan.attempt_dir)
        return LocalAttempt(self.submission, plan.attempt, proc.pid, proc)

    def adopt(self, attempt: int, ref: str | None) -> LocalAttempt:
        pgid = int(ref.split(":", 1)[1]) if ref and ref.startswith("pgid:") else 0
        return LocalAttempt(self.submission, attempt, pgid)


LAUNCH_SCRIPT = "launch.sh"


class LocalKind(SupervisedHere[LocalProfile]):
    name = "local"
    profile_model = LocalProfile
    main_template = "local.sh.j2"

    def place(self, job: JobSpec, profile: LocalProfile, cluster: str,
              ctx: PlanContext) -> Placement:
        if job.nodes != 1:
            raise InputError(f"cluster {cluster!r} is this one machine; expected nodes: 1, "
                             f"got {job.nodes_text}",
                             field="nodes")
        device = (profile.device if profile.device != "auto"
                  else ("cuda" if ctx.local_has_gpu else "cpu"))
        return Placement(nnodes=1,
                         nproc_per_node=job.procs_per_node or profile.default_procs_per_node(),
                         device=device, rdzv_host=profile.rdzv_host, standby=True)

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        return [Artifact(f"{plan.attempt_dir}/{LAUNCH_SCRIPT}", templates(templates.main), True)]

    def check_here(self, plan: LaunchPlan, job_file: str, profile_file: str) -> None:
        """What the job needs on this machine, checked at submit: its working folder, its script
        and its profile's python. An InputError names the one missing (such a job used to fail
        13 s later, after its restarts, as ``unknown``)."""
        if not os.path.isdir(plan.workdir):
            raise InputError(f"the working folder {plan.workdir} does not exist", file=job_file,
                             field="workdir")
        script = plan.job.script
        if script and "$" not in script:
            path = os.path.join(plan.workdir, os.path.expanduser(script))
            if not os.path.isfile(path):
                raise InputError(f"script {script} is not in {plan.workdir}", file=job_file,
                                 field="script")
        python = plan.python
        found = python if "/" in python else shutil.which(python)
        if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
            raise InputError(f"python {python} is not an executable file on this machine",
                             file=profile_file, field="python")

    def preflight(self, submission: Submission) -> None:
        """The checkpoint folder, not made yet, made now by this user (submit checked the folder it
        will be made in): another account cannot make it first and fill it before the ranks
        restore from it (the node script checks it again, places/trust.py)."""
        plan, job = submission.base_plan, submission.job
        if job.checkpoint.resume != "never" and not is_pattern(plan.checkpoint_dir):
            mask = parse_umask(job.launch.umask or "")
            make_folder_first(os.path.expanduser(plan.checkpoint_dir),
                              0o077 if mask is None else mask)

    def attempt_launcher(self, submission: Submission) -> LocalLauncher:
        return LocalLauncher(submission)

    def stop_leftovers(self, job_id: str, row: JobStatus) -> None:
        stop_job_processes(job_id, grace=2.0)

    def leftovers(self, job_id: str, row: JobStatus) -> bool:
        return bool(job_processes(job_id))


KIND = LocalKind()
