"""The job's checkpoints as the supervisor follows them across attempts: the latest complete one
and its mark (polled: fsdp_orch.checkpoints.polls), each new one recorded once, the resume point
of an attempt, a checkpoint a resume went wrong from set aside (checkpoints.suspect), and a
checkpoint asked for before the scheduler takes the allocation away."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.checkpoints.info import HF, CheckpointInfo
from fsdp_orch.checkpoints.layouts.hugging_face import HF_COMPLETE_FILE
from fsdp_orch.checkpoints.polls import PolledCheckpoints
from fsdp_orch.checkpoints.resume import (
    SUSPECT,
    CheckpointSetting,
    SetAside,
    resume_point,
    set_aside,
    setting_of,
)
from fsdp_orch.checkpoints.storage import Storage
from fsdp_orch.decide.teardown import trainer_final_step
from fsdp_orch.launch.plan import CHECKPOINT_REQUEST_FILE
from fsdp_orch.launch.submission import Submission
from fsdp_orch.record.journal import Journal
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
        # every (mark, path) recorded and not set aside since: one that is the latest again (the
        # newer ones set aside, or superseded by the runtime) is no new save
        self._recorded: set[tuple[int, str]] = set()
        # (attempt, the checkpoint it resumed from), as this supervisor planned it
        self.resumed: tuple[int, CheckpointInfo] | None = None
        # The highest step of a checkpoint set aside: a checkpoint is progress only past it, so
        # falling back and saving the same steps again is no progress (the crash-loop rule holds).
        self.floor: int | None = None
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
            if info.layout == HF:
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
        seen = (mark, str(info.path))
        if seen != self._last_seen:
            self._last_seen = seen
            self.last = mark
            if seen not in self._recorded:
                self._recorded.add(seen)
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
        self.resumed = (attempt, info) if info is not None else None
        if info is None:
            return None, None
        return str(info.path), info.step if info.step_known else None

    def resume_step(self, attempt: int) -> int | None:
        """The step of the checkpoint ``attempt`` resumed from, where this supervisor planned it
        and the step is known; else None."""
        if self.resumed is None or self.resumed[0] != attempt or not self.resumed[1].step_known:
            return None
        return self.resumed[1].step

    def set_aside_suspect(self, attempt: int, why: str) -> SetAside | None:
        """The checkpoint ``attempt`` resumed from is suspect: moved into the checkpoint folder's
        ``.fsdp-orch-suspect/`` with the complete ones the attempt saved after it, each named in a
        ``checkpoint_suspect`` notice. None when there is nothing to move or it cannot be moved
        (said in the notice)."""
        if self.resume_step(attempt) is None:
            return None
        assert self.resumed is not None
        path = str(self.resumed[1].path)
        try:
            done = set_aside(self.setting.source(self.storage), path, f"attempt-{attempt}")
        except (OSError, FsdpOrchError) as exc:
            self.journal.add_event(attempt=attempt, kind=SUSPECT, message=(
                f"{path} is suspect ({why}) but could not be moved aside: {exc}"))
            return None
        for src, _ in done.moved:
            self._forget(src)
        if done.highest is not None:
            self._raise_floor(done.highest)
        nxt = (f"the next attempt resumes from {done.next_from.path}" if done.next_from is not None
               else "the next attempt starts from scratch: no complete checkpoint is left")
        if not done.moved:
            return done
        (src, dst), *newer = done.moved
        after = "" if not newer else (
            f"; with the {len(newer)} checkpoint(s) attempt {attempt} saved after it, from its "
            f"weights: {', '.join(f'{a} to {b}' for a, b in newer)}")
        self.journal.add_event(attempt=attempt, kind=SUSPECT, message=(
            f"{why}; {src} is suspect: moved to {dst} and kept (never deleted){after}; {nxt}"))
        return done

    def set_aside_by_runtime(self, attempt: int, path: str, why: str, moved_to: str) -> None:
        """The fsdp_orch runtime could not load the checkpoint at ``path``, moved it to
        ``moved_to`` and restored an earlier one in the same attempt: named in a notice, and no
        longer the job's (a later save of its step is a new one)."""
        step = self._forget(path)
        if step is not None:
            self._raise_floor(step)
        self.journal.add_event(attempt=attempt, kind=SUSPECT, message=(
            f"{path} would not load ({why}): the fsdp_orch runtime moved it to {moved_to} and kept "
            "it (never deleted), and restored an earlier checkpoint in the same attempt"))

    def _forget(self, path: str) -> int | None:
        """A checkpoint set aside is no longer one recorded (its path may be saved to again);
        returns its mark as recorded, if it was."""
        name = Path(path).name
        gone = {seen for seen in self._recorded if seen[1] == path or Path(seen[1]).name == name}
        self._recorded -= gone
        return max((mark for mark, _ in gone), default=None)

    def _raise_floor(self, step: int) -> None:
        self.floor = step if self.floor is None else max(self.floor, step)

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
