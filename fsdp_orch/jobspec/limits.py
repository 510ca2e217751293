"""The bounds of a job's and a profile's numbers, written once (issue 61): a value beyond them is a
typo or an attack, never a setup (10**12 processes a node, a timeout shorter than a poll). Each is
an ``AfterValidator`` so the error names the field and says the bound."""

from __future__ import annotations

from typing import Any

from pydantic import AfterValidator

MAX_NODES = 100_000  # nodes, spare_nodes, TPU workers: the largest clusters have ~50k nodes
MAX_PROCS_PER_NODE = 1024  # processes (ranks) a node; GPUs a node
MAX_CPUS = 100_000  # cpus_per_task
MAX_COUNT = 1_000_000  # restarts, checkpoints kept, a micro-batch
MAX_STEPS = 1_000_000_000  # steps between checkpoints
MAX_SEQ_LEN = 100_000_000  # tokens of a sequence
MAX_LORA_RANK = 65_536
MAX_SECONDS_SETTING = 7 * 86_400  # an integer number of seconds a profile waits (a week)
MIN_TIMEOUT_S = 1.0  # a hang, startup, collective or node timeout: shorter is below a poll
MIN_POLL_S = 0.1  # how often the supervisor looks, and the adaptive window's floor


def at_most(bound: int) -> AfterValidator:
    def check(value: Any) -> Any:
        if value is not None and value > bound:
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}... " \
                f"({len(str(value))} digits)"
            raise ValueError(f"expected at most {bound}; got {shown}")
        return value
    return AfterValidator(check)


def at_least_seconds(bound: float) -> AfterValidator:
    def check(value: Any) -> Any:
        if value is not None and value < bound:
            raise ValueError(f"expected at least {bound:g}s (a shorter one is less than a poll "
                             f"of the supervisor); got {value:g}s")
        return value
    return AfterValidator(check)


def ascii_digits(value: Any) -> Any:
    """A count given as text must be ASCII digits (int() and pydantic take '٣' as 3)."""
    if isinstance(value, str) and not value.strip().isascii():
        raise ValueError(f"expected a whole number in ASCII digits; got {value!r}")
    return value


__all__ = ["MAX_COUNT", "MAX_NODES", "MAX_PROCS_PER_NODE", "MIN_POLL_S", "MIN_TIMEOUT_S",
           "ascii_digits", "at_least_seconds", "at_most"]
