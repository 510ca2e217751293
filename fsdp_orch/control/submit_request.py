"""What a user asks of ``submit``, as one value: the job file, the cluster and the options, whether
they came from the command line or from the Python API. Making one checks the rules for combining
the options (``--timeout`` only with ``--wait``, ``--resume`` or ``--fresh`` ...), written once for
both; each surface names the options in its own words. Pure: no I/O, so a request is checked before
anything is opened or written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fsdp_orch.jobspec.sizes import size_argument
from fsdp_orch.vocab import inputs
from fsdp_orch.vocab.errors import InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.control.resubmit import Choice


@dataclass(frozen=True)
class Words:
    """How a surface names submit's options in the errors of the rules."""

    wait: str
    timeout: str
    idempotency_key: str
    blank_key: str  # the whole message; ``{key!r}`` is the key given
    init_from: str
    init_optimizer: str
    resume: str
    fresh: str
    resume_or_fresh: str
    gpu_memory: str
    no_fit_check: str  # how to submit without the fit check
    fit_changes: str  # where the changes that would make a job fit are


CLI_WORDS = Words(
    wait="--wait", timeout="--timeout", idempotency_key="--idempotency-key",
    blank_key="expected a non-empty key; got {key!r}", init_from="--init-from",
    init_optimizer="--init-optimizer", resume="--resume (continue the checkpoint there)",
    fresh="--fresh (move it aside and start over)", resume_or_fresh="--resume/--fresh",
    gpu_memory="--gpu-memory", no_fit_check="--no-fit-check", fit_changes="as above")
API_WORDS = Words(
    wait="wait=True", timeout="timeout", idempotency_key="idempotency_key",
    blank_key="expected a non-empty key, or None", init_from="init_from",
    init_optimizer="init_optimizer", resume="resume=True", fresh="fresh=True",
    resume_or_fresh="resume/fresh", gpu_memory="gpu_memory", no_fit_check="fit_check=False",
    fit_changes="as the exception's suggestions say")


@dataclass(frozen=True)
class SubmitRequest:
    """One submission as asked for. InputError (exit 2, one line) when the options do not go
    together; the job file and the cluster are read later, by planning."""

    job_file: Path
    cluster: str
    overrides: tuple[str, ...] = ()  # ``--set`` lines, KEY.PATH=VALUE
    accelerate_config: str | None = None
    wait: bool = False
    timeout: str | float | None = None  # as given: a duration (90s, 2h) or a number of seconds
    idempotency_key: str | None = None
    init_from: str | None = None  # a warm start: a job id or a checkpoint path
    init_optimizer: bool = False
    resume: bool = False
    fresh: bool = False
    # The fit check the CLI and the API make before anything is written (control/fit_gate; a
    # schedule's tick is not checked), and the GPU memory it holds the job against, as given (80GB
    # or bytes), in place of the profile's and the cluster's.
    fit_check: bool = True
    gpu_memory: str | int | None = None
    # Who asked besides a user (a schedule's tick); recorded with the job.
    origin: Mapping[str, object] | None = None
    home_dir: Path | None = None  # whose runs folder takes the job; None: $FSDP_ORCH_HOME's
    words: Words = field(default=CLI_WORDS, repr=False, compare=False)
    wait_s: float | None = field(init=False, default=None)  # the timeout in seconds
    gpu_memory_bytes: int | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        words = self.words
        object.__setattr__(self, "wait_s", self._wait_seconds())
        if self.init_from is not None:  # before the index is opened: bad input writes nothing
            inputs.init_from(self.init_from, words.init_from)
        key = self.idempotency_key
        if key is not None and not key.strip():
            raise InputError(words.blank_key.format(key=key), field=words.idempotency_key)
        if key is not None:  # a key is written into the index and shown (issue 61)
            inputs.plain_text(key, words.idempotency_key, "a key")
        if self.init_optimizer and not self.init_from:
            raise InputError(f"only with {words.init_from} (the checkpoint whose optimizer state "
                             "to take)", field=words.init_optimizer)
        if self.resume and self.fresh:
            raise InputError(f"expected one of {words.resume} or {words.fresh}, not both",
                             field=words.resume_or_fresh)
        if self.gpu_memory is not None:
            if not self.fit_check:
                raise InputError(f"only without {words.no_fit_check} (it is the memory the fit "
                                 "check holds the job against)", field=words.gpu_memory)
            object.__setattr__(self, "gpu_memory_bytes",
                               size_argument(self.gpu_memory, words.gpu_memory))

    def _wait_seconds(self) -> float | None:
        if self.timeout is None:
            return None
        if not self.wait:
            raise InputError(f"only with {self.words.wait} (how long to wait for the job to end)",
                             field=self.words.timeout)
        if not isinstance(self.timeout, str):
            return inputs.seconds(self.timeout, self.words.timeout)
        from fsdp_orch.jobspec.durations import parse_duration

        try:
            return parse_duration(self.timeout)
        except ValueError as exc:
            raise InputError(str(exc), field=self.words.timeout) from None

    @property
    def checkpoint_choice(self) -> Choice | None:
        """What to do with a complete checkpoint already in the job's folder (control/resubmit)."""
        return "resume" if self.resume else "fresh" if self.fresh else None

    @property
    def checkpoint_per_job(self) -> bool:
        """A scheduled run keeps its checkpoints apart from the run before it."""
        return self.origin is not None and "schedule" in self.origin


__all__ = ["API_WORDS", "CLI_WORDS", "SubmitRequest", "Words"]
