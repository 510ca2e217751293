"""The schedules of one ``$FSDP_ORCH_HOME``: a folder per schedule under ``schedules/`` with its
definition (``schedule.json``, written by the CLI), its state (``state.json``, written only by the
scheduler that holds the lock) and its event log (``events/``, as jobs have)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_orch.jobspec.schedule import Schedule
from fsdp_orch.places.private import make_private_dirs, untrusted, write_private
from fsdp_orch.record.events import EventWriter, read_job
from fsdp_orch.vocab.errors import FsdpOrchError, InputError

SCHEDULES_DIR = "schedules"
LOCK_FILE = "scheduler.lock"
KEEP_RUNS = 50  # runs remembered per schedule (what concurrency and init-from-previous look at)


@dataclass
class ScheduleState:
    last_tick: float | None = None  # the newest tick handled (submitted, skipped or missed)
    runs: list[dict[str, Any]] = field(default_factory=list)  # {"tick": epoch, "job": id}, oldest first

    def add_run(self, tick: float, job_id: str) -> None:
        if not any(r["job"] == job_id for r in self.runs):
            self.runs.append({"tick": tick, "job": job_id})
            del self.runs[:-KEEP_RUNS]


def _write_atomic(path: Path, text: str) -> None:
    write_private(str(path), text)  # 0600, through a temporary file and a rename


class ScheduleBook:
    def __init__(self, home: Path):
        self.root = Path(home) / SCHEDULES_DIR

    def _dir(self, name: str) -> Path:
        return self.root / name

    def problem(self, name: str) -> str | None:
        """Why schedule ``name``'s definition must not be read, or None: its file, its folder and
        the schedules folder must be this user's, writable by no one else (see places/private)."""
        folder = self._dir(name)
        above = [str(self.root), str(self.root.parent)]
        return untrusted(str(folder), above) or untrusted(str(folder / "schedule.json"), [str(folder), *above])

    def add(self, schedule: Schedule) -> None:
        make_private_dirs(str(self.root))
        try:
            self._dir(schedule.name).mkdir(0o700)
        except FileExistsError:
            raise InputError(f"a schedule named {schedule.name!r} exists; remove it first "
                             f"(fsdp-orch schedule remove {schedule.name})", field="NAME") from None
        _write_atomic(self._dir(schedule.name) / "schedule.json", schedule.to_json())
        self.writer(schedule.name, "cli").append("schedule_added", cron=schedule.cron, tz=schedule.tz,
                                                  cluster=schedule.cluster, job_file=schedule.job_file)

    def get(self, name: str) -> Schedule:
        path = self._dir(name) / "schedule.json"
        problem = self.problem(name)
        if problem:
            raise InputError(f"schedule {name!r} is not read: {problem}", field="NAME")
        try:
            return Schedule.from_json(path.read_text(), file=str(path))
        except (FileNotFoundError, NotADirectoryError):
            raise InputError(f"no schedule named {name!r} (see 'fsdp-orch schedule list')",
                             field="NAME") from None

    def all(self) -> list[Schedule]:
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            path = self._dir(name) / "schedule.json"
            if path.is_file() and self.problem(name) is None:  # others' files: 'doctor' names them
                found.append(Schedule.from_json(path.read_text(), file=str(path)))
        return found

    def save(self, schedule: Schedule) -> None:
        _write_atomic(self._dir(schedule.name) / "schedule.json", schedule.to_json())

    def remove(self, name: str) -> None:
        self.get(name)
        gone = self.root / f".removed-{name}-{os.urandom(3).hex()}"
        os.replace(self._dir(name), gone)  # the scheduler never sees half a schedule
        shutil.rmtree(gone, ignore_errors=True)

    def state(self, name: str) -> ScheduleState:
        try:
            data = json.loads((self._dir(name) / "state.json").read_text())
        except FileNotFoundError:
            return ScheduleState()
        return ScheduleState(last_tick=data.get("last_tick"), runs=list(data.get("runs") or []))

    def save_state(self, name: str, state: ScheduleState) -> None:
        if not self._dir(name).is_dir():
            return  # removed meanwhile
        _write_atomic(self._dir(name) / "state.json",
                      json.dumps({"last_tick": state.last_tick, "runs": state.runs}, indent=2) + "\n")

    def writer(self, name: str, role: str, clock=None) -> EventWriter:  # type: ignore[no-untyped-def]
        return EventWriter(self._dir(name), role, **({"clock": clock} if clock else {}))

    def events(self, name: str) -> list[dict[str, Any]]:
        self.get(name)
        return read_job(self._dir(name))[0]

    def lock(self) -> SchedulerLock:
        make_private_dirs(str(self.root))
        return SchedulerLock(self.root / LOCK_FILE)


class AnotherScheduler(FsdpOrchError):
    exit_code = 1


class SchedulerLock:
    """One scheduler per ``$FSDP_ORCH_HOME`` (a second would submit each tick once too, but would race
    the first on forbid and replace). The kernel drops the lock when its holder dies, however."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> SchedulerLock:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AnotherScheduler(f"another scheduler is running on this FSDP_ORCH_HOME (pid {holder}, "
                                   f"lock {self.path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["AnotherScheduler", "ScheduleBook", "ScheduleState", "SchedulerLock"]
