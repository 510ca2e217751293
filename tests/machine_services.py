"""The real services the tests build on this machine (the SLURM cluster, the SSH hosts), each driven
by a shell script with a start and a stop command that prints ``export NAME=value`` lines. Shared by
their session fixtures: skip where the machine cannot run the service, fail instead under CI, reuse
one that already runs, and stop at the end only what the session started."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def parse_exports(text: str) -> dict[str, str]:
    """``export NAME=value`` lines (shell-quoted values) as a dict."""
    env = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            env[name] = value
    return env


def run_script(script: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@contextmanager
def service(script: Path, what: str, cannot_run: str | None, start: tuple[str, ...],
            stop: tuple[str, ...],
            start_timeout: float, stop_timeout: float) -> Iterator[dict[str, str]]:
    """Start ``what`` with ``script start...`` (``status`` says whether it already ran) and yield
    the exports it printed; afterwards ``script stop...``, unless it ran before the session."""
    if cannot_run is not None:
        if in_ci():
            pytest.fail(f"CI is set, so this machine must run {what}: {cannot_run}")
        pytest.skip(cannot_run)
    name = f"tests/{script.parent.name}/{script.name}"
    was_running = run_script(script, "status", timeout=60).returncode == 0
    started = time.monotonic()
    proc = run_script(script, *start, timeout=start_timeout)
    if proc.returncode != 0:
        pytest.fail(f"{name} {' '.join(start)} exited {proc.returncode} after "
                    f"{time.monotonic() - started:.0f}s\n{proc.stderr[-8000:]}")
    yield parse_exports(proc.stdout)
    if not was_running:
        down = run_script(script, *stop, timeout=stop_timeout)
        assert down.returncode == 0, (f"{name} {' '.join(stop)} exited {down.returncode}"
                                      f"\n{down.stderr}")
