"""Supervision: watching attempts, classifying failures, deciding restarts."""

from __future__ import annotations

import sys

SUPERVISOR_MODULE = "fsdp_orch.supervise.supervisor"


def supervisor_command() -> tuple[str, ...]:
    """How a kind starts the supervisor of a job (the job id follows): this Python, so the nodes
    that share its path (a venv on the shared filesystem) run the same fsdp-orch."""
    return (sys.executable or "python3", "-m", SUPERVISOR_MODULE)
