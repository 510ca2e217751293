"""What a tick does, given the schedule's runs still going: pure."""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.jobspec.schedule import Concurrency


@dataclass(frozen=True)
class TickAction:
    submit: bool
    cancel: tuple[str, ...] = ()  # runs to cancel first (replace)
    reason: str | None = None  # why not submitted (forbid)


def decide(concurrency: Concurrency, active_runs: list[str]) -> TickAction:
    """``forbid``: skip while a run goes on; ``replace``: cancel the runs going on, then submit;
    ``allow``: submit."""
    if not active_runs or concurrency == "allow":
        return TickAction(submit=True)
    if concurrency == "forbid":
        return TickAction(submit=False,
                          reason=f"the previous run {active_runs[-1]} is still active "
                                 "(concurrency: forbid)")
    if concurrency == "replace":
        return TickAction(submit=True, cancel=tuple(active_runs))
    raise ValueError(f"unknown concurrency {concurrency!r}")


def tick_key(name: str, utc_tick: str) -> str:
    """The idempotency key of a schedule's tick: a tick submitted twice is one job."""
    return f"schedule:{name}@{utc_tick}"


__all__ = ["TickAction", "decide", "tick_key"]
