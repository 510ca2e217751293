"""Cluster profiles (``clusters/*.yaml``): what every kind's profile
has, and where profiles are found.

Each cluster kind's own model lives with its backend (``fsdp_orch.backends``); the registry there
parses a profile file with the model of the kind it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, field_validator

from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.jobspec.secrets import ValueOrRef
from fsdp_orch.jobspec.sizes import parse_size
from fsdp_orch.jobspec.validation import StrictModel, check_env_names
from fsdp_orch.places.builtin import PROFILE_ORIGINS, home, profile_dirs
from fsdp_orch.places.trust import load_problem, refusal
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.inputs import control_character

MemorySize = Annotated[int, BeforeValidator(parse_size, json_schema_input_type=int | str)]


class ProfileBase(StrictModel):
    kind: str
    description: str = ""
    template: str | None = None  # a template file that replaces the built-in one for this kind
    python: str = "python3"
    env: dict[str, ValueOrRef] = Field(default_factory=dict)
    # The run root the submit host and the nodes share (NFS, Lustre, GPFS): job run folders go to
    # <shared_dir>/runs/<id>. None: $FSDP_ORCH_HOME/runs, which then must be
    # shared for multi-host kinds.
    shared_dir: str | None = None
    notify: list[Webhook] = Field(default_factory=list)  # webhooks for every job on this cluster
    # each GPU's memory (80GB), for ``fsdp-orch fit``'s verdict; None: not said
    gpu_memory: MemorySize | None = None

    # Which launchers this kind of cluster can run.
    launchers: ClassVar[tuple[str, ...]] = ()

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, ValueOrRef]) -> dict[str, ValueOrRef]:
        return check_env_names(value)

    @field_validator("python", check_fields=False)
    @classmethod
    def _python(cls, value: str) -> str:
        """Every kind's ``python`` (a kind may give it another default): a command or a path."""
        if not value.strip():
            raise ValueError("expected a python interpreter (python3, or a path); got "
                             f"{value!r}")
        return no_control(value, "an interpreter")

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("expected a template file's path; got an empty one")
        return value

    @field_validator("shared_dir")
    @classmethod
    def _shared_dir(cls, value: str | None) -> str | None:
        if value is None:
            return None
        import os

        expanded = os.path.expanduser(value)
        if not os.path.isabs(expanded):
            raise ValueError("expected an absolute path on the filesystem "
                             f"the nodes share; got {value!r}")
        return os.path.normpath(expanded)

    def default_procs_per_node(self) -> int:
        return 1

    def spare_nodes_for(self, job: Any) -> int:
        """The nodes held in reserve beyond the job's (a straggler's node is left out for one,
        ``watch.stragglers: replace``): none, unless the kind says otherwise."""
        return 0


@dataclass(frozen=True)
class ProfileRef:
    """A profile found on disk: its name, file and where it came from."""

    name: str
    path: Path
    origin: str  # "project", "home", "built-in" or "path"
    refused: str | None = None  # why it must not be used (places.trust), for one not the user's

    def usable(self) -> ProfileRef:
        """This profile, or an InputError that names it, its owner and mode, and what to do."""
        if self.refused is None:
            return self
        fix = ("move it into a folder of yours and `chmod go-w` it and its folders, or run from "
               "a folder of yours, or name a profile of yours by path (--cluster PATH)")
        raise InputError(refusal("cluster profile", self.path, self.refused, fix),
                         field="--cluster")


def no_control(value: str, what: str = "a value") -> str:
    """``value``, when it holds no control or bidi character (a line break in a value that reaches
    a launch script's line, an #SBATCH line or a command splits it)."""
    problem = control_character(value)
    if problem is not None:
        raise ValueError(f"expected {what} without control characters; it holds {problem}")
    return value


def host_address(value: str) -> str:
    """A host name or an IP address (v4, v6), nothing a shell or ssh would read otherwise."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.:\-\[\]]+", value):
        raise ValueError(f"expected a host name or IP address; got {value!r}")
    return value


def search_dirs(cwd: Path | None = None) -> list[tuple[str, Path]]:
    dirs = profile_dirs(str(home()), str(cwd) if cwd is not None else None)
    return [(origin, Path(directory))
            for origin, directory in zip(PROFILE_ORIGINS, dirs, strict=True)]


def discover(cwd: Path | None = None) -> dict[str, ProfileRef]:
    """Profiles by name; earlier directories shadow later ones (project, home, built-in). One that
    is refused (``ProfileRef.refused``) still shadows: it is never passed over quietly."""
    found: dict[str, ProfileRef] = {}
    for origin, directory in search_dirs(cwd):
        if not directory.is_dir():
            continue
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            if path.stem not in found:
                found[path.stem] = checked(ProfileRef(path.stem, path, origin))
    return found


def checked(ref: ProfileRef) -> ProfileRef:
    """``ref`` with why it is refused, if it is: every profile but the built-in ones (inside the
    installed package) must follow the rule of ``places.trust``."""
    if ref.origin == "built-in":
        return ref
    why = load_problem(ref.path)
    return ref if why is None else ProfileRef(ref.name, ref.path, ref.origin, why)


def find_profile(name_or_path: str, cwd: Path | None = None) -> ProfileRef:
    """By name (discovery order) or by path to a YAML file."""
    refs = discover(cwd)
    ref = refs.get(name_or_path)
    if ref is not None:
        return ref.usable()
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return checked(ProfileRef(candidate.stem, candidate, "path")).usable()
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        what = "is a folder" if candidate.is_dir() else "does not exist"
        raise InputError(f"the profile file {name_or_path} {what} (a cluster is a profile name, "
                         "see 'fsdp-orch clusters', or the path of a YAML file)", field="--cluster")
    import difflib

    hint = difflib.get_close_matches(name_or_path, list(refs), n=1)
    known = ", ".join(sorted(refs)) or "none"
    raise InputError(f"unknown cluster {name_or_path!r}"
                     + (f"; did you mean {hint[0]!r}?" if hint else "")
                     + f" (known clusters: {known})", field="--cluster")
