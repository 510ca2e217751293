"""The one exception family of fsdp-orch. The CLI maps them to exit codes."""

from __future__ import annotations


class FsdpOrchError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InputError(FsdpOrchError):
    """Bad user input (a job spec, a profile, a flag): exit code 2, one clear message."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 line: int | None = None):
        self.file = file
        self.field = field
        self.line = line
        self.detail = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        parts = [p for p in (where, self.field) if p]
        return ": ".join([*parts, self.detail])


class CommandError(FsdpOrchError):
    """A command we ran failed; carries its output so the user sees the cause."""

    def __init__(self, argv: list[str], returncode: int, output: str):
        self.argv = argv
        self.returncode = returncode
        self.output = output
        tail = output.strip().splitlines()[-5:]
        super().__init__(f"command {argv[0]!r} exited {returncode}: " + " | ".join(tail))


class JobNotFound(FsdpOrchError):
    exit_code = 2

    def __init__(self, job_id: str):
        super().__init__(f"no job with id {job_id!r} (see 'fsdp-orch status')")
