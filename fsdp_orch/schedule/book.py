"""The schedules of one ``$FSDP_ORCH_HOME``: a folder per schedule under ``schedules/`` with its
definition (``schedule.json``, written by the CLI), its state (``state.json``, written only by the
scheduler that holds the lock) and its event log (``events/``, as jobs have)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_orch.jobspec.schedule import NAME_FIELD, Schedule, check_schedule_name
from fsdp_orch.places.private import make_private_dirs, untrusted, write_private
from fsdp_orch.record.events import EventWriter, read_job
from fsdp_orch.vocab.errors import FsdpOrchError, InputError

SCHEDULES_DIR = "schedules"
LOCK_FILE = "scheduler.lock"
KEEP_RUNS = 50  # runs remembered per schedule (what concurrency and init-from-previous look at)


@dataclass
class ScheduleState:
    last_tick: float | None = None  # the newest tick handled (submitted, skipped or missed)
    # {"tick": epoch, "job": id}, oldest first
    runs: list[dict[str, Any]] = field(default_factory=list)

    def add_run(self, tick: float, job_id: str) -> None:
        if not any(r["job"] == job_id for r in self.runs):
            self.runs.append({"tick": tick, "job": job_id})
            del self.runs[:-KEEP_RUNS]


def _state_of(data: Any) -> ScheduleState | None:
    """``state.json``'s content as a ScheduleState; None when it is not that shape."""
    if not isinstance(data, dict):
        return None
    last_tick, runs = data.get("last_tick"), data.get("runs") or []
    if last_tick is not None and (isinstance(last_tick, bool)
                                  or not isinstance(last_tick, (int, float))):
        return None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("job"), str)
                                             for r in runs):
        return None
    return ScheduleState(last_tick=last_tick, runs=list(runs))


def _warn_on_stderr(line: str) -> None:
    print(f"fsdp-orch: warning: {line}", file=sys.stderr, flush=True)


class ScheduleBook:
    """``warn``: told once per broken schedule file that ``all()`` skips (default: stderr)."""

    def __init__(self, home: Path, warn: Callable[[str], None] = _warn_on_stderr):
        self.root = Path(home) / SCHEDULES_DIR
        self._warn = warn
        self._warned: set[str] = set()

    def _dir(self, name: str) -> Path:
        """The schedule's folder; a name that is not one safe path part is an InputError on NAME
        (``../schedules/x`` never reaches outside ``schedules/``)."""
        return self.root / check_schedule_name(name)

    def problem(self, name: str) -> str | None:
        """Why schedule ``name``'s definition must not be read, or None: its file, its folder and
        the schedules folder must be this user's, writable by no one else (see places/private)."""
        folder = self._dir(name)
        above = [str(self.root), str(self.root.parent)]
        return untrusted(str(folder), above) or untrusted(str(folder / "schedule.json"),
                                                          [str(folder), *above])

    def add(self, schedule: Schedule) -> None:
        make_private_dirs(str(self.root))
        try:
            self._dir(schedule.name).mkdir(0o700)
        except FileExistsError:
            raise InputError(f"a schedule named {schedule.name!r} exists; remove it first "
                             f"(fsdp-orch schedule remove {schedule.name})",
                             field=NAME_FIELD) from None
        write_private(str(self._dir(schedule.name) / "schedule.json"), schedule.to_json())
        self.writer(schedule.name, "cli").append("schedule_added", cron=schedule.cron,
                                                 tz=schedule.tz, cluster=schedule.cluster,
                                                 job_file=schedule.job_file)

    def get(self, name: str) -> Schedule:
        path = self._dir(name) / "schedule.json"
        problem = self.problem(name)
        if problem:
            raise InputError(f"schedule {name!r} is not read: {problem}", field=NAME_FIELD)
        try:
            return Schedule.from_json(path.read_text(), file=str(path))
        except (FileNotFoundError, NotADirectoryError):
            raise InputError(f"no schedule named {name!r} (see 'fsdp-orch schedule list')",
                             field=NAME_FIELD) from None

    def all(self) -> list[Schedule]:
        """Every readable schedule. One whose files are broken (hand-edited, or a cron an older
        version let in) is skipped with a warning naming its file: it never stops the others."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            path = self.root / name / "schedule.json"
            if not path.is_file():
                continue  # the lock, a folder being removed
            try:
                if self.problem(name) is not None:
                    continue  # another account's files, or writable by one: 'doctor' names them
                found.append(self._readable(name, path))
            except (InputError, OSError, UnicodeDecodeError) as exc:
                self._skip(path, str(exc))
        return found

    def _readable(self, name: str, path: Path) -> Schedule:
        schedule = Schedule.from_json(path.read_text(), file=str(path))
        if schedule.name != name:
            raise InputError(f"names schedule {schedule.name!r}; "
                             f"expected {name!r}, its folder's name",
                             file=str(path), field="name")
        self.state(name)  # a broken state.json would stop every pass over the schedules
        return schedule

    def _skip(self, path: Path, why: str) -> None:
        if why not in self._warned:
            self._warned.add(why)
            self._warn(f"skipping schedule {path.parent.name}: {why}")

    def save(self, schedule: Schedule) -> None:
        write_private(str(self._dir(schedule.name) / "schedule.json"), schedule.to_json())

    def remove(self, name: str) -> None:
        """Works on a schedule whose files are broken too (that is when one wants it gone)."""
        if not (self._dir(name) / "schedule.json").is_file():
            self.get(name)  # the error for a schedule that is not there
        gone = self.root / f".removed-{name}-{os.urandom(3).hex()}"
        os.replace(self._dir(name), gone)  # the scheduler never sees half a schedule
        shutil.rmtree(gone, ignore_errors=True)

    def state(self, name: str) -> ScheduleState:
        path = self._dir(name) / "state.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return ScheduleState()
        except ValueError as exc:
            raise InputError(f"not valid JSON ({exc}); expected the scheduler's state",
                             file=str(path)) from None
        state = _state_of(data)
        if state is None:
            raise InputError('expected {"last_tick": SECONDS, '
                             '"runs": [{"tick": SECONDS, "job": ID}, ...]}, '
                             "the scheduler's state", file=str(path))
        return state

    def save_state(self, name: str, state: ScheduleState) -> None:
        if not self._dir(name).is_dir():
            return  # removed meanwhile
        write_private(str(self._dir(name) / "state.json"),
                      json.dumps({"last_tick": state.last_tick, "runs": state.runs},
                                 indent=2) + "\n")

    def writer(self, name: str, role: str,
               clock: Callable[[], float] | None = None) -> EventWriter:
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
    """One scheduler per ``$FSDP_ORCH_HOME`` (a second would submit each tick once
    too, but would race the first on forbid and replace). The kernel drops the lock
    when its holder dies, however."""

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
            raise AnotherScheduler("another scheduler is running on this FSDP_ORCH_HOME "
                                   f"(pid {holder}, lock {self.path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["AnotherScheduler", "ScheduleBook", "ScheduleState", "SchedulerLock"]
