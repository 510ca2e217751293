"""The job spec's schema (``job.yaml``): what to run, how to shard it,
how to checkpoint, restart and watch it."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from fsdp_orch.bootstrap.faults import parse_faults
from fsdp_orch.jobspec.durations import parse_duration
from fsdp_orch.jobspec.fit import FitOptions
from fsdp_orch.jobspec.limits import (
    MAX_COUNT,
    MAX_NODES,
    MAX_PROCS_PER_NODE,
    MAX_STEPS,
    MIN_POLL_S,
    MIN_TIMEOUT_S,
    at_least_seconds,
    at_most,
)
from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.jobspec.secrets import SecretRef, ValueOrRef
from fsdp_orch.jobspec.validation import StrictModel, check_env_names
from fsdp_orch.vocab.categories import DEFAULT_RETRY_ON, FAILURE_CATEGORIES
from fsdp_orch.vocab.inputs import control_character
from fsdp_orch.vocab.save_interval import DEFAULT_AUTO_MTBF_S

LAUNCHERS = ("torchrun", "accelerate", "xla", "python")
RESUME_PLACEHOLDERS = ("checkpoint", "step")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NODE_RANGE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]+)\s*")

# json_schema_input_type: what `fsdp-orch schema` tells editors a file may hold ("30s" or 30)
Duration = Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration,
                                                    json_schema_input_type=float | str),
                             Field(gt=0)]
# A watch timeout (>= 1 s) and a poll or the adaptive window's floor (>= 0.1 s): shorter is
# meaningless, the supervisor looking no more often than that.
Timeout = Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str),
                    at_least_seconds(MIN_TIMEOUT_S)]
PollDuration = Annotated[float, BeforeValidator(parse_duration, json_schema_input_type=float | str),
                         at_least_seconds(MIN_POLL_S)]
Count = Annotated[int, at_most(MAX_COUNT)]

# accelerate's numeric sharding strategies (FullyShardedDataParallelPlugin).
SHARDING_BY_NUMBER = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD",
                      5: "HYBRID_SHARD_ZERO2"}


def fsdp_name(key: str) -> str:
    """The spec's name for an FSDP option written the accelerate way: ``fsdp_`` prefix off,
    accelerate's older ``backward_prefetch_policy`` renamed."""
    name = key[len("fsdp_"):] if key.startswith("fsdp_") else key
    return "backward_prefetch" if name == "backward_prefetch_policy" else name


def _upper_enum(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().upper()
    return value


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL bytes (a program cannot receive them)")
    return value


# A string that reaches a program (argv, environment, paths): numbers and booleans written
# unquoted become their text; NUL bytes, which no argv or environment can carry, are refused.
ArgStr = Annotated[str, BeforeValidator(_scalar_to_str,
                                        json_schema_input_type=str | int | float | bool),
                   AfterValidator(_no_nul)]
ShellStr = Annotated[str, AfterValidator(_no_nul)]


def _a_path(value: str) -> str:
    """A folder or file path: not empty, no control characters (a line break splits the launch
    script's line)."""
    if not value.strip():
        raise ValueError("expected a folder or file path; got an empty one")
    problem = control_character(value)
    if problem is not None:
        raise ValueError(f"expected a path without control characters; it holds {problem}")
    return value


def _a_script(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a script path (train.py); got an empty one")
    _a_path(value)
    return value


def _a_module(value: str) -> str:
    """What ``python -m`` takes: a dotted module name (pkg.train), not a path or a flag."""
    if not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"expected a module name like pkg.train (what python -m takes); "
                         f"got {value!r}")
    return value


def node_range(value: Any) -> tuple[int, int] | None:
    """``nodes:`` written as an elastic range ``"MIN-MAX"``: (MIN, MAX); None for anything else
    (a count is validated as an int). ValueError for a range that makes no sense."""
    if not isinstance(value, str):
        return None
    match = _NODE_RANGE.fullmatch(value)
    if match is None:
        if value.strip().isdigit() and value.strip().isascii():
            return None
        raise ValueError("expected a node count (2) or an elastic range MIN-MAX (1-2: "
                         "up to MAX nodes, going on with MIN or more after losing some)")
    low, high = int(match.group(1)), int(match.group(2))
    if high > MAX_NODES:
        raise ValueError(f"expected at most {MAX_NODES} nodes; got {value.strip()[:30]!r}")
    if low < 1 or low > high:
        raise ValueError("expected a range MIN-MAX with 1 <= MIN <= MAX (1-2)")
    return low, high


def _max_of_range(value: Any) -> Any:
    if isinstance(value, (list, dict)) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a node count (2) or an elastic range MIN-MAX (1-2), a whole "
                         f"number; got {value!r}")
    found = node_range(value)
    return value if found is None else found[1]


