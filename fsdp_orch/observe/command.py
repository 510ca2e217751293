"""The one place fsdp-orch runs a command and waits for it (scheduler commands, py-spy): argv lists,
no shell. ``Runner`` is what code that runs commands takes, so a test can hand it another."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from typing import NamedTuple

from fsdp_orch.vocab.errors import CommandError


class CommandResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[list[str], float], CommandResult]


def run(argv: list[str], timeout: float = 60.0,
        env: Mapping[str, str] | None = None) -> CommandResult:
    """Run ``argv`` to its end; 127 for a missing binary, 124 for a timeout. Never raises. ``env``:
    the command's whole environment (default: this process's)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, check=False, env=None if env is None else dict(env))
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"timed out after {timeout:g}s")
    except OSError as exc:
        return CommandResult(127 if isinstance(exc, FileNotFoundError) else 126, "", str(exc))
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def run_command(argv: list[str], timeout: float = 60.0, runner: Runner = run) -> str:
    """``argv``'s standard output; a CommandError with its output when it fails."""
    result = runner(argv, timeout)
    if result.returncode == 127:
        raise CommandError(argv, 127, f"{argv[0]} not found on PATH")
    if result.returncode != 0:
        raise CommandError(argv, result.returncode, result.stderr or result.stdout)
    return result.stdout
