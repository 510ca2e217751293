"""The SLURM kind's profile (``kind: slurm``): the scheduler options of the batch job."""

from __future__ import annotations

import re
import sys
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.validation import StrictModel

_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+")


class SlurmContainer(StrictModel):
    image: str
    mounts: list[str] = Field(default_factory=list)
    workdir: str | None = None


class SlurmProfile(ProfileBase):
    kind: Literal["slurm"]
    # Default: the interpreter running fsdp-orch (a venv on the shared filesystem is the same path
    # on the compute nodes).
    python: str = Field(default_factory=lambda: sys.executable or "python3")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    gpus_per_node: int = Field(default=0, ge=0)
    cpus_per_task: int | None = Field(default=None, gt=0)
    mem: str | None = None
    constraint: str | None = None
    setup: list[str] = Field(default_factory=list)
    sbatch_extra: dict[str, str | int | bool] = Field(default_factory=dict)
    container: SlurmContainer | None = None
    job_folder: str | None = None
    signal_delay: int = Field(default=120, ge=0)
    # Nodes allocated beyond the job's ``nodes``: a lost node is left out and the next attempt runs
    # on a spare, in the same allocation (a job's own spare_nodes wins).
    spare_nodes: int = Field(default=0, ge=0)
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "accelerate", "python")

    @field_validator("time", mode="before")
    @classmethod
    def _time_text(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # YAML reads an unquoted 01:00:00 as the number 3600: refuse to guess what was meant.
            raise ValueError(f"expected a quoted SLURM time limit like \"30\", \"04:00:00\" or "
                             "\"2-00:00:00\" (unquoted, YAML reads 1:00:00 as a number); "
                             f"got {value!r}")
        return value

    @field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not _SLURM_TIME.fullmatch(str(value)):
            raise ValueError("expected a SLURM time limit like 30, 04:00:00 or 2-00:00:00")
        return str(value)

    @field_validator("sbatch_extra")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option {key!r} is not an option name like 'mail-type'")
        return value

    def default_procs_per_node(self) -> int:
        return self.gpus_per_node or 1

    def spares_for(self, job_spare_nodes: int | None) -> int:
        """The spare nodes of a job on this profile: its own ``spare_nodes``, else the profile's."""
        return self.spare_nodes if job_spare_nodes is None else job_spare_nodes
