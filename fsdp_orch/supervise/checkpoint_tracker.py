"""The job's checkpoints as the supervisor follows them across attempts: the latest complete one
and its mark (polled: fsdp_orch.checkpoints.polls), each new one recorded once, the resume point
of an attempt, and a checkpoint asked for before the scheduler takes the allocation away."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.checkpoints.info import CheckpointInfo
from fsdp_orch.checkpoints.layouts.hugging_face import HF_COMPLETE_FILE
from fsdp_orch.checkpoints.polls import PolledCheckpoints
from fsdp_orch.checkpoints.resume import CheckpointSetting, resume_point, setting_of
from fsdp_orch.checkpoints.storage import Storage
from fsdp_orch.launch.plan import CHECKPOINT_REQUEST_FILE
from fsdp_orch.launch.submission import Submission
from fsdp_orch.record.journal import Journal
from fsdp_orch.supervise.teardown import trainer_final_step
from fsdp_orch.vocab.errors import FsdpOrchError

FOLDER_REFUSED = "checkpoint_folder_refused"


class CheckpointTracker:
    """``storage``: where the checkpoints are read, asked again at each use: a kind knows it only
    once its machines are (a TPU VM's workers), and a re-created VM has other workers."""

    def __init__(self, journal: Journal, submission: Submission, storage: Callable[[], Storage], *,
                 clock: Callable[[], float], sleep: Callable[[float], None]):
        self.journal = journal
        self.sub = submission
        self._storage = storage
        self.clock = clock
        self.sleep = sleep
        self.last: int | None = None  # the latest complete checkpoint's mark, as last recorded
        self._last_seen: tuple[int, str] | None = None  # (step or save mark, path) last recorded
        # Why the checkpoint folder may not be loaded from (places.trust), as found at the last
        # attempt's start: then no checkpoint there is the job's, resumed or recorded.
        self.refused: str | None = None

    @property
    def storage(self) -> Storage:
        return self._storage()

    @cached_property
    def setting(self) -> CheckpointSetting:
        plan, cp = self.sub.base_plan, self.sub.job.checkpoint
        return setting_of(plan.checkpoint_dir, plan.checkpoint_file, cp.step_key, plan.workdir,
                          guarded=bool(cp.resume_args or cp.dir or cp.file))

    @cached_property
    def polled(self) -> PolledCheckpoints:
        return PolledCheckpoints(lambda: self.setting.source(self.storage))

    def latest(self) -> CheckpointInfo | None:
        """The latest complete checkpoint; a ``checkpoint.file`` counts once its size is the same as
        at the previous poll. None while the folder is refused."""
        return None if self.refused is not None else self.polled.latest()

    def step(self) -> int | None:
        """The latest complete checkpoint's step, or for a file of unknown step -N for the Nth save
        of it seen (the restart policy compares these to tell a crash loop); while the storage
        cannot be reached (the first host of hosts with their own disks, lost or preempted), the
        latest one seen."""
        try:
            info = self.latest()
        except FsdpOrchError:
            return self.last
        return self.polled.mark(info)

    def final_one(self, returned_step: int | None) -> str | None:
        """Why the latest complete checkpoint is the job's last, or None: its step is the one every
        rank had reached when one returned from its script (``returned_step``), or a Trainer's
        ``trainer_state.json`` in it says ``global_step`` reached ``max_steps``."""
        try:
            info = self.latest()
            if info is None or not info.step_known:
                return None
            if returned_step is not None and info.step >= returned_step:
                return (f"the latest complete checkpoint ({info.path.name}) is at step "
                        f"{info.step}, the step every rank had reached when one returned from its "
                        "script")
            if info.layout == "HF":
                state = self.storage.read_text(str(info.path / HF_COMPLETE_FILE))
                final = trainer_final_step(state)
                if final is not None:
                    return (f"the latest complete checkpoint ({info.path.name}) is the Trainer's "
                            f"last: its {HF_COMPLETE_FILE} has global_step {final}, max_steps "
                            f"reached")
        except FsdpOrchError:
            return None
        return None

    def record(self) -> None:
        """A checkpoint event for a complete checkpoint not recorded yet."""
        try:
            info = self.latest()
        except FsdpOrchError:
            return
        mark = self.polled.mark(info)
        if info is None or mark is None:
            return
        step = info.step if info.step_known else None
        if (mark, str(info.path)) != self._last_seen:
            self._last_seen = (mark, str(info.path))
            self.last = mark
            self.journal.checkpoint(step, path=str(info.path), step_note=info.step_note)

    def resume_point(self, attempt: int) -> tuple[str | None, int | None]:
        """The checkpoint the attempt starts from (the latest complete one), after moving aside the
        partial ones newer than it (HF's ``get_last_checkpoint`` takes the highest number, complete
        or not) and, before a restart from scratch, the files that no layout reads
        (checkpoints/resume.py)."""
        cp = self.sub.job.checkpoint
        refused, self.refused = self.refused, self._folder_problem(attempt)
        if self.refused is not None:
            if self.refused != refused:
                self.journal.add_event(attempt=attempt, kind=FOLDER_REFUSED, message=(
                    f"nothing in the checkpoint folder {self.setting.folder} is resumed or counted "
                    f"as this job's: {self.refused}; a checkpoint there could have been planted by "
                    "someone else (use a folder of yours, and copy in the checkpoints you trust)"))
            return None, None
        point = resume_point(self.setting, self.storage, attempt,
                             resume=attempt > 0 or cp.resume == "auto", sleep=self.sleep)
        for kind, message in point.events:
            self.journal.add_event(attempt=attempt, kind=kind, message=message)
        # never, or an explicit path the runtime reads from FSDP_ORCH_RESUME: None
        info = point.info
        if info is None:
            return None, None
        return str(info.path), info.step if info.step_known else None

    def _folder_problem(self, attempt: int) -> str | None:
        """places.trust for the checkpoint folder where the checkpoints are read (over SFTP on a
        host's own disk); None for a first attempt that never resumes, or where the storage cannot
        be reached (the nodes check it again as they start)."""
        if attempt == 0 and self.sub.job.checkpoint.resume == "never":
            return None
        try:
            return self.storage.folder_problem(self.setting.folder)
        except FsdpOrchError:
            return None

    def before_the_end(self, attempt: int, handle: AttemptHandle, within: float) -> None:
        """The scheduler warned that the nodes go away: ask the attempt for a checkpoint (a file the
        runtime looks for at each step; FSDP_ORCH_CHECKPOINT_REQUEST) and wait up to ``within``
        seconds for one newer than what is committed now. Scripts without the fsdp-orch runtime
        do not answer; they resume from their own latest checkpoint."""
        if not any(name == "FSDP_ORCH_CHECKPOINT_REQUEST" for name, _ in self.sub.base_plan.env):
            return
        before = self.step()
        asked = self.clock()
        request = Path(self.sub.attempt_dir(attempt)) / CHECKPOINT_REQUEST_FILE
        request.write_text(f"{asked}\n")
        while self.clock() - asked < within and handle.poll() is None:
            step = self.step()
            if step is not None and (before is None or step > before):
                self.record()
                self.journal.add_event(attempt=attempt, kind="checkpoint_on_warning", message=(
                    f"checkpoint of step {step} saved {self.clock() - asked:.1f}s after the "
                    "scheduler's warning, before the requeue"))
                return
            self.sleep(0.5)
        self.journal.add_event(attempt=attempt, kind="checkpoint_on_warning", message=(
            f"no new checkpoint within {within:g}s of the scheduler's warning: the next allocation "
            f"resumes from step {before if before is not None else 0}"))
