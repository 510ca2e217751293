"""The job spec's schema (``job.yaml``): what to run, and how to restart, watch and launch it (how
to shard it: ``jobspec.fsdp_options``; how to checkpoint it: ``jobspec.checkpoint_policy``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    field_serializer,
    field_validator,
    model_validator,
)

from fsdp_orch.bootstrap.faults import parse_faults
from fsdp_orch.jobspec.checkpoint_policy import CheckpointPolicy
from fsdp_orch.jobspec.field_types import (
    ArgStr,
    Count,
    Duration,
    PollDuration,
    PositiveDuration,
    ShellStr,
    Timeout,
    a_module,
    a_path,
    a_script,
    max_of_range,
    node_range,
)
from fsdp_orch.jobspec.fit import FitOptions
from fsdp_orch.jobspec.fsdp_options import FsdpOptions
from fsdp_orch.jobspec.limits import MAX_NODES, MAX_PROCS_PER_NODE, at_most
from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.jobspec.secrets import SecretRef, ValueOrRef
from fsdp_orch.jobspec.validation import StrictModel, check_env_names
from fsdp_orch.vocab.categories import DEFAULT_RETRY_ON, FAILURE_CATEGORIES
from fsdp_orch.vocab.inputs import control_character

LAUNCHERS = ("torchrun", "accelerate", "xla", "python")


class Backoff(StrictModel):
    # The wait before a restart, counted from the verdict: ``initial`` after an attempt that made
    # progress, growing by ``multiplier`` (up to ``max``) only over failures in a row without it
    # (decide/policy.py), plus up to ``jitter``. 1 s: a restart after progress is what a long
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
    # adaptive: the hang window follows the ranks' own step times (decide/hang_window.py),
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
    # and a line of ``status ID``; decide/stragglers.py); replace: also end the attempt at the
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
    script: Annotated[ShellStr, AfterValidator(a_script)] | None = None
    module: Annotated[ShellStr, AfterValidator(a_module)] | None = None
    command: list[ArgStr] | None = None
    args: list[ArgStr] = Field(default_factory=list)
    launcher: Literal[LAUNCHERS] = "torchrun"  # type: ignore[valid-type]
    # A count, or an elastic range "MIN-MAX": ``nodes`` is the most the job runs on, ``min_nodes``
    # the fewest it goes on with after losing nodes (written back as the range it came from).
    nodes: Annotated[int, BeforeValidator(max_of_range), at_most(MAX_NODES)] = Field(default=1,
                                                                                     gt=0)
    # SLURM: nodes allocated beyond ``nodes``, for attempts after a node is lost (None: the
    # profile's spare_nodes).
    spare_nodes: Annotated[int, at_most(MAX_NODES)] | None = Field(default=None, ge=0)
    procs_per_node: Annotated[int, at_most(MAX_PROCS_PER_NODE)] | None = Field(default=None, gt=0)
    env: dict[str, ValueOrRef] = Field(default_factory=dict)  # a value, or {from_env:}/{from_file:}
    workdir: Annotated[ShellStr, AfterValidator(a_path)] = "."
    accelerate_config: Annotated[str, AfterValidator(a_path)] | None = None
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
