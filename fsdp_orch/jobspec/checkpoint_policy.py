"""The job spec's ``checkpoint:`` policy: where the job's checkpoints are, how often the runtime
saves and keeps them, and how an unchanged script is told to resume or start from a warm start."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from fsdp_orch.jobspec.field_types import ArgStr, Count, PositiveDuration, ShellStr, a_path
from fsdp_orch.jobspec.limits import MAX_STEPS
from fsdp_orch.jobspec.validation import StrictModel
from fsdp_orch.vocab.save_interval import DEFAULT_AUTO_MTBF_S

RESUME_PLACEHOLDERS = ("checkpoint", "step")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


class CheckpointPolicy(StrictModel):
    dir: Annotated[ShellStr, AfterValidator(a_path)] | None = None
    # One file per checkpoint (nanoGPT's out/ckpt.pt), relative to workdir: a path or a glob
    # (* ? [...] in any part), with {step} marking the step's digits in
    # the file name. Instead of dir.
    file: ShellStr | None = None
    # The int under this key of the saved dict is the file's step (nanoGPT: iter_num), read
    # without torch, where the name has none.
    step_key: str | None = None
    # Steps between the runtime's saves, or ``auto``: chosen by the runtime from its measured step
    # time and blocking save cost and the job's time between failures (vocab/save_interval.py).
    interval: int | Literal["auto"] = 100
    keep_last: Count = Field(default=3, ge=1)
    # Runs ``submit --fresh`` moved aside into .fsdp-orch-previous/ that are kept (the oldest beyond
    # it deleted): each costs what the job's own checkpoints do (control/resubmit.py).
    keep_previous: int = Field(default=1, ge=1)
    resume: ShellStr = "auto"
    # The runtime's saves: auto, in the background (DCP's async save) where that is safe and worth
    # a save in flight: not on XLA, from 16 MiB a rank, and while a CPU copy of every local rank's
    # state fits in half of its node's free memory (runtime/dcp_writing.py); else synchronously.
    async_save: bool | Literal["auto"] = "auto"
    # With ``interval: auto``: the time between failures assumed until the job has failed once
    # (then the supervisor passes what it observed); 4 h, why in vocab/save_interval.py.
    auto_mtbf: PositiveDuration = DEFAULT_AUTO_MTBF_S
    save_full_at_end: bool = False
    # Appended to the script's arguments when a complete checkpoint exists, with {checkpoint} (its
    # path) and {step} filled in: how an unmodified script is told to resume.
    resume_args: list[ArgStr] = Field(default_factory=list)
    # Appended when the job starts from another job's checkpoint (``submit --init-from``) and has
    # none of its own yet, with {checkpoint} and {step} filled in: how an unmodified script is told
    # to start from those weights (an HF script: --model_name_or_path {checkpoint}).
    init_args: list[ArgStr] = Field(default_factory=list)

    @field_validator("interval", mode="before",
                     json_schema_input_type=Annotated[int, Field(gt=0)] | Literal["auto"])
    @classmethod
    def _interval(cls, value: Any) -> Any:
        """A number of steps above 0, or ``auto``."""
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_STEPS:
            raise ValueError(f"expected a number of steps above 0 and at most {MAX_STEPS}, or "
                             f"'auto'; got {str(value)[:20]}...")
        if (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
                and float(value).is_integer()):
            return int(value)
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        raise ValueError(f"expected a number of steps above 0 or 'auto', got {shown}")

    @field_validator("async_save", mode="before")
    @classmethod
    def _async_save(cls, value: Any) -> Any:
        """true, false or ``auto`` (YAML's on and off are true and false already)."""
        if isinstance(value, str) and value.strip().lower() in ("auto", "true", "false"):
            return {"auto": "auto", "true": True, "false": False}[value.strip().lower()]
        if isinstance(value, bool):
            return value
        raise ValueError(f"expected auto, true or false, got {value!r}")

    @field_validator("resume_args", "init_args")
    @classmethod
    def _placeholders(cls, value: list[str]) -> list[str]:
        for arg in value:
            for name in _PLACEHOLDER.findall(arg):
                if name not in RESUME_PLACEHOLDERS:
                    raise ValueError(f"unknown placeholder {{{name}}} in {arg!r}; expected "
                                     + " or ".join(f"{{{p}}}" for p in RESUME_PLACEHOLDERS))
        return value

    @field_validator("file")
    @classmethod
    def _file(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if info.data.get("dir") is not None:
            raise ValueError("give checkpoint.dir or checkpoint.file, not both (the file's folder "
                             "is where fsdp-orch keeps what it moves aside)")
        folder, _, name = value.rstrip().rpartition("/")
        if not name.strip() or value.rstrip().endswith("/"):
            raise ValueError("expected a file path or glob like out/ckpt.pt or "
                             f"model_{{step}}.pt, got {value!r}")
        for found in _PLACEHOLDER.findall(value):
            if found != "step":
                raise ValueError(f"unknown placeholder {{{found}}} in {value!r}; expected {{step}} "
                                 "(the step's digits in the file name)")
        if "{step}" in folder:
            raise ValueError(f"{{step}} may only be in the file name, not its folder: {value!r}")
        if value.count("{step}") > 1:
            raise ValueError(f"{{step}} given more than once in {value!r}")
        return value

    @field_validator("step_key")
    @classmethod
    def _step_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("expected the key of the step in the saved dict (nanoGPT: iter_num)")
        if value is not None and info.data.get("file") is None:
            raise ValueError("the key of a single file's step: it needs checkpoint.file")
        return value

    @field_validator("resume")
    @classmethod
    def _resume(cls, value: str) -> str:
        # a bare word (``latest``) is a mistake; a path says where it is (./c, out/step-9, ~/c)
        if value not in ("auto", "never") and not any(c in value for c in "/~."):
            raise ValueError(f"expected 'auto', 'never' or a checkpoint path (with a '/'), "
                             f"got {value!r}")
        return value
