"""The SLURM kind's profile (``kind: slurm``): the scheduler options of the batch job."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from fsdp_orch.jobspec.limits import (
    MAX_CPUS,
    MAX_NODES,
    MAX_PROCS_PER_NODE,
    MAX_SECONDS_SETTING,
    at_most,
)
from fsdp_orch.jobspec.profiles import ProfileBase, no_control
from fsdp_orch.jobspec.validation import StrictModel

_SLURM_TIME = re.compile(r"([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}|[0-9]+-[0-9]+")
# sbatch --mem: a number of megabytes or one with a unit; 0 is SLURM's "all the node's memory"
_SLURM_MEM = re.compile(r"[0-9]{1,15}([KMGTkmgt][Bb]?)?")
# a partition (or a comma-separated list of them), an account, a QOS
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")


def _mem(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # mem: 0 (all the node's memory), mem: 64000 (megabytes)
    if isinstance(value, str) and _SLURM_MEM.fullmatch(value.strip()):
        return value.strip()
    raise ValueError("expected a SLURM memory size like 64G, 500000M or 0 (all the node's "
                     f"memory); got {value!r}")


def _name(value: str) -> str:
    if not _SLURM_NAME.fullmatch(value):
        raise ValueError("expected a SLURM name (letters, digits, '_', '.', '-'; partitions may "
                         f"be a comma-separated list); got {value!r}")
    return value


def _path(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a folder; got an empty path")
    return no_control(value, "a path")


SlurmName = Annotated[str, AfterValidator(_name)]
Plain = Annotated[str, AfterValidator(no_control)]


class SlurmContainer(StrictModel):
    image: Plain
    mounts: list[Plain] = Field(default_factory=list)
    workdir: Plain | None = None


class SlurmProfile(ProfileBase):
    kind: Literal["slurm"]
    # The python on the nodes (default python3 on their PATH, once setup: has run): the supervisor
    # in the allocation, the node agents, the standby and the ranks run on it, with its own
    # fsdp-orch[runtime]. Never the CLI's interpreter (places.python_env).
    partition: SlurmName | None = None
    account: SlurmName | None = None
    qos: SlurmName | None = None
    time: str = "01:00:00"
    gpus_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] = Field(default=0, ge=0)
    cpus_per_task: Annotated[int, at_most(MAX_CPUS)] | None = Field(default=None, gt=0)
    mem: Annotated[str, BeforeValidator(_mem, json_schema_input_type=str | int)] | None = None
    constraint: Plain | None = None
    setup: list[str] = Field(default_factory=list)
    sbatch_extra: dict[str, str | int | bool] = Field(default_factory=dict)
    container: SlurmContainer | None = None
    job_folder: Annotated[str, AfterValidator(_path)] | None = None
    signal_delay: Annotated[int, at_most(MAX_SECONDS_SETTING)] = Field(default=120, ge=0)
    # Nodes allocated beyond the job's ``nodes``: a lost node is left out and the next attempt runs
    # on a spare, in the same allocation (a job's own spare_nodes wins).
    spare_nodes: Annotated[int, at_most(MAX_NODES)] = Field(default=0, ge=0)
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
        for key, option in value.items():
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option {key!r} is not an option name like 'mail-type'")
            if isinstance(option, str):
                no_control(option, f"the value of sbatch option {key!r}")
        return value

    def default_procs_per_node(self) -> int:
        return self.gpus_per_node or 1

    def spare_nodes_for(self, job: Any) -> int:
        return self.spares_for(job.spare_nodes)

    def spares_for(self, job_spare_nodes: int | None) -> int:
        """The spare nodes of a job on this profile: its own ``spare_nodes``, else the profile's."""
        return self.spare_nodes if job_spare_nodes is None else job_spare_nodes
