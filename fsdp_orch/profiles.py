"""Cluster profiles (``clusters/*.yaml``): one model per kind, and their discovery."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from fsdp_orch.errors import InputError
from fsdp_orch.resources import builtin_dir, home
from fsdp_orch.spec import ArgStr
from fsdp_orch.validation import StrictModel, check_env_names, validate_doc
from fsdp_orch.yamlio import load_file

KINDS = ("local", "slurm", "ssh", "tpu-vm")
_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+")


class ProfileBase(StrictModel):
    kind: str
    description: str = ""
    template: str | None = None  # a template file that replaces the built-in one for this kind
    python: str = "python3"
    env: dict[str, ArgStr] = Field(default_factory=dict)

    # Which launchers this kind of cluster can run.
    launchers: ClassVar[tuple[str, ...]] = ()

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env_names(value)

    def default_procs_per_node(self) -> int:
        return 1


class LocalProfile(ProfileBase):
    kind: Literal["local"]
    device: Literal["auto", "cpu", "cuda"] = "auto"
    python: str = Field(default_factory=lambda: sys.executable or "python3")
    procs_per_node: int | None = Field(default=None, gt=0)
    rdzv_host: str = "127.0.0.1"
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "accelerate", "python")

    def default_procs_per_node(self) -> int:
        return self.procs_per_node or 1


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
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "accelerate", "python")

    @field_validator("time", mode="before")
    @classmethod
    def _time_text(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # YAML reads an unquoted 01:00:00 as the number 3600: refuse to guess what was meant.
            raise ValueError(f"expected a quoted SLURM time limit like \"30\", \"04:00:00\" or "
                             f"\"2-00:00:00\" (unquoted, YAML reads 1:00:00 as a number); got {value!r}")
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
    remote_workdir: str | None = None
    shared_filesystem: bool = True
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

    def default_procs_per_node(self) -> int:
        return self.procs_per_node


class TpuVmProfile(ProfileBase):
    kind: Literal["tpu-vm"]
    tpu_name: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    project: str | None = None
    accelerator_type: str = Field(min_length=1)
    runtime_version: str = Field(min_length=1)
    spot: bool = False
    num_workers: int = Field(default=1, gt=0)
    remote_workdir: str = "~/work"
    setup: list[str] = Field(default_factory=list)
    launchers: ClassVar[tuple[str, ...]] = ("xla", "python")


PROFILE_MODELS: dict[str, type[ProfileBase]] = {
    "local": LocalProfile, "slurm": SlurmProfile, "ssh": SshProfile, "tpu-vm": TpuVmProfile,
}
Profile = LocalProfile | SlurmProfile | SshProfile | TpuVmProfile


@dataclass(frozen=True)
class ProfileRef:
    """A profile found on disk: its name, file and where it came from."""

    name: str
    path: Path
    origin: str  # "project", "home" or "built-in"


def search_dirs(cwd: Path | None = None) -> list[tuple[str, Path]]:
    return [("project", (cwd or Path.cwd()) / "clusters"), ("home", home() / "clusters"),
            ("built-in", builtin_dir("clusters"))]


def discover(cwd: Path | None = None) -> dict[str, ProfileRef]:
    """Profiles by name; earlier directories shadow later ones (project, home, built-in)."""
    found: dict[str, ProfileRef] = {}
    for origin, directory in search_dirs(cwd):
        if not directory.is_dir():
            continue
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            found.setdefault(path.stem, ProfileRef(path.stem, path, origin))
    return found


def load_profile(name_or_path: str, cwd: Path | None = None) -> tuple[Profile, ProfileRef]:
    """By name (discovery order) or by path to a YAML file."""
    refs = discover(cwd)
    ref = refs.get(name_or_path)
    if ref is None:
        candidate = Path(name_or_path)
        if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
            ref = ProfileRef(candidate.stem, candidate, "path")
        else:
            import difflib

            hint = difflib.get_close_matches(name_or_path, list(refs), n=1)
            known = ", ".join(sorted(refs)) or "none"
            raise InputError(f"unknown cluster {name_or_path!r}"
                             + (f"; did you mean {hint[0]!r}?" if hint else "")
                             + f" (known clusters: {known})", field="--cluster")
    return parse_profile(ref.path), ref


def parse_profile(path: Path) -> Profile:
    doc = load_file(path, "cluster profile")
    kind = doc.data.get("kind")
    model = PROFILE_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InputError(f"expected one of {', '.join(KINDS)}; got {kind!r}", file=doc.file,
                         field="kind", line=doc.line_of(("kind",)))
    return validate_doc(model, doc, doc.data_with_text(("env",)))
