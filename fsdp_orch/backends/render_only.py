"""The doing half of a kind whose planning and rendering exist but whose submission does not yet:
``submit`` and ``cancel`` say so (exit 2); there is never a job of the kind to refresh."""

from __future__ import annotations

from typing import Any

from fsdp_orch.backends.base import AttemptLauncher, ClusterKind
from fsdp_orch.errors import InputError
from fsdp_orch.index import JobIndex
from fsdp_orch.submission import Submission


def not_implemented(kind: str) -> InputError:
    return InputError(f"submitting to a {kind} cluster is not implemented yet; "
                      f"'fsdp-orch render --cluster ...' shows what would run", field="--cluster")


class RenderOnly(ClusterKind):
    def attempt_launcher(self, submission: Submission) -> AttemptLauncher:
        raise not_implemented(self.name)

    def start(self, index: JobIndex, submission: Submission) -> None:
        raise not_implemented(self.name)

    def cancel(self, index: JobIndex, row: dict[str, Any]) -> str:
        raise not_implemented(self.name)

    def refresh(self, index: JobIndex, rows: list[dict[str, Any]]) -> list[str]:
        return []
