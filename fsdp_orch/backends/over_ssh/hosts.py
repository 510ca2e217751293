"""The hosts a job reaches over SSH, and how: the ssh kind's profile, which is also what the shared
SSH machinery (``attempt``, ``launcher``, ``staging``, ``reports``) takes; the TPU VM kind builds
one for its workers."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.validation import StrictModel


class SshHost(StrictModel):
    address: str = Field(min_length=1)
    port: int = Field(default=22, gt=0, lt=65536)
    user: str | None = None
    identity_file: str | None = None

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:\-\[\]]+", value):
            raise ValueError("expected a host name or IP address")
        return value


class SshProfile(ProfileBase):
    kind: Literal["ssh"]
    device: Literal["cpu", "cuda"] = "cuda"
    hosts: list[SshHost] = Field(min_length=1)
    venv: str | None = None
    shared_filesystem: bool = True
    remote_workdir: str | None = Field(default=None, validate_default=True)
    host_key_policy: Literal["strict", "accept-new", "warn"] = "strict"
    known_hosts: str = "~/.ssh/known_hosts"
    procs_per_node: int = Field(default=1, gt=0)
    rdzv_port: int | None = Field(default=None, gt=1024, lt=65536)
    connect_timeout: int = Field(default=10, gt=0)
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
