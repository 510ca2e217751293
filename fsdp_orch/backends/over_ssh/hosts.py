"""The hosts a job reaches over SSH, and how: the ssh kind's profile, which is also what the shared
SSH machinery (``attempt``, ``launcher``, ``staging``, ``reports``) takes; the TPU VM kind builds
one for its workers."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from fsdp_orch.jobspec.limits import MAX_PROCS_PER_NODE, MAX_SECONDS_SETTING, at_most
from fsdp_orch.jobspec.profiles import ProfileBase, host_address, no_control
from fsdp_orch.jobspec.validation import StrictModel


def _a_path(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a folder or file path; got an empty one")
    return no_control(value, "a path")


Path_ = Annotated[str, AfterValidator(_a_path)]
Plain = Annotated[str, AfterValidator(no_control)]


class SshHost(StrictModel):
    address: str = Field(min_length=1)
    port: int = Field(default=22, gt=0, lt=65536)
    user: Plain | None = None
    identity_file: Path_ | None = None

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return host_address(value)


class SshProfile(ProfileBase):
    kind: Literal["ssh"]
    device: Literal["cpu", "cuda"] = "cuda"
    hosts: list[SshHost] = Field(min_length=1)
    venv: Path_ | None = None
    shared_filesystem: bool = True
    remote_workdir: str | None = Field(default=None, validate_default=True)
    host_key_policy: Literal["strict", "accept-new", "warn"] = "strict"
    known_hosts: Path_ = "~/.ssh/known_hosts"
    procs_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] = Field(default=1, gt=0)
    rdzv_port: int | None = Field(default=None, gt=1024, lt=65536)
    connect_timeout: Annotated[int, at_most(MAX_SECONDS_SETTING)] = Field(default=10, gt=0)
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "accelerate", "python")

    @model_validator(mode="after")
    def _venv_python(self) -> SshProfile:
        if self.venv:
            object.__setattr__(self, "python", self.venv.rstrip("/") + "/bin/python")
        return self

    @field_validator("remote_workdir")
    @classmethod
    def _own_disks_need_a_workdir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("shared_filesystem") is False and not (value or "").startswith("/"):
            raise ValueError("with shared_filesystem: false, expected an absolute folder that "
                             "every host has (fsdp-orch copies the job there and keeps its run "
                             "folders in it)")
        return value

    def default_procs_per_node(self) -> int:
        return self.procs_per_node

    def spare_nodes_for(self, job: Any) -> int:
        """The hosts listed beyond the job's nodes: the next one takes a lost host's place."""
        return max(0, len(self.hosts) - job.nodes)
