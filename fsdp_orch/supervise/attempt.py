"""What the supervisor needs from a backend to run one attempt: launch it, poll it, stop it."""

from __future__ import annotations

from typing import Protocol

from fsdp_orch.plan import LaunchPlan
from fsdp_orch.render import Artifact


class AttemptHandle(Protocol):
    ref: str  # what identifies the attempt to its engine (a process group, a SLURM step)

    def poll(self) -> int | None:
        """The exit code once every node's launcher has ended, else None."""

    def stop(self, grace: float) -> None:
        """End every process of the attempt on every node: politely, then by force after ``grace``."""


class AttemptLauncher(Protocol):
    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> AttemptHandle: ...