class FsdpOptions(StrictModel):
    """accelerate's FSDP options under accelerate's names
    (``fsdp_`` prefixed forms accepted too)."""

    sharding_strategy: Annotated[
        Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"],
        BeforeValidator(lambda v: SHARDING_BY_NUMBER.get(v, v) if isinstance(v, int)
                        and not isinstance(v, bool) else _upper_enum(v)),
    ] = "FULL_SHARD"
    reshard_after_forward: bool | None = None
    auto_wrap_policy: Annotated[
        Literal["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"],
        BeforeValidator(_upper_enum)
    ] = "TRANSFORMER_BASED_WRAP"
    transformer_layer_cls_to_wrap: list[str] = Field(default_factory=list)
    min_num_params: int = Field(default=100_000_000, gt=0)
    offload_params: bool = False
    mixed_precision: Annotated[
        Literal["bf16", "fp16", "no"],
        BeforeValidator(lambda v: "no" if v is False or v is None else
                        (v.strip().lower() if isinstance(v, str) else v)),
    ] = "no"
    state_dict_type: Annotated[
        Literal["SHARDED_STATE_DICT", "FULL_STATE_DICT"], BeforeValidator(_upper_enum)
    ] = "SHARDED_STATE_DICT"
    backward_prefetch: Annotated[
        Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"], BeforeValidator(_upper_enum)
    ] = "BACKWARD_PRE"
    forward_prefetch: bool = False
    cpu_ram_efficient_loading: bool = False
    sync_module_states: bool = True
    use_orig_params: bool = True
    activation_checkpointing: bool = False
    version: Literal[1, 2] = 2
    xla: bool = False
    xla_fsdp_settings: dict[str, Any] = Field(default_factory=dict)
    xla_fsdp_grad_ckpt: bool = False
    # On an XLA device: FSDPv2 through SPMD when true, XlaFullyShardedDataParallel when false
    # (Hugging Face's fsdp_config name; false by default there). See fsdp_orch.runtime.xla_plan.
    xla_fsdp_v2: bool = True

    accepted_aliases: ClassVar[tuple[str, ...]] = ("backward_prefetch_policy",)

    @model_validator(mode="before")
    @classmethod
    def _accept_accelerate_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = fsdp_name(key) if isinstance(key, str) else key
            if name in out:
                raise ValueError(f"{key!r} given twice (with and without the fsdp_ prefix)")
            out[name] = value
        return out

    @field_validator("xla_fsdp_settings")
    @classmethod
    def _json_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        import json

        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError("expected plain YAML values (strings, numbers, "
                             f"lists, mappings): {exc}") from None
        return value

    @field_validator("transformer_layer_cls_to_wrap", mode="before")
    @classmethod
    def _split_classes(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class Backoff(StrictModel):
    # The wait before a restart, counted from the verdict: ``initial`` after an attempt that made
    # progress, growing by ``multiplier`` (up to ``max``) only over failures in a row without it
    # (supervise/policy.py), plus up to ``jitter``. 1 s: a restart after progress is what a long
    # run meets hundreds of times, and each second of it is lost by every rank.
    initial: PositiveDuration = 1.0
    max: PositiveDuration = 300.0
    multiplier: float = Field(default=2.0, ge=1.0)
    jitter: Duration = 1.0

    @model_validator(mode="after")
    def _ordered(self) -> Backoff:
        if self.max < self.initial:
            raise ValueError(f"max ({self.max:g}s) must be at least initial ({self.initial:g}s)")
        return self


class RestartPolicy(StrictModel):
    # A hard cap on restarts of any kind; None: none. What stops a job that fails without moving
    # forward is crash_loop_attempts: the failures in a row without progress (a new complete
    # checkpoint; for a job that has none, a step no attempt reached before).
    max_restarts: Count | None = Field(default=None, ge=0)
    backoff: Backoff = Field(default_factory=Backoff)
    retry_on: list[Literal[FAILURE_CATEGORIES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(DEFAULT_RETRY_ON))
    max_oom_restarts: Count = Field(default=1, ge=0)
    crash_loop_attempts: Count = Field(default=3, ge=2)


class Watch(StrictModel):
    heartbeat_timeout: Timeout = 300.0
    startup_timeout: Timeout = 900.0
    collective_timeout: Timeout = 600.0
    # adaptive: the hang window follows the ranks' own step times (supervise/hang_window.py),
    # between adaptive_min and heartbeat_timeout (the ceiling, and the window until a few steps are
    # timed); fixed: heartbeat_timeout always.
    hang_detection: Literal["fixed", "adaptive"] = "adaptive"
    adaptive_multiplier: float = Field(default=10.0, gt=1.0)  # x the 95th percentile step time
    adaptive_min: PollDuration = 2.0  # the adaptive window never drops below this
    poll_interval: PollDuration = 1.0
    # Whether the job starts torch ranks (a Python process that starts a process group or takes an
    # optimizer step, seen by the bootstrap): an attempt that exits 0 with none is then a failure
    # (no_ranks_started). None: yes for script/module jobs, no for command jobs.
    expect_ranks: bool | None = None
    # report: name a rank its peers keep waiting for in their collectives (a straggler: an event,
    # and a line of ``status ID``; supervise/stragglers.py); replace: also end the attempt at the
    # next complete checkpoint and run the next one without the straggler's node, where the kind
    # can (SLURM with spare_nodes); off: do not look.
    stragglers: Literal["report", "replace", "off"] = "report"
    # A node whose agent (or SSH report) says nothing for this long is lost: its attempt ends and
    # the next one runs without it where the kind can. 30 s: a stress trial paused whole jobs for
    # 10-15 s, as a VM pause or a live migration does, and the 10 s this was killed 2 of 4 of them;
    # a node that is really gone costs 20 s more than that (tests/integration/test_node_pause.py).
    node_timeout: Timeout = 30.0

    @model_validator(mode="after")
    def _poll_below_timeouts(self) -> Watch:
        if self.poll_interval > self.heartbeat_timeout:
            raise ValueError(f"poll_interval ({self.poll_interval:g}s) must be at most "
                             f"heartbeat_timeout ({self.heartbeat_timeout:g}s): a hang is seen "
                             "only at a poll")
        return self


class CheckpointPolicy(StrictModel):
    dir: Annotated[ShellStr, AfterValidator(_a_path)] | None = None
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


class LaunchOptions(StrictModel):
    # auto: each attempt's ranks start from a warm standby (a process per node that has imported
    # torch) where the launch allows it, else cold; off: always cold. ``render`` says which and why.
    standby: Literal["auto", "off"] = "auto"
    # How long an attempt runs before its keeper forks the next attempt's keeper from itself (a
    # fork, no import of torch: milliseconds, so 0 by default, as soon as the ranks have started).
    # An attempt that ends sooner prepares none, and a restart after it starts its keeper at once.
    prepare_standby_after: Duration = Field(default=0.0, ge=0)
    # The umask of the job's own program (its checkpoints and outputs), in octal ("0022": readable
    # by the group and others, as a script run by hand writes with the usual umask; "0077": yours
    # alone). Unset: the umask submit ran with, recorded at submit. fsdp-orch's own files (the run
    # folder, logs, heartbeats) stay 0600/0700 whatever it is.
    umask: str | None = None

    @field_validator("umask", mode="before")
    @classmethod
    def _umask(cls, value: Any) -> Any:
        from fsdp_orch.bootstrap.user_umask import parse_umask, umask_text

        if value is None:
            return None
        mask = parse_umask(value) if isinstance(value, str) else None
        if mask is None:
            raise ValueError(f"expected an octal umask in quotes, from \"000\" to \"0777\" (e.g. "
                             f"umask: \"022\"); got {value!r}")
        return umask_text(mask)

    @field_validator("standby", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML reads a bare ``off`` as false (and ``on`` as true).
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) else value


class JobSpec(StrictModel):
    name: str = Field(max_length=200)
    script: Annotated[ShellStr, AfterValidator(_a_script)] | None = None
    module: Annotated[ShellStr, AfterValidator(_a_module)] | None = None
    command: list[ArgStr] | None = None
    args: list[ArgStr] = Field(default_factory=list)
    launcher: Literal[LAUNCHERS] = "torchrun"  # type: ignore[valid-type]
    # A count, or an elastic range "MIN-MAX": ``nodes`` is the most the job runs on, ``min_nodes``
    # the fewest it goes on with after losing nodes (written back as the range it came from).
    nodes: Annotated[int, BeforeValidator(_max_of_range), at_most(MAX_NODES)] = Field(default=1,
                                                                                     gt=0)
    # SLURM: nodes allocated beyond ``nodes``, for attempts after a node is lost (None: the
    # profile's spare_nodes).
    spare_nodes: Annotated[int, at_most(MAX_NODES)] | None = Field(default=None, ge=0)
    procs_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] | None = Field(default=None, gt=0)
    env: dict[str, ValueOrRef] = Field(default_factory=dict)  # a value, or {from_env:}/{from_file:}
    workdir: Annotated[ShellStr, AfterValidator(_a_path)] = "."
    accelerate_config: Annotated[str, AfterValidator(_a_path)] | None = None
    fsdp: FsdpOptions = Field(default_factory=FsdpOptions)
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    watch: Watch = Field(default_factory=Watch)
    launch: LaunchOptions = Field(default_factory=LaunchOptions)
    notify: list[Webhook] = Field(default_factory=list)
    fit: FitOptions | None = None  # what ``fsdp-orch fit`` estimates the GPUs' memory for
    _min_nodes: int | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _elastic_nodes(cls, data: Any, handler: ModelWrapValidatorHandler[JobSpec]) -> JobSpec:
        job = handler(data)  # a bad range fails here, as an error of the field nodes
        found = node_range(data.get("nodes")) if isinstance(data, dict) else None
        if found is not None:
            job._min_nodes = found[0]
        return job

    @field_serializer("nodes")
    def _nodes_as_written(self, nodes: int) -> int | str:
        return self.nodes_text if self.min_nodes < nodes else nodes

    @property
    def expects_ranks(self) -> bool:
        """Whether an attempt that started no torch rank failed (``watch.expect_ranks``)."""
        return (self.watch.expect_ranks if self.watch.expect_ranks is not None
                else self.command is None)

    @property
    def min_nodes(self) -> int:
        """The fewest nodes the job goes on with (``nodes: MIN-MAX``); ``nodes`` when fixed."""
        return self._min_nodes if self._min_nodes is not None else self.nodes

    @property
    def nodes_text(self) -> str:
        """``nodes`` as the user wrote it: ``2`` or ``1-2``."""
        return str(self.nodes) if self.min_nodes == self.nodes else f"{self.min_nodes}-{self.nodes}"

    @field_validator("launcher", mode="before")
    @classmethod
    def _launcher(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> Any:
        import shlex

        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split command into words: {exc}") from None
        return value

    @field_validator("command")
    @classmethod
    def _program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("expected at least one word: the program and its arguments")
        if value is not None and not value[0].strip():
            raise ValueError(f"expected a program as the first word; got {value[0]!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        check_env_names(value)
        fault = value.get("FSDP_ORCH_FAULT")
        if isinstance(fault, str) and fault:
            parse_faults(fault)  # a chaos test that injects nothing is a lie
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip():  # also what a bidi override or a zero-width space hides in
            raise ValueError("expected a non-empty name")
        problem = control_character(value)  # a line break would break the status table's rows
        if problem is not None:
            raise ValueError(f"expected a name without control characters; it holds {problem}")
        return value

    @model_validator(mode="after")
    def _one_entry_point(self) -> JobSpec:
        given = [k for k in ("script", "module", "command") if getattr(self, k)]
        if len(given) != 1:
            what = "none" if not given else " and ".join(given)
            raise ValueError(f"expected exactly one of script, module or command; got {what}")
        return self

    @property
    def entry(self) -> tuple[str, str]:
        """(kind, value): ('script', 'train.py'), ('module', 'pkg.train') or ('command', argv0)."""
        if self.script:
            return ("script", self.script)
        if self.module:
            return ("module", self.module)
        assert self.command
        return ("command", self.command[0])
